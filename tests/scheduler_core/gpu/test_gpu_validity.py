"""``check_gpu_program``: the static checks of TVM's VerifyGPUCode on a built CudaModule.

Each limit is exceeded by a small hand-written schedule (or a target option lowering the
limit) and the error names the kernel, the value and the limit; a valid program passes,
with the register check from ``ptxas -v`` where nvcc is available."""

from __future__ import annotations

import pytest

import scheduler_core as sc
from scheduler_core import te
from scheduler_core.base.errors import BuildError
from scheduler_core.base.target import HardwareParams, Target
from scheduler_core.driver.gpu_validity import (
    MAX_VECTOR_BYTES,
    InvalidGpuProgramError,
    check_gpu_program,
    gpu_check_limits,
    gpu_program_problems,
    kernel_resources,
)
from scheduler_core.driver.nvcc import nvcc_available

NO_NVCC = nvcc_available()


def vector_add(n=1024, threads=64, vector=1, vthreads=1, dtype="float32"):
    """``C = A + B`` split into blockIdx.x / [vthread] / threadIdx.x / [vectorized] loops."""
    A = te.placeholder((n,), dtype, name="A")
    B = te.placeholder((n,), dtype, name="B")
    C = te.compute((n,), lambda i: A[i] + B[i], name="C")
    s = te.create_schedule(C.op)
    rest = C.op.axis[0]
    if vector > 1:
        rest, vi = s[C].split(rest, factor=vector)
        s[C].vectorize(vi)
    rest, tx = s[C].split(rest, factor=threads)
    if vthreads > 1:
        rest, vt = s[C].split(rest, factor=vthreads)
        s[C].bind(vt, te.thread_axis("vthread"))
    s[C].bind(rest, te.thread_axis("blockIdx.x"))
    s[C].bind(tx, te.thread_axis("threadIdx.x"))
    return s, [A, B, C]


def shared_copy(n=1024, threads=64):
    """``C = 2 * A`` through a ``shared`` cache of each block's tile of ``A``."""
    A = te.placeholder((n,), name="A")
    C = te.compute((n,), lambda i: A[i] * 2.0, name="C")
    s = te.create_schedule(C.op)
    AS = s.cache_read(A, "shared", [C])
    bx, tx = s[C].split(C.op.axis[0], factor=threads)
    s[C].bind(bx, te.thread_axis("blockIdx.x"))
    s[C].bind(tx, te.thread_axis("threadIdx.x"))
    s[AS].compute_at(s[C], bx)
    ax = s[AS].op.axis[0]
    s[AS].bind(ax, te.thread_axis("threadIdx.x"))
    return s, [A, C]


def build(sch_args, target="cuda"):
    s, args = sch_args
    return sc.build(s, args, target)


def checks(err: InvalidGpuProgramError) -> set:
    return {p[0] for p in err.problems}


def test_a_valid_program_passes():
    mod = build(vector_add())
    check_gpu_program(mod, "cuda", registers=False)
    check_gpu_program(mod)  # the module's own target; registers when nvcc is here
    (k,) = kernel_resources(mod)
    assert (k["threads"], k["block"], k["grid"]) == (64, [64, 1, 1], [16, 1, 1])
    assert k["shared_bytes"] == 0 and k["vector_bytes"] == 0


def test_limits_come_from_the_target_and_hardware_params():
    lim = gpu_check_limits("cuda -arch=sm_80")
    assert (lim.max_threads_per_block, lim.max_shared_memory_per_block, lim.registers_per_block,
            lim.warp_size, lim.max_vthread_extent, lim.max_vector_bytes) == (1024, 48 * 1024, 65536, 32, 8, 16)
    lim = gpu_check_limits(Target.parse("cuda -max_threads_per_block=256 -registers_per_block=32768"))
    assert (lim.max_threads_per_block, lim.registers_per_block) == (256, 32768)
    lim = gpu_check_limits("cuda", HardwareParams(max_vthread_extent=4, max_local_memory_per_block=100))
    assert (lim.max_vthread_extent, lim.max_local_memory_per_block) == (4, 100)
    with pytest.raises(BuildError, match="not a cuda target"):
        gpu_check_limits("llvm")


def test_too_many_threads_per_block():
    mod = build(vector_add(threads=128))
    with pytest.raises(InvalidGpuProgramError, match=r"128 threads per block.*max_threads_per_block=64") as info:
        check_gpu_program(mod, "cuda -max_threads_per_block=64", registers=False)
    assert checks(info.value) == {"threads_per_block"}
    assert isinstance(info.value, BuildError)
    (problem,) = info.value.problems
    assert problem == ("threads_per_block", "default_function_kernel0", 128, 64)


