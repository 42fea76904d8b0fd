"""Measurement: LocalBuilder and LocalRunner in worker processes, error codes, correctness check.

    MeasureInput --LocalBuilder--> BuildResult --LocalRunner--> MeasureResult

A crash (segfault, abort), a hang, a nonzero return and a wrong
answer are injected by handing the runner shared libraries compiled from C that
export the measured entry (same name, signature and meta string); each becomes its
error code while the good programs in the same batch still measure.  One builder
and one runner (each a pool of worker processes) serve the whole module, because
starting a worker is the expensive part.
"""

from __future__ import annotations

import dataclasses
import os
import time

import numpy as np
import pytest

from scheduler_core import te
from scheduler_core.dag.compute_dag import ComputeDAG
from scheduler_core.dag.task import Task
from scheduler_core.measure.data import FAILED_COST_S, BuildResult, MeasureErrorNo, MeasureInput, MeasureResult
from scheduler_core.measure.local_builder import LocalBuilder
from scheduler_core.measure.local_runner import LocalRunner, arg_specs, check_against_reference, compare_outputs
from scheduler_core.measure.popen_pool import PopenPool
from scheduler_core.schedule.loop_state import State
from scheduler_core.schedule.schedule_api import Schedule
from scheduler_core.schedule.transform_step import SplitStep
from tests.scheduler_core.c_programs import compile_matmul_stand_ins
from tests.workloads import matmul, matmul_add

N = 64
E = MeasureErrorNo


def _tiled_matmul_add_input(n: int = N, target: str = "llvm") -> MeasureInput:
    """matmul+bias with a tiled, vectorized output stage and the matmul computed at its tile."""
    dag = ComputeDAG(matmul_add(n, n, n))
    A, B, C, out = dag.tensors
    mm = out.op.input_tensors()[0]
    s = Schedule.from_state(State.from_dag(dag))
    i, j = s[out].op.axis
    io, ii = s[out].split(i, factor=8)
    jo, ji = s[out].split(j, factor=16)
    s[out].reorder(io, jo, ii, ji)
    s[out].vectorize(ji)
    s[mm].compute_at(s[out], jo)
    return MeasureInput(Task.create(dag, target), s.state)


def _plain_matmul_input(n: int = N) -> MeasureInput:
    dag = ComputeDAG(matmul(n, n, n))
    return MeasureInput(Task.create(dag, "llvm"), State.from_dag(dag))


@pytest.fixture(scope="module")
def builder():
    b = LocalBuilder(timeout_s=60, n_parallel=2)
    yield b
    b.close()


@pytest.fixture(scope="module")
def runner():
    r = LocalRunner(timeout_s=3, number=2, repeat=2, min_repeat_ms=1, check_correctness=True)
    yield r
    r.close()


@pytest.fixture(scope="module")
def built(builder):
    """The tiled matmul+bias input and its BuildResult (built once for the module)."""
    inp = _tiled_matmul_add_input()
    (br,) = builder.build([inp])
    assert br.error_no == E.NO_ERROR, br.error_msg
    return inp, br


def test_build_and_run_tiled_matmul(builder, runner, built):
    inp, br = built
    assert os.path.exists(br.filename) and br.filename.endswith(".so")
    assert br.args == tuple(inp.task.compute_dag.tensors)
    assert br.time_cost > 0
    plain = _plain_matmul_input()
    (br2,) = builder.build([plain])
    start = time.time()
    runner.enable_cpu_cache_flush = True
    try:
        results = runner.run([inp, plain], [br, br2])
    finally:
        runner.enable_cpu_cache_flush = False
    for res in results:
        assert res.error_no == E.NO_ERROR, res.error_msg
        assert len(res.costs) == 2 and all(c > 0 for c in res.costs)
        assert res.all_cost > 0 and start - 1 <= res.timestamp <= time.time() + 1
    assert results[0].all_cost >= br.time_cost
    # each candidate is stamped when its own run ended (one timing worker: in input order),
    # not all with the time the batch ended
    assert results[1].timestamp - results[0].timestamp >= sum(results[1].costs)  # its timed calls came between


def test_build_errors_have_codes_and_pass_through_the_runner(builder, runner, built):
    good, _ = built
    bad_step = SplitStep(2, 7, N, (8,), True)  # stage 2 has no iterator 7
    broken = MeasureInput(good.task, dataclasses.replace(good.state,
                                                         transform_steps=good.state.transform_steps + (bad_step,)))
    bad_target = MeasureInput(dataclasses.replace(good.task, target="llvm bogus"), good.state)
    # a CPU schedule (16-lane vector stores) on a cuda task: invalid for the GPU, never compiled
    cuda = MeasureInput(dataclasses.replace(good.task, target="cuda"), good.state)
    inputs = [broken, bad_target, cuda, good]
    brs = builder.build(inputs)
    assert [b.error_no for b in brs] == [E.INSTANTIATION_ERROR, E.COMPILE_HOST, E.INSTANTIATION_ERROR, E.NO_ERROR]
    assert "ScheduleError" in brs[0].error_msg and "bogus" in brs[1].error_msg
    assert "max_vector_bytes=16" in brs[2].error_msg
    assert all(b.filename == "" for b in brs[:3])
    results = runner.run(inputs, brs)
    for b, r in zip(brs[:3], results[:3]):
        assert r.costs == (FAILED_COST_S,) and r.error_no == b.error_no and r.error_msg == b.error_msg
    assert results[3].error_no == E.NO_ERROR


