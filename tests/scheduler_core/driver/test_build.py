"""sc.build end to end: lower + LLVM codegen + runtime, export and reload, argument checks."""

import subprocess
import sys
import textwrap

import numpy as np
import pytest

import scheduler_core as sc
from scheduler_core import te
from tests.workloads import matmul_add


def _tiled_matmul_add(n=64):
    A, B, C, out = matmul_add(n, n, n)
    mm = out.op.input_tensors()[0]
    s = te.create_schedule(out.op)
    i, j = s[out].op.axis
    io, ii = s[out].split(i, factor=8)
    jo, ji = s[out].split(j, factor=16)
    s[out].reorder(io, jo, ii, ji)
    s[out].parallel(io)
    s[out].vectorize(ji)
    s[mm].compute_at(s[out], jo)
    return s, [A, B, C, out]


def _inputs(n, rng):
    return [rng.random((n, n), dtype=np.float32) for _ in range(3)]


def test_build_parallel_vectorized_matmul_matches_numpy():
    n = 64
    s, args = _tiled_matmul_add(n)
    f = sc.build(s, args, "llvm", name="mm_add")
    a, b, c = _inputs(n, np.random.default_rng(0))
    out = np.empty((n, n), np.float32)
    f(a, b, c, out)
    np.testing.assert_allclose(out, a @ b + c, rtol=1e-4)
    ll = f.get_source("ll")
    assert "<16 x float>" in ll or "<8 x float>" in ll
    assert "__autosched_parallel_pool" in ll or "GOMP_parallel" in ll  # thread pool or libgomp
    assert f.get_source("asm")


@pytest.mark.parametrize("target", ["llvm -mcpu=core-avx2", "llvm -mcpu=skylake-avx512"])
def test_build_for_named_cpus_runs_here(target):
    n = 32
    s, args = _tiled_matmul_add(n)
    f = sc.build(s, args, target)
    a, b, c = _inputs(n, np.random.default_rng(1))
    out = np.empty((n, n), np.float32)
    f(a, b, c, out)
    np.testing.assert_allclose(out, a @ b + c, rtol=1e-4)


def test_export_library_and_object_load_back_and_run(tmp_path):
    n = 32
    s, args = _tiled_matmul_add(n)
    f = sc.build(s, args, "llvm", name="mm_add")
    a, b, c = _inputs(n, np.random.default_rng(2))
    so = tmp_path / "mm_add.so"
    f.export_library(str(so))
    header = (tmp_path / "mm_add.h").read_text()
    assert "mm_add(" in header
    obj = tmp_path / "mm_add.o"
    f.save(str(obj))
    for path in (so, obj):
        g = sc.load_module(str(path))
        out = np.empty((n, n), np.float32)
        g(a, b, c, out)
        np.testing.assert_allclose(out, a @ b + c, rtol=1e-4)


def test_exported_library_callable_from_plain_ctypes_in_another_process(tmp_path):
    n = 16
    s, args = _tiled_matmul_add(n)
    f = sc.build(s, args, "llvm", name="mm_add")
    so = tmp_path / "lib_mm.so"
    f.export_library(str(so))
    code = textwrap.dedent(f"""
        import ctypes, numpy as np
        lib = ctypes.CDLL({str(so)!r})
        fn = lib.mm_add
        fn.restype = ctypes.c_int32
        rng = np.random.default_rng(3)
        a, b, c = (rng.random(({n}, {n}), dtype=np.float32) for _ in range(3))
        out = np.zeros(({n}, {n}), np.float32)
        rc = fn(*[ctypes.c_void_p(x.ctypes.data) for x in (a, b, c, out)])
        assert rc == 0
        np.testing.assert_allclose(out, a @ b + c, rtol=1e-4)
        print("ok")
    """)
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert "ok" in res.stdout


def test_wrong_arguments_raise_clear_errors():
    n = 16
    s, args = _tiled_matmul_add(n)
    f = sc.build(s, args, "llvm")
    a, b, c = _inputs(n, np.random.default_rng(4))
    out = np.empty((n, n), np.float32)
    with pytest.raises(sc.RuntimeArgumentError, match="shape"):
        f(a, b, c[:8], out)
    with pytest.raises(sc.RuntimeArgumentError, match="dtype"):
        f(a.astype(np.float64), b, c, out)
    with pytest.raises(sc.RuntimeArgumentError):
        f(a, b, c)


def test_symbolic_shape_is_a_runtime_argument():
    n = te.var("n")
    A = te.placeholder((n, 4), name="A")
    B = te.compute((n, 4), lambda i, j: te.exp(A[i, j]) * 2.0, name="B")
    s = te.create_schedule(B.op)
    io, ii = s[B].split(B.op.axis[0], factor=8)
    s[B].parallel(io)
    f = sc.build(s, [A, B], "llvm")
    for size in (1, 7, 100):
        a = np.random.default_rng(size).random((size, 4), dtype=np.float32)
        b = np.empty_like(a)
        f(a, b)
        np.testing.assert_allclose(b, np.exp(a) * 2, rtol=1e-5)


def test_an_unbound_schedule_builds_for_cuda_as_a_one_thread_kernel():
    A = te.placeholder((4,), name="A")
    B = te.compute((4,), lambda i: A[i] + 1.0, name="B")
    s = te.create_schedule(B.op)
    mod = sc.build(s, [A, B], "cuda")
    assert "__global__" in mod.imported_modules[0].get_source()
    (kernel,) = mod.imported_modules[0].launches
    assert kernel["grid"] == [1, 1, 1] and kernel["block"] == [1, 1, 1]
    a, b = np.arange(4, dtype="float32"), np.zeros(4, "float32")
    mod.emulate(a, b)
    np.testing.assert_allclose(b, a + 1)
    with pytest.raises(sc.BuildError, match="cuda"):
        sc.build(s, [A, B], "opencl")
