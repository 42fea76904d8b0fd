"""LightGBM training for the three objectives of LGBMModel.

    per-state feature arrays [n_stores_i, F] + normalized throughput y_i
      --train_pack_rank--> Booster over rows; score(state) = sum of its rows' outputs,
                           pairwise logistic loss within each task (the default)
      --train_pack_sum---> Booster over rows; the same score, Ansor's weighted squared error
      --train_rank-------> Booster over per-state vectors (mean | sum | mean+max of rows),
                           lambdarank within each task

Pack-sum is Ansor's objective (section 5.2; TVM's ``xgb_model.py``
``pack_sum_square_error``): the prediction of a program is the sum of the
predictions of its stores, and the loss is ``w_i/2 * (sum_rows_i - y_i)^2``.
LightGBM has no such objective, so a custom one gives each row the gradient
``w_i * (sum_rows_i - y_i)`` of its state and the hessian ``w_i``, with the
weight ``w_i = y_i`` (plus a small floor so failed programs still teach the
model that they are slow).

Pack-rank keeps the pack-sum score but trains it with the pairwise logistic
(RankNet) loss ``log(1 + exp(-(s_better - s_worse)))`` over pairs of programs of
one task whose throughputs differ by more than PAIR_MIN_RATIO (closer pairs are
measurement noise on a busy machine): the rank loss of TenSet's and TLP's cost
models, on Ansor's per-store form.  Only the order of the scores is learnt.

The ranking alternative turns each state into one vector and trains
LightGBM's ``lambdarank`` with the throughput quantized to 0..30 relevance
levels, one query group per task (split into chunks of at most
``MAX_GROUP`` states, LightGBM's limit being 10000 rows per query).

Hyperparameters: with a few hundred measured programs and 177 features, pack-rank
ranks held-out programs better with small trees (PACK_RANK_PARAMS: 7 leaves, at least
5 rows per leaf, an L2 penalty of 1, learning rate 0.05 over 200 rounds) than with the
deeper, nearly unregularized trees of BASE_PARAMS that pack-sum and lambdarank keep;
and with LightGBM's extremely randomized trees (``extra_trees``: each split tries one
random threshold per feature), which average out the noise of a busy machine's timings
better.  Chosen by 4-fold cross-validation on the training parts (first two thirds) of
nine W1/W2 record files only, never on their held-out thirds: over 7 or 15 leaves and 5
or 10 rows per leaf on TVM's 164 columns, extra trees won in each of the four settings
(mean pairwise accuracy 0.730-0.739 without, 0.751-0.756 with), and 7 leaves with 5 rows
per leaf was best.

Tiny data sets.  LightGBM bins every feature before training and drops the ones it
could never split on (constant, or too few rows to fill two bins of
``min_data_in_bin`` rows); when none is left it refuses to train ("Check failed:
num_features() > 0"), which happens with the few rows of one or two measured
programs.  Both trainers build the Dataset first and return None in that case
(:func:`splittable_dataset`), so a caller keeps its previous model instead.
"""

from __future__ import annotations

import numpy as np

from .feature import pack_features

MAX_GROUP = 2000           # states per lambdarank query group
RANK_LEVELS = 31           # relevance levels 0..30 (LightGBM's default label_gain covers 31)
RANK_LOG_STEP = 6          # relevance levels per halving of throughput
WEIGHT_FLOOR = 0.05        # pack-sum weight of a state with throughput 0

PAIR_MIN_RATIO = 1.05     # pack-rank pairs: throughputs differ by more than 5%
MAX_PAIRS = 200_000        # pack-rank pairs per task (a seeded sample above)

LEGACY_PARAMS = {          # pack-sum's and lambdarank's hyperparameters (and all objectives' before pack-rank)
    "learning_rate": 0.1,
    "num_leaves": 31,
    "max_depth": 10,
    "min_data_in_leaf": 2,
    "min_sum_hessian_in_leaf": 1e-4,
    "lambda_l2": 0.01,
    "feature_fraction": 1.0,
}
BASE_PARAMS = {
    **LEGACY_PARAMS,
    "verbose": -1,
    "deterministic": True,
    "force_row_wise": True,
}
PACK_RANK_PARAMS = {       # pack-rank's own, over BASE_PARAMS (see the module docstring)
    "learning_rate": 0.05,
    "num_leaves": 7,
    "min_data_in_leaf": 5,
    "lambda_l2": 1.0,
    "extra_trees": True,
}


