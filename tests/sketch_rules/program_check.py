"""Build, run and compare sampled programs in a worker process.

    (DAG name, step records, seed) --worker: replay_steps, build("llvm"), run-->
        None (outputs match reference.evaluate, rtol 1e-4) | error text

A compiler bug can abort the process (LLVM assertions are fatal), so programs
are built and run in a spawned worker; a dead worker becomes an error text for
the test that sent the program, and the next program gets a fresh worker.
Replaying the step records in the worker also exercises the record round trip.
"""

from __future__ import annotations

import json
import multiprocessing
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

from tests import workloads as W

# Small instances of every workload of tests/workloads.py (and an rfactor matmul).
DAGS = {
    **W.SMALL_DAGS,
    "matmul_rfactor": lambda: W.matmul(4, 4, 40),
    "matmul_add": lambda: W.matmul_add(12, 8, 16),
    "two_stage_scan": lambda: W.two_stage_scan(7, 12),
    "two_state_scan": lambda: W.two_state_scan(5, 6, 20),
}

_DAG_CACHE: dict = {}


def get_dag(name: str):
    from scheduler_core.dag.compute_dag import ComputeDAG
    if name not in _DAG_CACHE:
        _DAG_CACHE[name] = ComputeDAG(DAGS[name]())
    return _DAG_CACHE[name]


def check_program(name: str, records: str, seed: int) -> str | None:
    """Replay ``records`` (JSON step records) on DAG ``name``, build for llvm, run on
    random inputs from ``seed`` and compare with the reference.  None when all is
    well, else a description of what went wrong."""
    import numpy as np

    import scheduler_core as sc
    from scheduler_core.dag import reference
    from scheduler_core.schedule.dataflow_step import replay_steps

    dag = get_dag(name)
    rng = np.random.default_rng(seed)
    inputs = [rng.uniform(-1.0, 1.0, size=tuple(int(s.value) for s in t.shape)).astype(t.dtype)
              for t in dag.inputs]
    try:
        state = replay_steps(dag, json.loads(records))
        expected = reference.evaluate(dag, inputs)
        mod = sc.build(state, list(dag.inputs) + list(dag.outputs), "llvm")
        outs = [np.full(tuple(int(s.value) for s in t.shape), np.nan, dtype=t.dtype)
                for t in dag.outputs]
        mod(*inputs, *outs)
        for got, want in zip(outs, expected):
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    except Exception as err:  # noqa: BLE001 - every failure is reported to the test
        return f"{type(err).__name__}: {str(err)[:2000]}"
    return None


class CrashSafeRunner:
    """Runs :func:`check_program` in one spawned worker, replaced when it dies."""

    def __init__(self):
        self._pool = None

    def _executor(self) -> ProcessPoolExecutor:
        if self._pool is None:
            self._pool = ProcessPoolExecutor(max_workers=1,
                                             mp_context=multiprocessing.get_context("spawn"))
        return self._pool

    def check(self, name: str, records: str, seed: int, timeout_s: float = 300.0) -> str | None:
        try:
            return self._executor().submit(check_program, name, records, seed).result(timeout_s)
        except BrokenProcessPool:
            self._pool = None
            return "the build/run worker process died (e.g. an LLVM assertion aborted it)"

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None


RUNNER = CrashSafeRunner()
