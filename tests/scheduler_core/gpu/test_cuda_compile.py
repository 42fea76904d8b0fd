"""CUDA C compiled with nvcc: the hand-built kernel-form programs of ``test_cuda_codegen`` and the
hand-written GPU schedules through ptxas (registers, shared memory, vector PTX), compile errors
and the compile cache.  Skipped with the reason where there is no nvcc; no GPU is needed.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from scheduler_core.base.errors import BuildError
from scheduler_core.codegen.cuda_codegen import cuda_source, kernel_symbols
from scheduler_core.codegen.cuda_launch import launch_description
from scheduler_core.driver.nvcc import (
    compile_cuda,
    ptxas_info,
)
from scheduler_core.ir import expr as E
from scheduler_core.ir import tir as T
from tests.scheduler_core.gpu.test_cuda_codegen import (
    ARCH,
    buf,
    casts_source,
    func,
    load,
    loop,
    needs_nvcc,
    ptx_of,
    signature,
    symbolic_2d,
    tiled_matmul,
    two_kernels,
    vector_add,
    vectorized,
)

# -- tests: compile with nvcc ------------------------------------------------------

HAND_BUILT = {
    "vector_add_symbolic": lambda: vector_add(E.Var("n")),
    "vector_add_const": lambda: vector_add(1000),
    "tiled_matmul": tiled_matmul,
    "vectorized": vectorized,
    "two_kernels": two_kernels,
    "symbolic_2d": symbolic_2d,
}


@needs_nvcc
@pytest.mark.parametrize("name", sorted(HAND_BUILT))
def test_hand_built_kernels_compile(name):
    f = HAND_BUILT[name]()
    src, ptx = ptx_of(f)
    text = ptx.decode()
    syms = kernel_symbols(f)
    for sym in syms:
        assert f".entry {sym}(" in text
    info = ptxas_info(ptx, ARCH)
    assert set(info) == set(syms)
    desc = launch_description(f)
    for k in desc["kernels"]:
        got = info[k["symbol"]]
        assert got["registers"] > 0
        assert got["spill_stores"] == 0 and got["spill_loads"] == 0
        assert got["shared_bytes"] == k["shared_bytes"]


@needs_nvcc
def test_matmul_shared_bytes_and_vector_ptx():
    _, ptx = ptx_of(tiled_matmul())
    assert ptxas_info(ptx, ARCH)["mm_kernel0"]["shared_bytes"] == 512
    assert "bar.sync" in ptx.decode()
    _, vptx = ptx_of(vectorized())
    assert "ld.global.nc.v4.f32" in vptx.decode() or "ld.global.v4.f32" in vptx.decode()
    assert "st.global.v4.f32" in vptx.decode() and "st.global.v2.f32" in vptx.decode()


@needs_nvcc
def test_other_hand_built_sources_compile():
    for test_src in (hostile_names_source(), intrinsics_source(), casts_source()):
        compile_cuda(test_src, ARCH, "ptx")


def hostile_names_source():
    names = ["a*/\n#define x", "int", "threadIdx", "__shared__", "expf", "A", "A", "min"]
    bufs = [buf(nm, (64,)) for nm in names]
    tx = E.Var("blockDim")
    total = load(bufs[0], tx)
    for b in bufs[1:-1]:
        total = total + E.call("exp", load(b, tx))
    return cuda_source(func("f*/\n", tuple(bufs), loop(tx, 64, T.Store(bufs[-1], tx, total), "threadIdx.x")))


def intrinsics_source():
    A, B, I = buf("A", (64,)), buf("B", (64,)), buf("I", (64,), "int64")
    tx = E.Var("tx")
    x = load(A, tx)
    val = E.const(0.0)
    for name in E.UNARY_INTRINSICS:
        val = val + E.call(name, x)
    val = val + E.binary("pow", x, E.const(2.0)) + x // E.const(3.0) + x % E.const(3.0)
    stmts = T.seq(T.Store(B, tx, val), T.Store(I, tx, E.cast("int64", tx) * E.const(3, "int64") // 7))
    return cuda_source(func("intr", (A, B, I), loop(tx, 64, stmts, "threadIdx.x"), fast_math=True))


@needs_nvcc
def test_compile_error_names_the_source_line():
    src = 'extern "C" __global__ void k(float* A) {\n  A[0] = undefined_thing + 1;\n}\n'
    with pytest.raises(BuildError) as err:
        compile_cuda(src, ARCH)
    msg = str(err.value)
    assert "undefined_thing" in msg and "line 2" in msg and "kernel.cu(2)" in msg


def test_missing_nvcc_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.delenv("CUDA_PATH", raising=False)
    import scheduler_core.driver.nvcc as nv
    monkeypatch.setattr(nv.os.path, "isfile", lambda p: False)
    assert "nvcc" in nv.nvcc_available()
    with pytest.raises(BuildError, match="'nvcc' was not found"):
        nv.compile_cuda("extern \"C\" __global__ void k() {}\n" + "// unique " + os.urandom(4).hex())


@needs_nvcc
def test_compile_cache_and_cubin():
    src = cuda_source(vector_add(1000))
    a = compile_cuda(src, ARCH, "ptx")
    assert compile_cuda(src, ARCH, "ptx") is a
    cubin = compile_cuda(src, ARCH, "cubin")
    assert cubin[:4] == b"\x7fELF"
    with pytest.raises(BuildError, match="arch"):
        compile_cuda(src, "80")


def test_float_literals_read_back_exactly():
    from scheduler_core.codegen.cuda_literals import float_literal
    for v in (0.257, -0.148, 1e-5, 3.4028234663852886e38, 1.0, 2.0 ** -149, 123456789.0):
        text = float_literal(v, "float32")
        assert text.endswith("f")
        assert np.float32(text[:-1]) == np.float32(v)
    assert float_literal(0.1, "float64") == "0.1"
    assert float_literal(float("-inf"), "float32") == "__int_as_float(0xff800000)"


# -- the hand-written GPU schedules, lowered by the GPU lowering -----------------------

def _gpu_cases():
    try:
        from tests.scheduler_core.gpu.gpu_schedules import ALL_CASES
    except ImportError:  # the GPU lowering or the schedules are not there
        return {}
    return ALL_CASES


GPU_CASES = _gpu_cases()


def _count_barriers(s):
    return sum(1 for st in T.walk_stmts(s) if isinstance(st, T.Barrier))


@pytest.mark.skipif(not GPU_CASES, reason="tests/scheduler_core/gpu/gpu_schedules.py is not importable")
@pytest.mark.parametrize("name", sorted(GPU_CASES))
def test_gpu_schedule_prints(name):
    f = GPU_CASES[name]().kernel_form()
    src = cuda_source(f, "cuda")
    launches = f.attrs["kernels"]
    syms = kernel_symbols(f)
    assert syms == [lc["name"] for lc in launches]  # plain names stay as they are
    assert src.count('extern "C" __global__ void') == len(launches)
    for lc, sym in zip(launches, syms):
        assert len(signature(src, sym)) == len(lc["params"])
        threads = lc["block"][0] * lc["block"][1] * lc["block"][2]
        assert f"__launch_bounds__({threads}) {sym}(" in src
    assert src.count("__syncthreads();") == _count_barriers(f.body)
    desc = launch_description(f)
    assert [k["params"] for k in desc["kernels"]] == [lc["params"] for lc in launches]


@needs_nvcc
@pytest.mark.skipif(not GPU_CASES, reason="tests/scheduler_core/gpu/gpu_schedules.py is not importable")
@pytest.mark.parametrize("name", sorted(GPU_CASES))
def test_gpu_schedule_compiles(name):
    f = GPU_CASES[name]().kernel_form()
    _, ptx = ptx_of(f)
    info = ptxas_info(ptx, ARCH)
    for lc in f.attrs["kernels"]:
        got = info[lc["name"]]
        assert got["registers"] > 0
        assert got["shared_bytes"] == lc["shared_bytes"]
        assert got["spill_stores"] == 0 and got["spill_loads"] == 0