def _lgb():
    import lightgbm
    return lightgbm


def _params(num_threads: int, seed: int, **extra) -> dict:
    return {**BASE_PARAMS, "num_threads": num_threads, "seed": seed, **extra}


def splittable_dataset(lgb, X: np.ndarray, params: dict, free_raw_data: bool = True, **fields):
    """``lgb.Dataset(X, params=params, **fields)``, constructed, or None when LightGBM
    keeps no feature it could split on (every column constant, or too few rows to fill
    two bins of ``min_data_in_bin`` rows: LightGBM then refuses to train).

    X: float [rows, F] with at least one row; fields: label, group, ... of the Dataset.
    """
    ds = lgb.Dataset(X, params=params, free_raw_data=free_raw_data, **fields).construct()
    if not any(ds.feature_num_bin(i) > 1 for i in range(ds.num_feature())):
        return None
    return ds


# ---------------------------------------------------------------------------
# Pack-sum regression
# ---------------------------------------------------------------------------

def pack_sum_objective(pack_ids: np.ndarray, y: np.ndarray, w: np.ndarray):
    """A LightGBM objective ``f(preds, dataset) -> (grad, hess)`` for the pack-sum square error.

    pack_ids: int [rows], the state of each row; y, w: float [states].
    """
    n = len(y)

    def objective(preds, _dataset):
        sums = np.bincount(pack_ids, weights=preds, minlength=n)
        grad = (w * (sums - y))[pack_ids]
        hess = w[pack_ids]
        return grad, hess

    return objective


def train_pack_sum(features: list, y: np.ndarray, num_rounds: int = 200,
                   num_threads: int = 1, seed: int = 0, params: dict | None = None):
    """Train the pack-sum model.

    features: list of float32 [n_stores_i, F] (at least one state); y: float [n_states]
    normalized throughput in [0, 1].  Returns a ``lightgbm.Booster`` whose raw row outputs
    sum to the state score (:func:`predict_pack_sum`), or None when LightGBM finds no
    feature to split on (:func:`splittable_dataset`: too few rows, or all alike).
    """
    lgb = _lgb()
    X, pack_ids = pack_features(features)
    y = np.asarray(y, np.float64)
    w = np.maximum(y, WEIGHT_FLOOR)
    base = _params(num_threads, seed, **(params or {}))
    ds = splittable_dataset(lgb, X, base, label=y[pack_ids])
    if ds is None:
        return None
    return lgb.train({**base, "objective": pack_sum_objective(pack_ids, y, w)}, ds, num_boost_round=num_rounds)


def pair_index(y: np.ndarray, groups: np.ndarray, max_pairs: int, rng: np.random.Generator,
               min_ratio: float = 1.0) -> tuple:
    """The training pairs of the pairwise objective: ``(better, worse)`` int64 index arrays.

    y: float [n_states] normalized throughput (0 for failures); groups: int [n_states], the
    task of each state.  A pair is two states of one task whose throughputs differ by more
    than the factor ``min_ratio`` (failures are worse than every success; two failures
    make no pair).  Above ``max_pairs`` pairs per task a seeded uniform sample is kept.
    """
    better, worse = [], []
    for g in np.unique(groups):
        idx = np.flatnonzero(groups == g)
        i, j = np.triu_indices(len(idx), 1)
        i, j = idx[i], idx[j]
        hi, lo = np.maximum(y[i], y[j]), np.minimum(y[i], y[j])
        keep = (hi > 0) & (hi > lo * min_ratio) & (hi != lo)
        i, j = i[keep], j[keep]
        if len(i) > max_pairs:
            pick = rng.choice(len(i), max_pairs, replace=False)
            i, j = i[pick], j[pick]
        swap = y[i] < y[j]
        better.append(np.where(swap, j, i))
        worse.append(np.where(swap, i, j))
    if not better:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    return np.concatenate(better).astype(np.int64), np.concatenate(worse).astype(np.int64)