def test_build_timeout_kills_the_worker_and_the_pool_goes_on(builder, built):
    inp, _ = built
    builder.timeout_s = 0.001
    try:
        (br,) = builder.build([inp])
    finally:
        builder.timeout_s = 60
    assert br.error_no == E.BUILD_TIMEOUT and "timeout" in br.error_msg and br.filename == ""
    (again,) = builder.build([inp])
    assert again.error_no == E.NO_ERROR, again.error_msg


# ---------------------------------------------------------------------------
# injected faults
# ---------------------------------------------------------------------------

_BODIES = {
    "crash": "*(volatile float*)0 = A[0]; return 0;",
    "abort": "abort(); return 0;",
    "hang": "volatile int spin = 1; while (spin) {} return 0;",
    "zeros": f"for (int k = 0; k < {N * N}; ++k) matmul[k] = 0.0f; return 0;",
    "nonzero": "return 3;",
}


@pytest.fixture(scope="module")
def fault_libs(tmp_path_factory):
    """{kind: path of a .so exporting ``default_function`` for the N x N matmul}."""
    return compile_matmul_stand_ins(ComputeDAG(matmul(N, N, N)), _BODIES, tmp_path_factory.mktemp("faults"))


def test_crash_hang_and_wrong_answer_become_errors_and_the_batch_goes_on(builder, runner, fault_libs):
    good = _plain_matmul_input()
    (good_br,) = builder.build([good])
    fake = {k: dataclasses.replace(good_br, filename=path) for k, path in fault_libs.items()}
    order = ["good", "crash", "good", "hang", "zeros", "abort", "nonzero", "good"]
    brs = [good_br if k == "good" else fake[k] for k in order]
    results = runner.run([good] * len(order), brs)
    codes = dict(crash=E.RUNTIME_DEVICE, abort=E.RUNTIME_DEVICE, hang=E.RUN_TIMEOUT, zeros=E.WRONG_ANSWER,
                 nonzero=E.RUNTIME_DEVICE, good=E.NO_ERROR)
    assert [r.error_no for r in results] == [codes[k] for k in order], [r.error_msg for r in results]
    by_kind = dict(zip(order, results))
    assert "SIGSEGV" in by_kind["crash"].error_msg and "SIGABRT" in by_kind["abort"].error_msg
    assert "timeout" in by_kind["hang"].error_msg and by_kind["hang"].all_cost >= runner.timeout_s
    assert "output matmul" in by_kind["zeros"].error_msg
    assert "returned 3" in by_kind["nonzero"].error_msg
    for kind, r in zip(order, results):
        assert (r.costs == (FAILED_COST_S,)) == (kind != "good")


def test_check_against_reference(runner, built, fault_libs):
    inp, br = built
    ok = check_against_reference(inp, br, runner=runner)
    assert ok.error_no == E.NO_ERROR and ok.costs[0] > 0
    plain = _plain_matmul_input()
    wrong_br = BuildResult(fault_libs["zeros"], tuple(plain.task.compute_dag.tensors), 0, "", 0.0)
    wrong = check_against_reference(plain, wrong_br)  # its own worker
    assert wrong.error_no == E.WRONG_ANSWER and "differ from the reference" in wrong.error_msg


def test_symbolic_shapes_are_an_instantiation_error(runner):
    n = te.var("n")
    dag = ComputeDAG(matmul(n, n, n))
    inp = MeasureInput(Task.create(dag, "llvm"), State.from_dag(dag))
    br = BuildResult("/nonexistent.so", tuple(dag.tensors), 0, "", 0.5)
    (res,) = runner.run([inp], [br])
    assert res.error_no == E.INSTANTIATION_ERROR and "symbolic" in res.error_msg
    assert res.costs == (FAILED_COST_S,) and res.all_cost == 0.5


def test_missing_library_is_a_runtime_error(runner):
    plain = _plain_matmul_input()
    br = BuildResult("/nonexistent/lib.so", tuple(plain.task.compute_dag.tensors), 0, "", 0.0)
    (res,) = runner.run([plain], [br])
    assert res.error_no == E.RUNTIME_DEVICE and "nonexistent" in res.error_msg


# ---------------------------------------------------------------------------
# pieces
# ---------------------------------------------------------------------------

def test_compare_outputs_names_the_worst_element():
    specs = arg_specs(ComputeDAG(matmul(4, 4, 4)).tensors)
    want = np.ones((4, 4), np.float32)
    assert compare_outputs(specs, [want + 1e-6], [want]) == ""
    got = want.copy()
    got[2, 3] = 7.0
    msg = compare_outputs(specs, [got], [want])
    assert "1 of 16" in msg and "(2, 3)" in msg and "matmul" in msg
    got[0, 0] = np.nan  # an element the program never wrote
    assert "2 of 16" in compare_outputs(specs, [got], [want])


def test_pool_only_runs_library_functions():
    pool = PopenPool(1)
    with pytest.raises(ValueError):
        pool.map("os:system", [("true",)], 1.0)
    pool.close()


def test_measure_types_are_plain_data():
    res = MeasureResult((1e-3, 3e-3), 0, "", 1.0, 2.0)
    assert res.mean_cost == pytest.approx(2e-3)
    assert int(E.UNKNOWN_ERROR) == 8 and E(7) is E.RUN_TIMEOUT
    with pytest.raises(dataclasses.FrozenInstanceError):
        res.error_no = 1  # type: ignore[misc]
