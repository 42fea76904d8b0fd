"""Per-store features of many states on several processes (the search's batch form).

    states --step records--> worker processes (scheduler_core.measure.popen_pool.PopenPool)
           --replay_steps + lower_state + extract_feature_sets--> float32 arrays --> the caller

One evolution round computes the features of a few thousand new states, each lowered
in Python: the work is independent per state, so it is spread over the usable cores
(TVM's ``GetPerStoreFeaturesFromStates`` does the same with a thread pool). A worker gets
the task once per call as the DAG's JSON and the target string, and each state as its
transform-step records; it replays the steps (a State is a pure function of its DAG and
steps), lowers, and returns the same arrays the caller would have computed itself, so the
search is the same with any number of workers.

Workers: ``AUTOSCHED_FEATURE_WORKERS`` (``1`` computes in the caller's process), else the
cores this process may run on, at most :data:`MAX_WORKERS`. A batch of fewer than
:data:`MIN_PARALLEL_STATES` states is computed in the caller's process (starting a worker
costs about a second once; handing over a state costs about a millisecond). Processes, not
threads: the lowering is pure Python and holds the GIL. Workers are separate interpreters
(not forks), started on first use and kept for the life of the process; they take no
secrets (``popen_pool.worker_environment``). A chunk whose worker fails, dies or times
out is computed in the caller's process instead, so a result never depends on the pool.
"""

from __future__ import annotations

import atexit
import os
import threading

import numpy as np

from scheduler_core.measure.data import step_records
from scheduler_core.measure.popen_pool import PopenPool

MAX_WORKERS = 4  # more rarely pays: the caller also packs, predicts and mutates in between
MIN_PARALLEL_STATES = 256  # smaller batches are computed in the caller's process
CHUNKS_PER_WORKER = 4  # chunks per worker and call: a slow chunk does not hold up the rest
CHUNK_TIMEOUT_S = 600.0  # seconds one chunk may take in a worker before it is done here
WORKERS_ENV = "AUTOSCHED_FEATURE_WORKERS"

_WORKER_FUNC = "cost_model.feature:features_in_worker"
_lock = threading.Lock()
_pool = None  # PopenPool, started on first use
_pool_size = 0


def feature_workers() -> int:
    """The number of worker processes a large batch is spread over (1: none).

    ``AUTOSCHED_FEATURE_WORKERS`` when set (an integer >= 1; raises ValueError for anything
    else), else the cores this process may run on, at most MAX_WORKERS.
    """
    text = os.environ.get(WORKERS_ENV, "").strip()
    if text:
        try:
            n = int(text)
        except ValueError:
            n = 0
        if n < 1:
            raise ValueError(f"{WORKERS_ENV} must be a whole number >= 1, got {text!r}")
        return n
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    return max(1, min(MAX_WORKERS, cores))


def _get_pool(n: int):
    global _pool, _pool_size
    with _lock:
        if _pool is None or _pool_size != n:
            if _pool is not None:
                _pool.close()
            _pool = PopenPool(n, preload=("cost_model.feature",))
            _pool_size = n
        return _pool


def _close_pool() -> None:
    global _pool
    with _lock:
        if _pool is not None:
            _pool.close()
            _pool = None


atexit.register(_close_pool)


def extract_many(task, states: list, line: int, is_gpu: bool, workers: int) -> list:
    """The feature arrays of ``states`` (of ``task``), computed on ``workers`` processes.

    Returns a list aligned with ``states``; an entry is None where the pool could not
    compute it (the caller computes those itself).
    """
    dag_json, target = task.compute_dag.to_json(), str(task.target)
    records = [step_records(s) for s in states]
    n_chunks = max(1, min(len(states), workers * CHUNKS_PER_WORKER))
    bounds = np.linspace(0, len(states), n_chunks + 1).astype(int)
    jobs = [(dag_json, target, line, is_gpu, records[a:b]) for a, b in zip(bounds[:-1], bounds[1:])]
    outcomes = _get_pool(workers).map(_WORKER_FUNC, jobs, CHUNK_TIMEOUT_S)
    out: list = []
    for (a, b), outcome in zip(zip(bounds[:-1], bounds[1:]), outcomes):
        if outcome.status == "ok" and len(outcome.value) == b - a:
            out.extend(outcome.value)
        else:
            out.extend([None] * (b - a))
    return out


__all__ = ["feature_workers", "extract_many", "MAX_WORKERS", "MIN_PARALLEL_STATES"]
