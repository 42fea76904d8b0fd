"""Measuring ``cuda`` candidates: LocalBuilder builds and checks them, LocalRunner runs them on a GPU.

    MeasureInput(cuda task) --LocalBuilder--> .cubin (+ .ptx, .cu, .json), or
        INSTANTIATION_ERROR (the GPU could not launch it: check_gpu_program; or the lowering
        refuses it), COMPILE_DEVICE (nvcc fails or is missing)
    --LocalRunner--> CUDA-event times on sc.cuda(0), or RUNTIME_DEVICE saying there is no
        CUDA device / pycuda here (never a made-up time)
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from scheduler_core import te
from scheduler_core.dag.compute_dag import ComputeDAG
from scheduler_core.dag.task import Task
from scheduler_core.driver.nvcc import nvcc_available
from scheduler_core.driver.program import program_from_steps
from scheduler_core.measure.data import FAILED_COST_S, BuildResult, MeasureErrorNo, MeasureInput
from scheduler_core.measure.local_builder import LocalBuilder, build_in_worker
from scheduler_core.measure.local_runner import LocalRunner, cuda_unavailable
from scheduler_core.schedule.loop_state import State
from scheduler_core.schedule.schedule_api import Schedule
from sketch_rules import generate_sketches, sample_init_population
from tests import workloads as W
from tests.sketch_rules.stub_policy import StubPolicy

E = MeasureErrorNo
NO_NVCC = nvcc_available()
NO_GPU = cuda_unavailable()


def vector_add_input(target="cuda -arch=sm_80", n=1024, threads=64, vector=1) -> MeasureInput:
    """``C = A + B``: blockIdx.x / threadIdx.x (/ a vectorized inner loop)."""
    A = te.placeholder((n,), name="A")
    B = te.placeholder((n,), name="B")
    C = te.compute((n,), lambda i: A[i] + B[i], name="C")
    dag = ComputeDAG([A, B, C])
    s = Schedule.from_state(State.from_dag(dag))
    out = dag.tensors[2]
    rest = s[out].op.axis[0]
    if vector > 1:
        rest, vi = s[out].split(rest, factor=vector)
        s[out].vectorize(vi)
    bx, tx = s[out].split(rest, factor=threads)
    s[out].bind(bx, te.thread_axis("blockIdx.x"))
    s[out].bind(tx, te.thread_axis("threadIdx.x"))
    return MeasureInput(Task.create(dag, target), s.state)


def sampled_matmul_input(target="cuda -arch=sm_80") -> MeasureInput:
    """A state of the init population of a 64 x 64 x 32 matmul (shared tiles, vthreads)."""
    from scheduler_core.search.search_task import SearchTask
    from sketch_rules.params import SketchPolicyParams

    task = SearchTask(compute_dag=ComputeDAG(W.matmul(64, 64, 32)), target=target)
    policy = StubPolicy(task, SketchPolicyParams(), np.random.default_rng(0))
    (state,) = sample_init_population(policy, generate_sketches(policy), 1, np.random.default_rng(0),
                                      check_lowering=False)
    return MeasureInput(Task.create(task.compute_dag, target), state)


def cross_thread_reduction_input() -> MeasureInput:
    """``B[i] = sum_k A[i, k]`` with k's inner part bound to threadIdx.x: a reduction across GPU
    threads, which the lowering refuses (for now) -- an INSTANTIATION_ERROR either way when the
    bound threads exceed the target's limit."""
    A = te.placeholder((4, 256), name="A")
    k = te.reduce_axis((0, 256), name="k")
    B = te.compute((4,), lambda i: te.sum(A[i, k], axis=k), name="B")
    dag = ComputeDAG([A, B])
    s = Schedule.from_state(State.from_dag(dag))
    out = dag.tensors[1]
    ko, ki = s[out].split(s[out].op.reduce_axis[0], factor=128)
    s[out].bind(s[out].op.axis[0], te.thread_axis("blockIdx.x"))
    s[out].bind(ki, te.thread_axis("threadIdx.x"))
    return MeasureInput(Task.create(dag, "cuda -max_threads_per_block=64"), s.state)


@pytest.fixture(scope="module")
def builder():
    with LocalBuilder(timeout_s=120, n_parallel=2) as b:
        yield b


def test_a_cuda_task_is_recognised():
    assert vector_add_input().task.target.is_gpu
    assert not Task.create(ComputeDAG(W.matmul(4, 4, 4)), "llvm").target.is_gpu


@pytest.mark.skipif(NO_NVCC is not None, reason=f"nvcc/ptxas cannot run here: {NO_NVCC}")
def test_builder_compiles_a_valid_candidate_to_ptx_and_cubin(builder):
    inputs = [vector_add_input(), sampled_matmul_input()]
    results = builder.build(inputs)
    for inp, res in zip(inputs, results):
        assert res.error_no == E.NO_ERROR, res.error_msg
        assert res.filename.endswith(".cubin") and os.path.getsize(res.filename) > 0
        stem = os.path.splitext(res.filename)[0]
        with open(stem + ".ptx") as f:
            ptx = f.read()
        assert ".entry default_function_kernel0" in ptx
        for ext in (".cu", ".json"):
            assert os.path.getsize(stem + ext) > 0
        assert res.args == tuple(inp.task.compute_dag.tensors) and res.time_cost > 0


