"""The parallel-loop runtime (dynamic chunks on the default runtime, BuildConfig.parallel_runtime): results
agree with numpy for awkward extents, nesting, errors and one thread, under both chunkings.
The thread pool's own cases are in test_thread_pool.py.  No timings here: those are
benchmarks/parallel_load.py's."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import scheduler_core as sc
from scheduler_core import te
from scheduler_core.base.build_config import BuildConfig
from scheduler_core.codegen import compile_primfunc as compile_passed
from scheduler_core.driver.build_module import run_passes
from scheduler_core.ir import expr as E
from scheduler_core.ir import tir as T

SCHEDULES = ("dynamic", "static")


def compile_primfunc(func, schedule="dynamic", target="llvm"):
    """Codegen after the driver's passes, with the parallel schedule ``schedule``."""
    with BuildConfig(parallel_schedule=schedule):
        return compile_passed(run_passes(func), target)


def call(cf, *args) -> int:
    ptrs = [a.ctypes.data if isinstance(a, np.ndarray) else int(a) for a in args]
    return cf.ctypes_function(*ptrs)


def loop(var, extent, body, kind="serial", start=0):
    ext = E.const(extent) if isinstance(extent, int) else extent
    return T.For(var, E.const(start), ext, kind, body)


def fill(name, n_var=None, start=0):
    """X[i - start] = i * 3 + 1 over a parallel loop i in [start, start + n)."""
    n = n_var if n_var is not None else E.Var("n")
    X = T.Buffer("X", "float32", (n,))
    i = E.Var("i")
    body = T.Store(X, i - start, E.cast("float32", i * 3 + 1))
    return T.PrimFunc(name, (X,), (n,), loop(i, n, body, "parallel", start))


@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("n", [0, 1, 2, 3, 7, 16, 17, 100, 1001])
def test_extents_small_odd_and_large(schedule, n):
    cf = compile_primfunc(fill(f"fill_{schedule}"), schedule, "llvm -num-cores=2")
    x = np.full(max(n, 1), -1, np.float32)
    assert call(cf, x, n) == 0
    np.testing.assert_array_equal(x[:n], np.arange(n) * 3 + 1)
    if n == 0:
        assert x[0] == -1


@pytest.mark.parametrize("threads", [1, 2, 3, 8])
def test_thread_counts_including_one_and_more_than_cores(threads):
    cf = compile_primfunc(fill(f"fill_t{threads}", start=5), "dynamic", f"llvm -num-cores={threads}")
    for n in (1, 5, 37):
        x = np.zeros(n, np.float32)
        assert call(cf, x, n) == 0
        np.testing.assert_array_equal(x, (np.arange(n) + 5) * 3 + 1)


def test_dynamic_launcher_takes_chunks_from_an_atomic_counter(monkeypatch):
    monkeypatch.setenv("AUTOSCHED_PARALLEL_RUNTIME", "gomp")  # the libgomp launcher (the pool: test_thread_pool)
    cf = compile_primfunc(fill("fill_ir"), "dynamic")
    assert "atomicrmw add" in cf.llvm_ir and "GOMP_parallel" in cf.llvm_ir
    assert "omp_get_thread_num" not in cf.llvm_ir
    static = compile_primfunc(fill("fill_ir_static"), "static")
    assert "omp_get_thread_num" in static.llvm_ir


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_nested_parallel_loops_run_the_inner_one_serially(schedule):
    n = E.Var("n")
    X = T.Buffer("X", "float32", (n, 7))
    i, j = E.Var("i"), E.Var("j")
    body = loop(j, 7, T.Store(X, i * 7 + j, E.cast("float32", i * 100 + j + n)), "parallel")
    cf = compile_primfunc(T.PrimFunc(f"nested_{schedule}", (X,), (n,), loop(i, n, body, "parallel")),
                          schedule)
    for rows in (1, 2, 5, 19):
        x = np.zeros((rows, 7), np.float32)
        assert call(cf, x, rows) == 0
        np.testing.assert_array_equal(x, np.arange(rows)[:, None] * 100 + np.arange(7) + rows)


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_two_parallel_loops_in_sequence_with_captured_scalars(schedule):
    n = E.Var("n")
    A, B = T.Buffer("A", "float32", (n,)), T.Buffer("B", "float32", (n,))
    i, j = E.Var("i"), E.Var("j")
    first = loop(i, n, T.Store(B, i, E.BufferLoad(A, i, "float32", 1) * 2.0), "parallel")
    second = loop(j, n, T.Store(B, j, E.BufferLoad(B, j, "float32", 1) + E.cast("float32", n)), "parallel")
    cf = compile_primfunc(T.PrimFunc(f"two_{schedule}", (A, B), (n,), T.seq(first, second)), schedule)
    a = np.random.default_rng(0).random(333, dtype=np.float32)
    b = np.zeros_like(a)
    assert call(cf, a, b, 333) == 0
    np.testing.assert_allclose(b, a * 2 + 333, rtol=1e-6)


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_an_error_in_the_body_reaches_the_caller(schedule):
    # Every iteration allocates n*n*n floats on the heap: 2**60 fails and the body returns 1.
    n = E.Var("n")
    A = T.Buffer("A", "float32", (4,))
    S = T.Buffer("S", "float32", (n, n, n), "local")
    i, k = E.Var("i"), E.Var("k")
    body = T.Allocate(S, T.seq(loop(k, 1, T.Store(S, k, E.const(1.0))),
                               T.Store(A, i, E.BufferLoad(S, E.const(0), "float32", 1))))
    cf = compile_primfunc(T.PrimFunc(f"par_fail_{schedule}", (A,), (n,), loop(i, 4, body, "parallel")),
                          schedule, "llvm -num-cores=2")
    a = np.zeros(4, np.float32)
    assert call(cf, a, 2) == 0
    np.testing.assert_array_equal(a, [1, 1, 1, 1])
    assert call(cf, a, 1 << 20) != 0


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_scheduled_matmul_with_a_fused_parallel_loop_matches_numpy(schedule):
    n, m, k = 37, 45, 29  # no factor divides evenly
    A = te.placeholder((n, k), name="A")
    B = te.placeholder((k, m), name="B")
    r = te.reduce_axis((0, k), name="r")
    C = te.compute((n, m), lambda i, j: te.sum(A[i, r] * B[r, j], axis=r), name="C")
    s = te.create_schedule(C.op)
    i, j = s[C].op.axis
    io, ii = s[C].split(i, factor=4)
    jo, ji = s[C].split(j, factor=8)
    s[C].reorder(io, jo, ii, ji)
    s[C].parallel(s[C].fuse(io, jo))
    s[C].vectorize(ji)
    with BuildConfig(parallel_schedule=schedule):
        f = sc.build(s, [A, B, C], "llvm")
    rng = np.random.default_rng(1)
    a, b = rng.random((n, k), dtype=np.float32), rng.random((k, m), dtype=np.float32)
    c = np.zeros((n, m), np.float32)
    f(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5)


