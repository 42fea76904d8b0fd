"""Program features for the cost model: one row per stored buffer (Ansor section 5.2).

    (task, State) --lower_state (no passes: loop kinds stay visible)--> PrimFunc
                  --feature_extract.extract_feature_sets--> FeatureSets
                  --_pack (log2(x+1) of counts, one-hots)--> float32 [n_stores, N_FEATURES]

The first N_ANSOR_FEATURES = 164 columns are TVM's ``GetPerStoreFeatureName``
(src/auto_scheduler/feature.cc), in its layout and with its names: 57 computation
features, 18 access features for each of the 5 buffers with the most cache lines
(then bytes), 10 points of the arithmetic-intensity curve, 4 allocation and 3
outer-loop features.  Then come 13 columns TVM does not have
(``feature_extract.EXTRA_NAMES``): the innermost loop's length and the strides the
store and its reads take along it, the innermost reduction loop and the partial sums
kept live across it (the register tile), the statements of the unrolled innermost
nest, and the bytes moved into caches of 32 KiB, 1 MiB and 32 MiB (a capacity-only
model over the store's loop nest): 177 in all.  In 4-fold cross-validation on the
training parts of eleven W1/W2 record files (``benchmarks/model_accuracy.py``,
``cv_on_training_part``) they raised the default model's mean pairwise accuracy from
0.758 to 0.764.  Seven whole-program columns appended to every row (total float ops,
stores, the largest parallel extent, executions outside parallel loops, summed cache
traffic; TLP and TenSet's MLP see the whole program) lowered it from 0.751 to 0.736 in
the same kind of cross-validation over nine of the files and were left out.

Count-like values are log-scaled as ``log2(x + 1)`` (TVM's ``log2p``); one-hot and
boolean entries are 0/1.  ``FEATURE_VERSION`` changes whenever the meaning or order of
a column changes, so a saved model is never fed other columns.

A state whose program cannot be lowered gets a single all-zero row; the models
predict ``-inf`` for it (TVM does the same).  Features are cached by
(workload_key, transform steps): a State is a pure function of its DAG and steps.
"""

from __future__ import annotations

import json
import math

import numpy as np

from scheduler_core.base.bounded_cache import BoundedCache
from scheduler_core.base.errors import SchedulerCoreError
from scheduler_core.lowering.lower import is_lowered, lower_state
from scheduler_core.measure.local_builder import cached_task
from scheduler_core.schedule.dataflow_step import replay_steps

from . import feature_pool
from .feature_extract import (
    ARITH_INTENSITY_CURVE_SAMPLE_N,
    EXTRA_NAMES,
    OP_COUNTERS,
    FeatureSet,
    extract_feature_sets,
)

FEATURE_VERSION = "autosched-feature-v2"
MAX_N_BUFS = 5  # buffers described per row (TVM's max_n_bufs)

_POS = ("kPosNone", "kPosInnerSpatial", "kPosMiddleSpatial", "kPosOuterSpatial",
        "kPosInnerReduce", "kPosMiddleReduce", "kPosOuterReduce", "kPosMixed")
_ACCESS_NAMES = ("acc_type.kRead", "acc_type.kWrite", "acc_type.kReadWrite", "bytes",
                 "unique_bytes", "lines", "unique_lines", "reuse_type.kLoopMultipleRead",
                 "reuse_type.kSerialMultipleReadWrite", "reuse_type.kNoReuse", "reuse_dis_iter",
                 "reuse_dis_bytes", "reuse_ct", "bytes_d_reuse_ct", "unique_bytes_d_reuse_ct",
                 "lines_d_reuse_ct", "unique_lines_d_reuse_ct", "stride")


def _feature_names() -> tuple:
    names = list(OP_COUNTERS)
    for kind in ("vec", "unroll", "parallel"):
        names += [f"{kind}_num", f"{kind}_prod", f"{kind}_len"]
        names += [f"{kind}_type.{p}" for p in _POS]
    names += ["is_gpu", "blockIdx_x_len", "blockIdx_y_len", "blockIdx_z_len",
              "threadIdx_x_len", "threadIdx_y_len", "threadIdx_z_len", "vthread_len"]
    for b in range(MAX_N_BUFS):
        names += [f"B{b}.{n}" for n in _ACCESS_NAMES]
    names += [f"arith_intensity_curve_{i}" for i in range(ARITH_INTENSITY_CURVE_SAMPLE_N)]
    names += ["alloc_size", "alloc_prod", "alloc_outer_prod", "alloc_inner_prod"]
    names += ["outer_prod", "num_loops", "auto_unroll_max_step"]
    names += list(EXTRA_NAMES)
    return tuple(names)


FEATURE_NAMES: tuple = _feature_names()
N_FEATURES = len(FEATURE_NAMES)  # 177
N_ANSOR_FEATURES = FEATURE_NAMES.index(EXTRA_NAMES[0])  # 164: TVM's columns come first


