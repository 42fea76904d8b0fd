"""Zero-rank tensors (shape ``()``) stay zero-rank everywhere: reference, runner, module, artifact.

The runner used to turn every zero-rank array into shape ``(1,)`` (``np.ascontiguousarray``
returns at least one dimension): the expected output in its ``.npz`` reference file and
the random value of a zero-rank input.  So every zero-rank program was recorded as
WRONG_ANSWER ("shape (), expected (1,)") or failed in the reference evaluator, and a
search of a reduction to a scalar never succeeded.  Here the reduction
``S = sum_k A[k]`` (TVM's zero_rank_reduce test) and a scalar input ``s`` scaling a
vector are measured with the correctness check, built, called, exported and searched.
"""

from __future__ import annotations

import ctypes
import json

import numpy as np
import pytest

import scheduler_core as sc
from scheduler_core import te
from scheduler_core.base.errors import RuntimeArgumentError
from scheduler_core.dag.compute_dag import ComputeDAG
from scheduler_core.dag.reference import evaluate
from scheduler_core.dag.task import Task
from scheduler_core.measure.data import MeasureErrorNo, MeasureInput
from scheduler_core.measure.local_builder import LocalBuilder
from scheduler_core.measure.local_runner import (
    LocalRunner,
    arg_specs,
    compare_outputs,
    cuda_unavailable,
    empty_outputs,
    random_inputs,
)
from scheduler_core.runtime import load_module
from scheduler_core.schedule.loop_state import State
from scheduler_core.schedule.schedule_api import Schedule
from sketch_rules import SketchPolicyParams

N = 256


def zero_rank_sum(n: int = N, scale: float = 1.0):
    """``S[] = scale * sum_k A[k]``: A (n,) float32, S () float32."""
    A = te.placeholder((n,), name="A")
    k = te.reduce_axis((0, n), name="k")
    if scale == 1.0:
        S = te.compute((), lambda: te.sum(A[k], axis=k), name="S")
    else:
        S = te.compute((), lambda: te.sum(A[k] * scale, axis=k), name="S")
    return [A, S]


def scale_by_scalar(n: int = 64):
    """``B[i] = A[i] * s[]``: A (n,), s () and B (n,) float32."""
    A = te.placeholder((n,), name="A")
    s = te.placeholder((), name="s")
    B = te.compute((n,), lambda i: A[i] * s[()], name="B")
    return [A, s, B]


def _split_state(dag: ComputeDAG, factor: int = 8):
    """The reduction split into k.0 x k.1 (the inner loop vectorizable)."""
    sch = Schedule.from_state(State.from_dag(dag))
    out = dag.tensors[-1]
    axis = out.op.reduce_axis[0] if out.op.reduce_axis else out.op.axis[0]
    sch[out].split(axis, factor=factor)
    return sch.state


@pytest.fixture(scope="module")
def builder():
    b = LocalBuilder(timeout_s=60, n_parallel=1)
    yield b
    b.close()


@pytest.fixture(scope="module")
def runner():
    r = LocalRunner(timeout_s=10, number=1, repeat=1, min_repeat_ms=0, check_correctness=True)
    yield r
    r.close()


# -- the reference evaluator and the runner's arrays -------------------------------------

def test_reference_evaluator_keeps_shape_empty():
    A, S = zero_rank_sum(8)
    a = np.arange(8, dtype=np.float32)
    (out,) = evaluate(ComputeDAG([A, S]), [a])
    assert np.shape(out) == () and float(out) == 28.0
    A, s, B = scale_by_scalar(4)
    (b,) = evaluate(ComputeDAG([A, s, B]), [a[:4], np.array(2.0, np.float32)])
    np.testing.assert_array_equal(b, a[:4] * 2)
    with pytest.raises(sc.InvalidWorkloadError, match="dimensions"):
        evaluate(ComputeDAG([A, s, B]), [a[:4], np.array([2.0], np.float32)])