def pack_rank_objective(pack_ids: np.ndarray, n_states: int, better: np.ndarray, worse: np.ndarray):
    """A LightGBM objective for the pairwise logistic (RankNet) loss on pack-sum scores.

    A state's score is the sum of its rows' outputs (as in pack-sum); each pair
    ``(b, w)`` adds ``log(1 + exp(-(s_b - s_w)))``.  The gradient and the (diagonal)
    hessian of a state are those of its score, given to each of its rows and divided
    by the state's number of pairs so every measured state weighs alike.
    pack_ids: int [rows]; better, worse: int [pairs] state indices.
    """
    per_state = np.bincount(better, minlength=n_states) + np.bincount(worse, minlength=n_states)
    norm = 1.0 / np.maximum(per_state, 1)

    def objective(preds, _dataset):
        s = np.bincount(pack_ids, weights=preds, minlength=n_states)
        p = 1.0 / (1.0 + np.exp(-(s[better] - s[worse])))  # P(better ranked above worse)
        g_pair, h_pair = p - 1.0, np.maximum(p * (1.0 - p), 1e-6)
        grad = (np.bincount(better, weights=g_pair, minlength=n_states)
                - np.bincount(worse, weights=g_pair, minlength=n_states)) * norm
        hess = (np.bincount(better, weights=h_pair, minlength=n_states)
                + np.bincount(worse, weights=h_pair, minlength=n_states)) * norm
        return grad[pack_ids], np.maximum(hess, 1e-6)[pack_ids]

    return objective


def train_pack_rank(features: list, y: np.ndarray, groups: np.ndarray, num_rounds: int = 200,
                    num_threads: int = 1, seed: int = 0, params: dict | None = None,
                    max_pairs: int = MAX_PAIRS, min_ratio: float = PAIR_MIN_RATIO, init_model=None):
    """Train a pack-sum model with the pairwise logistic loss (TenSet's and TLP's rank loss).

    features: list of float32 [n_stores_i, F]; y: float [n_states] normalized throughput;
    groups: int [n_states] task ids (pairs are formed within a task only).  Returns a
    ``lightgbm.Booster`` whose raw row outputs sum to the state score (:func:`predict_pack_sum`;
    :func:`predict_pack_rank` maps it into (0, 1)), or None when there is no pair or LightGBM
    finds no feature to split on.  ``params`` go over PACK_RANK_PARAMS; ``max_pairs`` and
    ``min_ratio``: see :func:`pair_index`.  ``init_model``: a Booster of the same columns to
    continue from (transfer learning): the returned Booster holds its trees and the new ones,
    fitted to the pairs of ``features`` starting from its scores.
    """
    lgb = _lgb()
    X, pack_ids = pack_features(features)
    y = np.asarray(y, np.float64)
    better, worse = pair_index(y, np.asarray(groups), max_pairs, np.random.default_rng(seed), min_ratio)
    if len(better) == 0:
        return None
    base = _params(num_threads, seed, **{**PACK_RANK_PARAMS, **(params or {})})
    ds = splittable_dataset(lgb, X, base, free_raw_data=init_model is None, label=y[pack_ids])
    if ds is None:
        return None
    obj = pack_rank_objective(pack_ids, len(features), better, worse)
    return lgb.train({**base, "objective": obj}, ds, num_boost_round=num_rounds, init_model=init_model)


def predict_pack_sum(booster, features: list) -> np.ndarray:
    """float64 [n_states]: the sum of each state's row predictions."""
    X, pack_ids = pack_features(features)
    if len(X) == 0:
        return np.zeros(0)
    raw = booster.predict(X, raw_score=True)
    return np.bincount(pack_ids, weights=raw, minlength=len(features))