def test_unknown_schedule_is_a_build_error():
    with pytest.raises(sc.BuildError, match="SCHEDULE"):
        compile_primfunc(fill("fill_bad"), "guided")


def test_spin_count_is_set_only_when_the_user_chose_nothing():
    code = textwrap.dedent("""
        import os
        import scheduler_core.codegen.parallel as p
        applied = p.configure_libgomp_env()  # what the first build with the gomp runtime runs
        print(os.environ.get("GOMP_SPINCOUNT"), os.environ.get("OMP_WAIT_POLICY"), p.libgomp_mapped(),
              applied)
    """)
    env = {k: v for k, v in os.environ.items() if k not in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY")}

    def run(**extra):
        res = subprocess.run([sys.executable, "-c", code], env={**env, **extra}, capture_output=True,
                             text=True, timeout=120)
        assert res.returncode == 0, res.stderr
        return res.stdout.split()

    assert run() == ["None", "None", "True", "True"]  # applied while libgomp loaded, then removed
    assert run(OMP_WAIT_POLICY="active") == ["None", "active", "False", "False"]
    assert run(GOMP_SPINCOUNT="123") == ["123", "None", "False", "False"]


def test_one_thread_from_the_environment_matches_numpy():
    code = textwrap.dedent("""
        import numpy as np
        from scheduler_core.codegen import compile_primfunc, parallel
        from scheduler_core.driver.build_module import run_passes
        from tests.scheduler_core.codegen.test_parallel_runtime import fill
        assert parallel.default_num_threads() == 1
        cf = compile_primfunc(run_passes(fill("fill_one")))
        x = np.zeros(50, np.float32)
        assert cf.ctypes_function(x.ctypes.data, 50) == 0
        np.testing.assert_array_equal(x, np.arange(50) * 3 + 1)
        print("ok")
    """)
    res = subprocess.run([sys.executable, "-c", code], env={**os.environ, "OMP_NUM_THREADS": "1"},
                         capture_output=True, text=True, timeout=120, cwd=Path(__file__).resolve().parents[3])
    assert res.returncode == 0, res.stderr
    assert "ok" in res.stdout


def test_libgomp_is_loaded_only_by_a_gomp_build():
    code = textwrap.dedent("""
        import numpy as np
        import scheduler_core
        from scheduler_core.base.build_config import BuildConfig
        from scheduler_core.codegen import compile_primfunc, parallel
        from scheduler_core.driver.build_module import run_passes
        from tests.scheduler_core.codegen.test_parallel_runtime import fill
        x = np.zeros(50, np.float32)
        cf = compile_primfunc(run_passes(fill("fill_pool")))  # the default runtime: our pool
        assert cf.ctypes_function(x.ctypes.data, 50) == 0
        print(parallel.libgomp_mapped())
        cf = compile_primfunc(run_passes(fill("fill_gomp")), config=BuildConfig(parallel_runtime="gomp"))
        assert cf.ctypes_function(x.ctypes.data, 50) == 0
        print(parallel.libgomp_mapped(), (x == np.arange(50) * 3 + 1).all())
    """)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AUTOSCHED_PARALLEL")}
    res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120,
                         cwd=Path(__file__).resolve().parents[3])
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["False", "True", "True"]


def test_build_config_reads_the_environment_when_made(monkeypatch):
    monkeypatch.setenv("AUTOSCHED_PARALLEL_RUNTIME", "gomp")
    monkeypatch.setenv("AUTOSCHED_PARALLEL_SCHEDULE", "static")
    assert BuildConfig() == BuildConfig("gomp", "static") == BuildConfig.current()
    monkeypatch.delenv("AUTOSCHED_PARALLEL_RUNTIME")
    monkeypatch.delenv("AUTOSCHED_PARALLEL_SCHEDULE")
    assert BuildConfig() == BuildConfig("pool", "dynamic")
    with BuildConfig("gomp") as outer:
        assert BuildConfig.current() is outer
        with BuildConfig("pool", "static") as inner:
            assert BuildConfig.current() is inner
        assert BuildConfig.current() is outer
    assert BuildConfig.current() == BuildConfig()
    with pytest.raises(sc.BuildError, match="AUTOSCHED_PARALLEL_RUNTIME"):
        BuildConfig(parallel_runtime="tbb")