def test_runner_arrays_of_a_zero_rank_argument_have_shape_empty():
    specs = arg_specs(scale_by_scalar(4))
    assert [s[1] for s in specs] == [[4], [], [4]]
    a, s = random_inputs(specs)
    assert a.shape == (4,) and s.shape == () and s.dtype == np.float32 and s.flags.c_contiguous
    for dtype in ("int32", "bool", "float64"):
        (x,) = random_inputs([("x", [], dtype, False)])
        assert isinstance(x, np.ndarray) and x.shape == () and x.dtype == np.dtype(dtype)
    (out,) = empty_outputs(arg_specs(zero_rank_sum(4)))
    assert out.shape == () and np.isnan(out)


def test_compare_outputs_of_zero_rank_outputs():
    specs = arg_specs(zero_rank_sum(4))
    exact = np.array(3.0, np.float32)
    assert compare_outputs(specs, [np.array(3.0002, np.float32)], [exact]) == ""
    message = compare_outputs(specs, [np.array(4.0, np.float32)], [exact])
    assert "output S: 1 of 1 elements differ" in message and "worst at ()" in message
    assert "got 4.0, expected 3.0" in message
    assert "shape (1,), expected ()" in compare_outputs(specs, [np.ones(1, np.float32)], [exact])


# -- measurement with the correctness check ------------------------------------------------

@pytest.mark.parametrize("workload", [zero_rank_sum, scale_by_scalar])
def test_measure_zero_rank_programs_with_correctness_check(builder, runner, workload):
    dag = ComputeDAG(workload())
    task = Task.create(dag, "llvm")
    inputs = [MeasureInput(task, State.from_dag(dag)), MeasureInput(task, _split_state(dag))]
    builds = builder.build(inputs)
    assert [b.error_no for b in builds] == [0, 0], [b.error_msg for b in builds]
    results = runner.run(inputs, builds)
    assert [r.error_no for r in results] == [0, 0], [r.error_msg for r in results]
    assert all(r.cost is not None and r.cost > 0 for r in results)


def test_a_wrong_zero_rank_program_is_still_a_wrong_answer(builder, runner):
    # the program of 2 * sum(A) run as the program of sum(A): same signature, wrong values
    right = ComputeDAG(zero_rank_sum())
    wrong = ComputeDAG(zero_rank_sum(scale=2.0))
    (build,) = builder.build([MeasureInput(Task.create(wrong, "llvm"), State.from_dag(wrong))])
    assert build.error_no == 0, build.error_msg
    (res,) = runner.run([MeasureInput(Task.create(right, "llvm"), State.from_dag(right))], [build])
    assert res.error_no == MeasureErrorNo.WRONG_ANSWER
    assert "output S: 1 of 1 elements differ" in res.error_msg and "worst at ()" in res.error_msg


# -- the built module and its artifact ----------------------------------------------------

def test_built_module_takes_zero_rank_numpy_arrays_and_ndarrays():
    A, S = zero_rank_sum()
    s = te.create_schedule(S.op)
    func = sc.build(s, [A, S], "llvm")
    assert func.signature.params[1].shape == ()
    a = np.random.default_rng(1).random(N, dtype=np.float32)
    out = np.full((), np.nan, np.float32)
    func(a, out)
    np.testing.assert_allclose(out, a.sum(dtype=np.float64), rtol=1e-5)
    nd_out = sc.nd.empty((), "float32")
    func(sc.nd.array(a), nd_out)
    assert nd_out.shape == () and nd_out.numpy().shape == ()
    np.testing.assert_allclose(nd_out.numpy(), a.sum(dtype=np.float64), rtol=1e-5)
    with pytest.raises(RuntimeArgumentError, match="expected 0 dimensions"):
        func(a, np.zeros(1, np.float32))

    A, sc_in, B = scale_by_scalar()
    func = sc.build(te.create_schedule(B.op), [A, sc_in, B], "llvm")
    b = np.empty(64, np.float32)
    func(a[:64], np.array(2.5, np.float32), b)
    np.testing.assert_allclose(b, a[:64] * np.float32(2.5), rtol=1e-6)
    nd_b = sc.nd.empty((64,), "float32")
    func(sc.nd.array(a[:64]), sc.nd.array(np.array(2.5, np.float32)), nd_b)
    np.testing.assert_allclose(nd_b.numpy(), a[:64] * np.float32(2.5), rtol=1e-6)