def predict_pack_rank(booster, features: list) -> np.ndarray:
    """float64 [n_states] in (0, 1): the sigmoid of the pack-sum score of a pairwise-trained model.

    Order-preserving, and non-negative so that the evolutionary search, which picks
    parents with probability proportional to the score, can use it directly.
    """
    return 1.0 / (1.0 + np.exp(-predict_pack_sum(booster, features)))


# ---------------------------------------------------------------------------
# Ranking
# ---------------------------------------------------------------------------

def state_vectors(features: list, agg: str = "mean_max") -> np.ndarray:
    """One float32 vector per state from its rows: ``"mean"``, ``"sum"`` or ``"mean_max"`` ([mean, max])."""
    if agg == "mean":
        return np.stack([f.mean(axis=0) for f in features])
    if agg == "sum":
        return np.stack([f.sum(axis=0) for f in features])
    if agg == "mean_max":
        return np.stack([np.concatenate([f.mean(axis=0), f.max(axis=0)]) for f in features])
    raise ValueError(f"unknown aggregation {agg!r}")


def relevance(y: np.ndarray) -> np.ndarray:
    """Normalized throughput in [0, 1] -> int relevance 0..RANK_LEVELS-1 on a log scale.

    Each halving of the throughput costs ``RANK_LOG_STEP`` levels (1.0 -> 30,
    0.5 -> 24, ... below 1/32 -> 0).  Linear levels lumped every program
    slower than 1/30 of the best into level 0 and ranked worse on held-out
    matmul records (0.63-0.68 pairwise accuracy against 0.73-0.75).
    """
    top = RANK_LEVELS - 1
    levels = top + RANK_LOG_STEP * np.log2(np.maximum(np.asarray(y, np.float64), 1e-12))
    return np.clip(np.rint(levels), 0, top).astype(np.int32)


def _query_order(groups: np.ndarray, rng: np.random.Generator) -> tuple:
    """Row order that makes each query contiguous, and the query sizes."""
    order, sizes = [], []
    for g in np.unique(groups):
        idx = np.flatnonzero(groups == g)
        idx = idx[rng.permutation(len(idx))]
        for start in range(0, len(idx), MAX_GROUP):
            chunk = idx[start:start + MAX_GROUP]
            order.append(chunk)
            sizes.append(len(chunk))
    return np.concatenate(order), np.asarray(sizes)


def train_rank(features: list, y: np.ndarray, groups: np.ndarray, agg: str = "mean_max",
               num_rounds: int = 200, num_threads: int = 1, seed: int = 0, params: dict | None = None):
    """Train a lambdarank model over per-state vectors, one query per task.

    groups: int [n_states], the task of each state (at least one state).  Returns a
    ``lightgbm.Booster``, or None when LightGBM finds no feature to split on
    (:func:`splittable_dataset`).
    """
    lgb = _lgb()
    X = state_vectors(features, agg)
    order, sizes = _query_order(np.asarray(groups), np.random.default_rng(seed))
    labels = relevance(y)[order]
    base = _params(num_threads, seed, **(params or {}))
    ds = splittable_dataset(lgb, X[order], base, label=labels, group=sizes)
    if ds is None:
        return None
    return lgb.train({**base, "objective": "lambdarank", "lambdarank_truncation_level": int(min(max(sizes), 64))},
                     ds, num_boost_round=num_rounds)


def predict_rank(booster, features: list, agg: str = "mean_max") -> np.ndarray:
    """float64 [n_states] in (0, 1): the sigmoid of the ranking score (order-preserving, non-negative)."""
    if not features:
        return np.zeros(0)
    raw = booster.predict(state_vectors(features, agg), raw_score=True)
    return 1.0 / (1.0 + np.exp(-np.asarray(raw, np.float64)))


__all__ = ["train_pack_sum", "predict_pack_sum", "train_rank", "predict_rank", "train_pack_rank",
           "predict_pack_rank", "pack_rank_objective", "pair_index", "LEGACY_PARAMS", "PACK_RANK_PARAMS",
           "PAIR_MIN_RATIO",
           "pack_sum_objective", "state_vectors", "relevance", "splittable_dataset", "BASE_PARAMS"]
