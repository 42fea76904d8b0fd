"""One path from a record to a program (driver.program), the passes run once, MeasureResult.cost."""

import numpy as np

import scheduler_core as sc
from scheduler_core import te
from scheduler_core.dag.compute_dag import ComputeDAG
from scheduler_core.dag.task import Task
from scheduler_core.driver import pipeline
from scheduler_core.driver.program import ENTRY_NAME, program_from_steps
from scheduler_core.measure.data import FAILED_COST_S, MeasureErrorNo, MeasureResult, failed_result, step_records
from tests.workloads import matmul_add


def _tiled_state(n=64):
    A, B, C, out = matmul_add(n, n, n)
    s = te.create_schedule(out.op)
    mm = out.op.input_tensors()[0]
    i, j = s[out].op.axis
    io, ii = s[out].split(i, factor=8)
    jo, ji = s[out].split(j, factor=16)
    s[out].reorder(io, jo, ii, ji)
    s[out].parallel(io)
    s[out].vectorize(ji)
    s[mm].compute_at(s[out], jo)
    return s.state


def test_program_from_steps_is_the_program_that_runs():
    """The lowered text of a Program is the PrimFunc its module compiles; the module matches numpy.

    B is layout-free (seed 000), so the program's state carries the layout rewrite and
    differs from the replayed steps; lowering it by hand gives the same text.
    """
    n = 64
    state = _tiled_state(n)
    task = Task.create(state.dag, "llvm")
    program = program_from_steps(task, step_records(state))
    assert program.func.name == ENTRY_NAME and str(program.target) == "llvm"
    assert program.lowered == str(sc.lower(program.state, list(state.dag.tensors), name=ENTRY_NAME))
    assert "ramp(" in program.lowered  # the vectorize pass ran before the text was taken
    module = program.build()
    assert module is program.build()  # built once
    rng = np.random.default_rng(0)
    a, b, c = (rng.random((n, n), dtype=np.float32) for _ in range(3))
    out = np.empty((n, n), np.float32)
    module(a, b, c, out)
    np.testing.assert_allclose(out, a @ b + c, rtol=1e-4)


def test_the_passes_run_once_per_build(monkeypatch):
    calls = []
    real = pipeline.vectorize_loops
    monkeypatch.setattr(pipeline, "vectorize_loops", lambda body: calls.append(1) or real(body))
    state = _tiled_state(32)
    sc.build(state, list(state.dag.tensors), "llvm")
    assert len(calls) == 1
    func = sc.lower(state, list(state.dag.tensors))
    sc.build(func, target="llvm")  # an already lowered PrimFunc is not passed again
    assert len(calls) == 2


def test_measure_result_answers_its_own_cost():
    ok = MeasureResult((1e-3, 3e-3), int(MeasureErrorNo.NO_ERROR), "", 0.5, 0.0)
    assert ok.cost == 2e-3 and ok.mean_cost == 2e-3
    bad = failed_result(MeasureErrorNo.RUN_TIMEOUT, "too slow", 10.0, 0.0)
    assert bad.cost is None and bad.costs == (FAILED_COST_S,) and bad.mean_cost == FAILED_COST_S


def test_task_is_plain_frozen_data():
    dag = ComputeDAG(matmul_add(8, 8, 8))
    task = Task.create(dag, "llvm -mcpu=haswell -num-cores=2")
    assert task.workload_key == dag.workload_key and str(task.target) == "llvm -mcpu=haswell -num-cores=2"
    assert task.hardware_params.num_cores == 2 and task.hardware_params.vector_unit_bytes == 32
    assert task == Task.create(dag, "llvm  -num-cores=2 -mcpu=haswell")  # one canonical target
    search_task = sc.SearchTask(compute_dag=dag, target="llvm -mcpu=haswell -num-cores=2")
    assert isinstance(search_task, Task) and search_task.target == task.target