def _slog(x: float) -> float:
    """TVM's log2p: log2(x + 1), odd-extended to negatives."""
    return math.log2(x + 1.0) if x >= 0 else -math.log2(1.0 - x)


def _annotation_cols(a: list) -> list:
    onehot = [0.0] * len(_POS)
    onehot[int(a[3])] = 1.0
    return [_slog(a[0]), _slog(a[1]), _slog(a[2])] + onehot


def _access_cols(acc: tuple) -> list:
    acc_type, bytes_, ubytes, lines, ulines, reuse_type, dis_iter, dis_bytes, ct, stride = acc
    cols = [0.0, 0.0, 0.0]
    cols[acc_type] = 1.0
    cols += [_slog(bytes_), _slog(ubytes), _slog(lines), _slog(ulines)]
    reuse = [0.0, 0.0, 0.0]
    reuse[reuse_type] = 1.0
    cols += reuse + [_slog(dis_iter), _slog(dis_bytes), _slog(ct)]
    div = ct if ct > 0.5 else 0.5  # no reuse: TVM multiplies by the magic 2
    cols += [_slog(bytes_ / div), _slog(ubytes / div), _slog(lines / div), _slog(ulines / div),
             _slog(stride)]
    return cols


def _row(fs: FeatureSet) -> list:
    row = [_slog(v) for v in fs.ops]
    row += _annotation_cols(fs.vec) + _annotation_cols(fs.unroll) + _annotation_cols(fs.parallel)
    row += [fs.gpu[0]] + [_slog(v) for v in fs.gpu[1:]]
    accs = sorted(fs.access, key=lambda a: (a[3], a[1]), reverse=True)[:MAX_N_BUFS]
    for acc in accs:
        row += _access_cols(acc)
    row += [0.0] * (len(_ACCESS_NAMES) * (MAX_N_BUFS - len(accs)))
    row += [_slog(v) for v in fs.curve]
    row += [_slog(v) for v in fs.alloc]
    row += [_slog(v) for v in fs.outer]
    row += [_slog(v) for v in fs.extra]
    return row


def features_from_primfunc(func, cache_line_bytes: int = 64, is_gpu: bool = False) -> np.ndarray:
    """Features of a lowered program: float32 [n_stored_buffers, N_FEATURES] (log-scaled).

    ``func`` should come from ``lower_state(state)`` so vectorized and
    unrolled loops are still loops (and loops bound to GPU axes keep their kind).
    ``is_gpu``: the program is for a GPU target (sets ``is_gpu`` on every row).  A
    program with no store gives one zero row.
    """
    rows = [_row(fs) for fs in extract_feature_sets(func, cache_line_bytes, is_gpu)]
    if not rows:
        return np.zeros((1, N_FEATURES), np.float32)
    return np.asarray(rows, dtype=np.float32)


# ---------------------------------------------------------------------------
# States, with a cache
# ---------------------------------------------------------------------------

class FeatureCache(BoundedCache):
    """LRU map (workload key, steps) -> feature array; arrays are shared, read-only.

    capacity: the number of states kept (about 2 KB each for a matmul+bias).  A
    :class:`~scheduler_core.base.bounded_cache.BoundedCache` (``get``, ``put``, ``hits``, ``misses``).
    """

    def __init__(self, capacity: int = 16384):
        super().__init__(capacity)


_CACHE = FeatureCache()


def _cache_key(task, state):
    # without a task: the DAG object itself (not its id, which could be reused)
    wk = task.workload_key if task is not None else ("dag", state.dag)
    wk = (wk, _cache_line_bytes(task), _is_gpu(task))
    try:
        steps = tuple(state.transform_steps)
        hash(steps)
    except TypeError:  # a step holding an unhashable field: fall back to its record
        steps = json.dumps([s.to_record() for s in state.transform_steps], default=str)
    return (wk, steps)


def _cache_line_bytes(task) -> int:
    return task.hardware_params.cache_line_bytes if task is not None else 64


def _is_gpu(task) -> bool:
    """Whether ``task``'s target is a GPU (``Target.is_gpu``); False without a task."""
    return task is not None and task.target.is_gpu


def extract_state_features(state, line: int = 64, is_gpu: bool = False) -> np.ndarray:
    """Features of ``state`` for a cache line of ``line`` bytes, uncached: float32 [n_stores,
    N_FEATURES], read-only; one all-zero row when the state cannot be lowered."""
    try:
        func = lower_state(state)
    except (SchedulerCoreError, ArithmeticError, ValueError):
        out = np.zeros((1, N_FEATURES), np.float32)
    else:
        out = features_from_primfunc(func, line, is_gpu)
    out.flags.writeable = False
    return out


