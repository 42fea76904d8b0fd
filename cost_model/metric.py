"""How well a model ranks programs: pairwise accuracy (the figure reported for models).

    predictions (higher = faster) + measured costs (seconds) --pairwise_accuracy--> [0, 1]
"""

from __future__ import annotations

import numpy as np

MAX_PAIRWISE_N = 4000  # above this many items per group, a seeded sample of pairs is scored


def _group_accuracy(p: np.ndarray, c: np.ndarray, rng: np.random.Generator, min_ratio: float = 1.0) -> tuple:
    n = len(p)
    if n > MAX_PAIRWISE_N:
        i = rng.integers(0, n, MAX_PAIRWISE_N * 64)
        j = rng.integers(0, n, MAX_PAIRWISE_N * 64)
    else:
        i, j = np.triu_indices(n, 1)
    dc = c[i] - c[j]
    keep = dc != 0
    if min_ratio > 1.0:
        with np.errstate(over="ignore"):
            keep &= np.maximum(c[i], c[j]) > min_ratio * np.minimum(c[i], c[j])
    dc, dp = dc[keep], p[i][keep] - p[j][keep]
    # i is faster (dc < 0) and predicted higher (dp > 0), or the reverse; ties count half.
    right = np.sum(np.sign(dp) == -np.sign(dc)) + 0.5 * np.sum(dp == 0)
    return float(right), int(keep.sum())


def pairwise_accuracy(preds, costs, groups=None, min_ratio: float = 1.0) -> float:
    """The fraction of pairs of programs that ``preds`` orders like ``costs``.

    Parameters
    ----------
    preds : array [n], scores, higher = predicted faster
    costs : array [n], measured seconds (failed programs: a huge cost such as 1e10 or inf)
    groups : array [n] of task ids or None; pairs are only formed within a group
    min_ratio : float, only pairs whose costs differ by more than this factor are scored
        (1.0: every pair with distinct costs; e.g. 1.5 leaves out the pairs that measurement
        noise on a busy machine can swap)

    Pairs with equal costs are skipped; equal predictions count 0.5.  Returns
    0.5 when there is no pair to judge.  Above MAX_PAIRWISE_N programs per
    group a fixed-seed sample of pairs is scored.
    """
    p = np.asarray(preds, dtype=np.float64)
    c = np.asarray(costs, dtype=np.float64)
    c = np.where(np.isfinite(c), c, np.finfo(np.float64).max)
    g = np.zeros(len(p), np.int64) if groups is None else np.asarray(groups)
    rng = np.random.default_rng(0)
    right, total = 0.0, 0
    for gid in np.unique(g):
        m = g == gid
        r, t = _group_accuracy(p[m], c[m], rng, min_ratio)
        right, total = right + r, total + t
    return right / total if total else 0.5


__all__ = ["pairwise_accuracy"]
