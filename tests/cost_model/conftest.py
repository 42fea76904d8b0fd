"""Shared fixtures: a small matmul task and 60 measured random schedules of it."""

from __future__ import annotations

import numpy as np
import pytest

from scheduler_core.dag.task import Task
from scheduler_core.measure.data import MeasureInput, MeasureResult
from tests.cost_model.schedules import matmul_dag, measure_in_process, tiled_matmul_state

N_MEASURED = 90
MATMUL_N = 64


@pytest.fixture(scope="session")
def matmul_task() -> Task:
    return Task.create(matmul_dag(MATMUL_N), "llvm")


@pytest.fixture(scope="session")
def measured(matmul_task):
    """(states, costs_s float64 [90]) of random tiled schedules, timed in this process."""
    rng = np.random.default_rng(2024)
    states = [tiled_matmul_state(matmul_task.compute_dag, rng, parallel=False)
              for _ in range(N_MEASURED)]
    costs = measure_in_process(matmul_task.compute_dag, states)
    return states, costs


def as_measurements(task, states, costs, error_nos=None):
    """MeasureInput/MeasureResult lists for ``states`` with ``costs`` seconds."""
    inputs = [MeasureInput(task, s) for s in states]
    error_nos = error_nos if error_nos is not None else [0] * len(states)
    results = [MeasureResult((float(c),) if e == 0 else (1e10,), int(e), "", 0.0, 0.0)
               for c, e in zip(costs, error_nos)]
    return inputs, results
