"""LightGBM training for the two objectives the LGBMModel chooses between.

    per-state feature arrays [n_stores_i, F] + normalized throughput y_i
      --train_pack_sum--> Booster over rows;  score(state) = sum of its rows' outputs
      --train_rank-----> Booster over per-state vectors (mean | sum | mean+max of rows),
                         lambdarank within each task

Pack-sum is Ansor's objective (section 5.2; TVM's ``xgb_model.py``
``pack_sum_square_error``): the prediction of a program is the sum of the
predictions of its stores, and the loss is ``w_i/2 * (sum_rows_i - y_i)^2``.
LightGBM has no such objective, so a custom one gives each row the gradient
``w_i * (sum_rows_i - y_i)`` of its state and the hessian ``w_i``, with the
weight ``w_i = y_i`` (plus a small floor so failed programs still teach the
model that they are slow).

The ranking alternative turns each state into one vector and trains
LightGBM's ``lambdarank`` with the throughput quantized to 0..30 relevance
levels, one query group per task (split into chunks of at most
``MAX_GROUP`` states, LightGBM's limit being 10000 rows per query).

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

BASE_PARAMS = {
    "learning_rate": 0.1,
    "num_leaves": 31,
    "max_depth": 10,
    "min_data_in_leaf": 2,
    "min_sum_hessian_in_leaf": 1e-4,
    "lambda_l2": 0.01,
    "feature_fraction": 1.0,
    "verbose": -1,
    "deterministic": True,
    "force_row_wise": True,
}


def _lgb():
    import lightgbm
    return lightgbm


def _params(num_threads: int, seed: int, **extra) -> dict:
    return {**BASE_PARAMS, "num_threads": num_threads, "seed": seed, **extra}


def splittable_dataset(lgb, X: np.ndarray, params: dict, **fields):
    """``lgb.Dataset(X, params=params, **fields)``, constructed, or None when LightGBM
    keeps no feature it could split on (every column constant, or too few rows to fill
    two bins of ``min_data_in_bin`` rows: LightGBM then refuses to train).

    X: float [rows, F] with at least one row; fields: label, group, ... of the Dataset.
    """
    ds = lgb.Dataset(X, params=params, free_raw_data=True, **fields).construct()
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
                   num_threads: int = 1, seed: int = 0):
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
    ds = splittable_dataset(lgb, X, _params(num_threads, seed), label=y[pack_ids])
    if ds is None:
        return None
    params = _params(num_threads, seed, objective=pack_sum_objective(pack_ids, y, w))
    return lgb.train(params, ds, num_boost_round=num_rounds)


def predict_pack_sum(booster, features: list) -> np.ndarray:
    """float64 [n_states]: the sum of each state's row predictions."""
    X, pack_ids = pack_features(features)
    if len(X) == 0:
        return np.zeros(0)
    raw = booster.predict(X, raw_score=True)
    return np.bincount(pack_ids, weights=raw, minlength=len(features))


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
               num_rounds: int = 200, num_threads: int = 1, seed: int = 0):
    """Train a lambdarank model over per-state vectors, one query per task.

    groups: int [n_states], the task of each state (at least one state).  Returns a
    ``lightgbm.Booster``, or None when LightGBM finds no feature to split on
    (:func:`splittable_dataset`).
    """
    lgb = _lgb()
    X = state_vectors(features, agg)
    order, sizes = _query_order(np.asarray(groups), np.random.default_rng(seed))
    labels = relevance(y)[order]
    ds = splittable_dataset(lgb, X[order], _params(num_threads, seed), label=labels, group=sizes)
    if ds is None:
        return None
    params = _params(num_threads, seed, objective="lambdarank",
                     lambdarank_truncation_level=int(min(max(sizes), 64)))
    return lgb.train(params, ds, num_boost_round=num_rounds)


def predict_rank(booster, features: list, agg: str = "mean_max") -> np.ndarray:
    """float64 [n_states] in (0, 1): the sigmoid of the ranking score (order-preserving, non-negative)."""
    if not features:
        return np.zeros(0)
    raw = booster.predict(state_vectors(features, agg), raw_score=True)
    return 1.0 / (1.0 + np.exp(-np.asarray(raw, np.float64)))


__all__ = ["train_pack_sum", "predict_pack_sum", "train_rank", "predict_rank",
           "pack_sum_objective", "state_vectors", "relevance", "splittable_dataset", "BASE_PARAMS"]