def test_too_much_shared_memory():
    mod = build(shared_copy(threads=64))
    (k,) = kernel_resources(mod)
    assert k["shared_bytes"] == 64 * 4
    check_gpu_program(mod, "cuda", registers=False)
    with pytest.raises(InvalidGpuProgramError, match=r"256 bytes of shared memory.*max_shared_memory_per_block=128"):
        check_gpu_program(mod, "cuda -max_shared_memory_per_block=128", registers=False)


def test_vector_accesses_wider_than_16_bytes():
    ok = build(vector_add(vector=4))
    assert kernel_resources(ok)[0]["vector_bytes"] == 16 == MAX_VECTOR_BYTES
    check_gpu_program(ok, "cuda", registers=False)
    wide = build(vector_add(vector=8))
    with pytest.raises(InvalidGpuProgramError, match=r"\(8 lanes\) moves 32 bytes.*max_vector_bytes=16") as info:
        check_gpu_program(wide, "cuda", registers=False)
    assert checks(info.value) == {"vector_bytes"}
    half = build(vector_add(vector=8, dtype="float16"))
    check_gpu_program(half, "cuda", registers=False)  # 8 x 2 bytes


def test_vthread_extent_over_the_limit():
    ok = build(vector_add(vthreads=8))
    assert ok.launch["max_vthread_extent"] == 8
    check_gpu_program(ok, "cuda", registers=False)
    bad = build(vector_add(vthreads=16, n=2048))
    with pytest.raises(InvalidGpuProgramError, match=r"vthread loop nest of extent 16.*max_vthread_extent=8"):
        check_gpu_program(bad, "cuda", registers=False)


def test_local_memory_per_block():
    mod = build(vector_add())
    assert kernel_resources(mod)[0]["local_bytes"] == 0
    A = te.placeholder((64, 16), name="A")
    k = te.reduce_axis((0, 16), name="k")
    C = te.compute((64,), lambda i: te.sum(A[i, k], axis=k), name="C")
    s = te.create_schedule(C.op)
    CL = s.cache_write(C, "local")
    bx, tx = s[C].split(C.op.axis[0], factor=32)
    s[C].bind(bx, te.thread_axis("blockIdx.x"))
    s[C].bind(tx, te.thread_axis("threadIdx.x"))
    s[CL].compute_at(s[C], tx)
    red = sc.build(s, [A, C], "cuda")
    assert kernel_resources(red)[0]["local_bytes"] == 4
    check_gpu_program(red, "cuda", registers=False)
    with pytest.raises(InvalidGpuProgramError, match=r"local memory.*max_local_memory_per_block=64"):
        check_gpu_program(red, "cuda", HardwareParams(max_local_memory_per_block=64), registers=False)


def test_every_problem_is_named():
    mod = build(vector_add(threads=128, vector=8))
    with pytest.raises(InvalidGpuProgramError) as info:
        check_gpu_program(mod, "cuda -max_threads_per_block=64", registers=False)
    assert checks(info.value) == {"threads_per_block", "vector_bytes"}
    assert "VerifyGPUCode" in str(info.value) and "default_function_kernel0" in str(info.value)


@pytest.mark.skipif(NO_NVCC is not None, reason=f"nvcc/ptxas cannot run here: {NO_NVCC}")
def test_registers_per_block_from_ptxas():
    mod = build(vector_add(threads=64))
    check_gpu_program(mod, "cuda", registers=True)
    problems = gpu_program_problems(mod, "cuda -registers_per_block=256", registers=True)
    assert [p[0] for p in problems] == ["registers"]
    assert "registers per thread x 64 threads" in problems[0][4]
    # 40 threads count as two whole warps
    mod40 = build(vector_add(n=1000, threads=40))
    (p,) = gpu_program_problems(mod40, "cuda -registers_per_block=256", registers=True)
    assert "x 64 threads (40 rounded up to whole warps)" in p[4]


def test_local_memory_per_thread_over_cudas_512_KiB():
    # each thread caches a whole row of 2^18 floats (1 MiB) in local memory: the driver refuses
    # to launch more than 512 KiB per thread, whatever the per-block limit says
    A = te.placeholder((2, 1 << 18), name="A")
    C = te.compute((2, 1 << 18), lambda i, j: A[i, j] * 2.0, name="C")
    s = te.create_schedule(C.op)
    CL = s.cache_write(C, "local")
    s[C].bind(C.op.axis[0], te.thread_axis("threadIdx.x"))
    s[CL].compute_at(s[C], C.op.axis[0])
    mod = sc.build(s, [A, C], "cuda")
    assert kernel_resources(mod)[0]["local_bytes"] == 4 << 18
    (p,) = gpu_program_problems(mod, "cuda", registers=False)
    assert p[0] == "local_memory" and "more than CUDA's 524288 per thread" in p[4]