def get_per_store_features(task, state, cache: FeatureCache | None = _CACHE) -> np.ndarray:
    """Features of one state: float32 [n_stores, N_FEATURES], columns ``FEATURE_NAMES``.

    Parameters
    ----------
    task : anything with ``.workload_key`` (cache key) and optionally
        ``.hardware_params.cache_line_bytes``; may be None (then the DAG's identity keys the cache)
    state : State of ``task.compute_dag``
    cache : FeatureCache or None to bypass caching

    One row per stored buffer (TVM's per-store features, feature.cc).  A state
    that fails to lower gives one all-zero row (see :func:`is_invalid`).  For a GPU
    task (``task.target.kind`` is ``cuda``...) every row has ``is_gpu`` = 1 and the
    ``blockIdx_*_len`` / ``threadIdx_*_len`` / ``vthread_len`` of the loops bound
    around the store; there is no shared-memory column (TVM has none either).
    The returned array is shared with the cache: do not modify it.
    """
    key = _cache_key(task, state) if cache is not None else None
    if key is not None:
        hit = cache.get(key)
        if hit is not None:
            return hit
    out = extract_state_features(state, _cache_line_bytes(task), _is_gpu(task))
    if key is not None:
        cache.put(key, out)
    return out


def features_in_worker(dag_json: str, target: str, line: int, is_gpu: bool, records: list) -> list:
    """In a ``feature_pool`` worker: the feature arrays of the states whose step records are
    ``records``, on the DAG of ``dag_json``."""
    dag = cached_task(dag_json, target).compute_dag
    return [extract_state_features(replay_steps(dag, steps), line, is_gpu) for steps in records]


def get_per_store_features_from_states(task, states, cache: FeatureCache | None = _CACHE) -> list:
    """Features of many states of one task: a list of float32 [n_stores_i, N_FEATURES].

    The batch form used by the search (Ansor's GetPerStoreFeaturesFromStates);
    states seen before come from the cache. A batch with at least
    ``feature_pool.MIN_PARALLEL_STATES`` new states is spread over worker processes
    (``feature_pool``; ``AUTOSCHED_FEATURE_WORKERS=1`` keeps it in this process): the
    arrays are the same either way.
    """
    out: list = [None] * len(states)
    keys = [_cache_key(task, s) if cache is not None else None for s in states]
    todo = []
    for i, key in enumerate(keys):
        hit = cache.get(key) if key is not None else None
        if hit is not None:
            out[i] = hit
        else:
            todo.append(i)
    # states this process has lowered already (the search's validity check) stay here
    remote = [i for i in todo if not is_lowered(states[i])]
    workers = feature_pool.feature_workers() if len(remote) >= feature_pool.MIN_PARALLEL_STATES else 1
    if task is not None and workers > 1:
        for i, arr in zip(remote, feature_pool.extract_many(task, [states[i] for i in remote],
                                                          _cache_line_bytes(task), _is_gpu(task), workers)):
            if arr is not None:
                arr.flags.writeable = False
                out[i] = arr
                if keys[i] is not None:
                    cache.put(keys[i], arr)
    for i in todo:  # the rest here (the cache was asked above: no second lookup)
        if out[i] is None:
            out[i] = extract_state_features(states[i], _cache_line_bytes(task), _is_gpu(task))
            if keys[i] is not None:
                cache.put(keys[i], out[i])
    return out


def lowering_flags(task, states) -> list:
    """Whether each of ``states`` lowers (its features are not the all-zero placeholder).

    The search's validity check of a sampled population: the states are lowered (on worker
    processes for a large batch) and their features are kept in the cache for the first
    prediction, which would lower them again otherwise.  A state whose lowering raises
    SchedulerCoreError, ArithmeticError or ValueError counts as not lowering.
    """
    return [not is_invalid(f) for f in get_per_store_features_from_states(task, states)]


def is_invalid(features: np.ndarray) -> bool:
    """True for the all-zero placeholder of a state that failed to lower."""
    return features.shape[0] == 1 and not features.any()


def pack_features(features: list) -> tuple:
    """Flatten per-state arrays for a row model.

    Returns ``(X, pack_ids)``: X float32 [total rows, N_FEATURES], pack_ids int64
    [total rows] with the index of the state each row belongs to.
    """
    if not features:
        return np.zeros((0, N_FEATURES), np.float32), np.zeros(0, np.int64)
    X = np.concatenate(features, axis=0)
    pack_ids = np.repeat(np.arange(len(features)), [f.shape[0] for f in features])
    return X, pack_ids


__all__ = ["FEATURE_NAMES", "FEATURE_VERSION", "N_FEATURES", "N_ANSOR_FEATURES", "MAX_N_BUFS",
           "FeatureCache", "get_per_store_features", "get_per_store_features_from_states",
           "extract_state_features", "features_in_worker", "lowering_flags",
           "features_from_primfunc", "is_invalid", "pack_features"]