@pytest.mark.skipif(bool(cuda_unavailable()), reason=f"needs CUDA device 0: {cuda_unavailable()}")
def test_zero_rank_arrays_on_a_cuda_device_keep_shape_empty():
    # the cuda runner copies its inputs with nd.array(host, cuda(0)) (cuda_driver.to_device)
    dev = sc.cuda(0)
    x = sc.nd.array(np.array(2.5, np.float32), dev)
    assert x.shape == () and x.numpy().shape == () and float(x.numpy()) == 2.5
    y = sc.nd.empty((), "float32", dev).copyfrom(np.array(-1.0, np.float32))
    assert y.numpy().shape == () and float(y.numpy()) == -1.0


def _meta_json_of(so_path, entry: str) -> dict:
    """The ``__autosched_meta_<entry>`` JSON string as the shared library itself holds it."""
    lib = ctypes.CDLL(str(so_path))
    return json.loads(ctypes.string_at(ctypes.addressof(ctypes.c_char.in_dll(lib, f"__autosched_meta_{entry}"))))


def _check_zero_rank_artifact(module, directory, a: np.ndarray) -> None:
    so = directory / "zero_rank.so"
    header = module.export_library(so)
    text = header.read_text()
    assert " *   S: float32[] (zero-rank: a pointer to one element)" in text
    assert f"int32_t {module.entry_name}(float* A, float* S);" in text
    meta = _meta_json_of(so, module.entry_name)
    assert [(p["name"], p["shape"]) for p in meta["params"]] == [("A", [a.size]), ("S", [])]
    loaded = load_module(so)
    assert loaded.signature.params[1].shape == ()
    out = np.empty((), np.float32)
    loaded(a, out)
    np.testing.assert_allclose(out, a.sum(dtype=np.float64), rtol=1e-5)


def test_exported_artifact_says_shape_empty(tmp_path):
    A, S = zero_rank_sum()
    func = sc.build(te.create_schedule(S.op), [A, S], "llvm")
    _check_zero_rank_artifact(func, tmp_path, np.random.default_rng(2).random(N, dtype=np.float32))


# -- a search ---------------------------------------------------------------------------

def test_search_of_a_zero_rank_reduction_succeeds(tmp_path):
    log = tmp_path / "zero_rank.json"
    task = sc.SearchTask(compute_dag=ComputeDAG(zero_rank_sum(4096)), target="llvm")
    policy = sc.SketchPolicy(task, sc.LGBMModel(seed=0), params=SketchPolicyParams(population=32, num_iters=1),
                             seed=0, verbose=0)
    opts = sc.TuningOptions(num_measure_trials=6, num_measures_per_round=3, min_repeat_ms=1.0,
                            measure_callbacks=[sc.RecordToFile(str(log))], verbose=0)
    task.tune(opts, search_policy=policy)
    records = sc.load_records(str(log))
    assert len(records) == 6
    assert [r.error_no for _, r in records] == [MeasureErrorNo.NO_ERROR] * 6, [r.error_msg for _, r in records]

    a = np.random.default_rng(3).random(4096, dtype=np.float32)
    sch, args = task.apply_best(str(log))
    func = sc.build(sch, args, "llvm")
    out = np.full((), np.nan, np.float32)
    func(a, out)
    assert out.shape == ()
    np.testing.assert_allclose(out, a.sum(), rtol=1e-4)
    # the artifact of the best program (what a tune job stores as so / h) says shape []
    _check_zero_rank_artifact(task.best_program(str(log)).build(), tmp_path, a)