def test_builder_refuses_too_many_threads_before_compiling(builder):
    """128 threads per block on a target allowing 64: INSTANTIATION_ERROR naming the limit,
    no artifact (the check runs before nvcc, so this holds without nvcc too)."""
    over = vector_add_input("cuda -arch=sm_80 -max_threads_per_block=64", threads=128)
    wide = vector_add_input(vector=8)
    before = set(os.listdir(builder.build_dir))
    r_over, r_wide = builder.build([over, wide])
    assert set(os.listdir(builder.build_dir)) == before  # nothing written
    assert r_over.error_no == E.INSTANTIATION_ERROR and r_over.filename == ""
    assert "InvalidGpuProgramError" in r_over.error_msg
    assert "128 threads per block" in r_over.error_msg and "max_threads_per_block=64" in r_over.error_msg
    assert r_wide.error_no == E.INSTANTIATION_ERROR and "max_vector_bytes=16" in r_wide.error_msg


def test_builder_maps_lowering_refusals_to_instantiation_error(builder):
    (res,) = builder.build([cross_thread_reduction_input()])
    assert res.error_no == E.INSTANTIATION_ERROR, res.error_msg
    assert res.filename == ""


def test_build_in_worker_reports_a_missing_nvcc_as_compile_device(monkeypatch, tmp_path):
    """Without nvcc a valid candidate is COMPILE_DEVICE with nvcc's absence in the message."""
    import scheduler_core.driver.nvcc as nvcc

    monkeypatch.setattr(nvcc, "find_tool", lambda name: None)
    inp = vector_add_input()
    _, dag_json, target, records = (None, inp.task.compute_dag.to_json(), str(inp.task.target),
                                    [list(s.to_record()) for s in inp.state.transform_steps])
    filename, error_no, msg, _ = build_in_worker(dag_json, target, records, str(tmp_path / "x.cubin"))
    assert filename == "" and error_no == E.COMPILE_DEVICE
    assert "nvcc" in msg and "not found" in msg


def test_runner_rebuilds_the_module_of_the_steps():
    """What the runner worker launches is the builder's program: same CUDA source."""
    inp = vector_add_input()
    records = [list(s.to_record()) for s in inp.state.transform_steps]
    a = program_from_steps(inp.task, records).build()
    b = program_from_steps(inp.task, records).build(device_image=b"not compiled")
    assert a.imported_modules[0].get_source() == b.imported_modules[0].get_source()
    assert b.imported_modules[0].cubin() == b"not compiled"


def test_runner_without_a_gpu_reports_runtime_device_and_no_time():
    if not NO_GPU:
        pytest.skip("a usable CUDA device is present")
    inp = vector_add_input()
    built = BuildResult("/nonexistent/0000001.cubin", tuple(inp.task.compute_dag.tensors), E.NO_ERROR, "", 0.5)
    failed = BuildResult("", built.args, E.INSTANTIATION_ERROR, "too many threads", 0.1)
    with LocalRunner(timeout_s=30, check_correctness=True) as runner:
        res, passed = runner.run([inp, inp], [built, failed])
    assert res.error_no == E.RUNTIME_DEVICE and res.costs == (FAILED_COST_S,) and res.cost is None
    assert "cuda" in res.error_msg.lower()
    assert "no usable CUDA device" in res.error_msg or "pycuda" in res.error_msg
    assert "no time is reported" in res.error_msg
    assert passed.error_no == E.INSTANTIATION_ERROR and passed.error_msg == "too many threads"


@pytest.mark.gpu
@pytest.mark.skipif(bool(NO_GPU) or NO_NVCC is not None, reason=f"needs a CUDA device and nvcc: {NO_GPU or NO_NVCC}")
def test_builder_and_runner_measure_on_the_gpu(builder):
    inputs = [vector_add_input(), sampled_matmul_input()]
    results = builder.build(inputs)
    with LocalRunner(timeout_s=60, number=5, repeat=2, min_repeat_ms=1, check_correctness=True) as runner:
        measured = runner.run(inputs, results)
    for m in measured:
        assert m.error_no == E.NO_ERROR, m.error_msg
        assert len(m.costs) == 2 and all(0 < c < 1 for c in m.costs)


def test_device_attributes_need_a_cuda_device():
    """sc.cuda(0)'s TVM attributes come from the device; the CPU has none, and without a GPU
    asking says why."""
    from scheduler_core.base.errors import DeviceRuntimeError
    from scheduler_core.runtime.device import cpu, cuda

    with pytest.raises(DeviceRuntimeError, match="CUDA device attribute"):
        _ = cpu(0).max_threads_per_block
    if NO_GPU:
        with pytest.raises(DeviceRuntimeError, match="cannot be used"):
            _ = cuda(0).max_threads_per_block
    else:
        assert cuda(0).max_threads_per_block >= 512 and cuda(0).warp_size == 32


@pytest.mark.skipif(bool(NO_GPU), reason=f"no GPU here: {NO_GPU}")
def test_hardware_params_queried_from_the_device():
    from scheduler_core.runtime.cuda_driver import device_attributes, device_hardware_params

    attrs = device_attributes(0)
    hw = device_hardware_params(0)
    assert hw.max_threads_per_block == attrs["max_threads_per_block"]
    assert hw.max_shared_memory_per_block == attrs["max_shared_memory_per_block"]
    assert hw.warp_size == attrs["warp_size"] and hw.max_vthread_extent == attrs["warp_size"] // 4


def test_sticky_cuda_errors_are_recognised():
    # the messages pycuda gave on an H100 after a kernel wrote out of bounds (benchmarks/gpu)
    from scheduler_core.measure.local_runner import cuda_context_lost
    assert cuda_context_lost("LogicError: cuCtxSynchronize failed: an illegal memory access was encountered")
    assert cuda_context_lost("LogicError: cuMemAlloc failed: misaligned address")
    assert not cuda_context_lost("DeviceRuntimeError: the CUDA driver could not load the kernels: no kernel image")
    assert not cuda_context_lost("WRONG_ANSWER: output 0 differs")
