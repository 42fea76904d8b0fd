"""The thread pool that runs parallel loops (codegen.thread_pool): results agree with numpy,
back-to-back and concurrent calls, nesting, errors, fork, exported libraries without this
package, and one set of threads however many modules a process builds or loads.  No
timings here: those are benchmarks/parallel_load.py's."""

import ctypes
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import scheduler_core as sc
from scheduler_core import te
from scheduler_core.base.build_config import BuildConfig
from scheduler_core.codegen import compile_primfunc as compile_passed
from scheduler_core.codegen import thread_pool
from scheduler_core.driver.build_module import run_passes
from scheduler_core.ir import expr as E
from scheduler_core.ir import tir as T
from scheduler_core.runtime import Module
from scheduler_core.runtime.export import find_c_compiler

ROOT = Path(__file__).resolve().parents[3]
RUNTIMES = ("pool", "gomp")


@pytest.fixture(autouse=True)
def pool_runtime(monkeypatch):
    monkeypatch.setenv("AUTOSCHED_PARALLEL_RUNTIME", "pool")


def build(func, target="llvm -num-cores=2", schedule="dynamic"):
    """Codegen after the driver's passes with ``BuildConfig(parallel_schedule=schedule)``."""
    return compile_passed(run_passes(func), target, BuildConfig(parallel_schedule=schedule))


def call(cf, *args) -> int:
    return cf.ctypes_function(*[a.ctypes.data if isinstance(a, np.ndarray) else int(a) for a in args])


def increment(name):
    """X[i] += 1 over a parallel loop i in [0, n)."""
    n = E.Var("n")
    X = T.Buffer("X", "float32", (n,))
    i = E.Var("i")
    body = T.Store(X, i, E.BufferLoad(X, i, "float32", 1) + 1.0)
    return T.PrimFunc(name, (X,), (n,), T.For(i, E.const(0), n, "parallel", body))


def nested(name):
    """X[i, j] = i * 100 + j + n with both loops parallel (the inner one runs serially)."""
    n = E.Var("n")
    X = T.Buffer("X", "float32", (n, 7))
    i, j = E.Var("i"), E.Var("j")
    inner = T.For(j, E.const(0), E.const(7), "parallel",
                  T.Store(X, i * 7 + j, E.cast("float32", i * 100 + j + n)))
    return T.PrimFunc(name, (X,), (n,), T.For(i, E.const(0), n, "parallel", inner))


def matmul_schedule(n=37, m=45, k=29):
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
    return s, [A, B, C]


@pytest.mark.parametrize("runtime", RUNTIMES)
@pytest.mark.parametrize("schedule", ("dynamic", "static"))
@pytest.mark.parametrize("target", ("llvm", "llvm -num-cores=2", "llvm -num-cores=3"))
def test_matmul_and_elementwise_match_numpy(runtime, schedule, target):
    s, args = matmul_schedule()
    with BuildConfig(parallel_runtime=runtime, parallel_schedule=schedule):
        f = sc.build(s, args, target)
    rng = np.random.default_rng(1)
    a, b = rng.random((37, 29), dtype=np.float32), rng.random((29, 45), dtype=np.float32)
    c = np.zeros((37, 45), np.float32)
    f(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5)

    A = te.placeholder((1001,), name="A")
    B = te.compute((1001,), lambda i: A[i] * 2.0 + 1.0, name="B")
    s = te.create_schedule(B.op)
    s[B].parallel(B.op.axis[0])
    f = sc.build(s, [A, B], target, config=BuildConfig(parallel_runtime=runtime, parallel_schedule=schedule))
    x, y = rng.random(1001, dtype=np.float32), np.zeros(1001, np.float32)
    f(x, y)
    np.testing.assert_allclose(y, x * 2 + 1, rtol=1e-6)


def test_pool_modules_call_the_pool_not_libgomp():
    cf = build(increment("inc_ir"))
    assert thread_pool.HOOK_SYMBOL in cf.llvm_ir and "GOMP_parallel" not in cf.llvm_ir
    hook = cf.engine.get_global_value_address(thread_pool.HOOK_SYMBOL)
    assert ctypes.c_void_p.from_address(hook).value == thread_pool.process_pool()


@pytest.mark.parametrize("n", [1, 2, 3, 16, 17, 1000])
def test_many_back_to_back_calls_see_every_chunk_completed(n):
    cf = build(increment(f"inc_b2b_{n}"))
    x = np.zeros(n, np.float32)
    for _ in range(2000):
        assert call(cf, x, n) == 0
    np.testing.assert_array_equal(x, np.full(n, 2000, np.float32))


def test_two_python_threads_calling_kernels_at_once():
    inc = build(increment("inc_threads"), "llvm")
    nest = build(nested("nested_threads"), "llvm")
    s, args = matmul_schedule()
    mm = sc.build(s, args, "llvm -num-cores=2")
    rng = np.random.default_rng(2)
    a, b = rng.random((37, 29), dtype=np.float32), rng.random((29, 45), dtype=np.float32)
    errors: list = []

    def incrementer(x):
        try:
            for _ in range(400):
                assert call(inc, x, x.size) == 0
        except BaseException as err:  # reported by the main thread
            errors.append(err)

    def other():
        try:
            for rows in range(1, 200):
                c = np.zeros((37, 45), np.float32)
                mm(a, b, c)
                np.testing.assert_allclose(c, a @ b, rtol=1e-5)
                y = np.zeros((rows, 7), np.float32)
                assert call(nest, y, rows) == 0
                np.testing.assert_array_equal(y, np.arange(rows)[:, None] * 100 + np.arange(7) + rows)
        except BaseException as err:
            errors.append(err)

    xs = [np.zeros(333, np.float32) for _ in range(2)]
    threads = [threading.Thread(target=incrementer, args=(x,)) for x in xs] + [threading.Thread(target=other)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "a caller hung"
    assert not errors, errors
    for x in xs:
        np.testing.assert_array_equal(x, np.full(333, 400, np.float32))


@pytest.mark.parametrize("schedule", ("dynamic", "static"))
def test_nested_parallel_loops(schedule):
    cf = build(nested(f"nested_{schedule}"), "llvm -num-cores=3", schedule)
    for rows in (1, 2, 5, 19, 300):
        x = np.zeros((rows, 7), np.float32)
        assert call(cf, x, rows) == 0
        np.testing.assert_array_equal(x, np.arange(rows)[:, None] * 100 + np.arange(7) + rows)


def test_an_error_in_a_chunk_reaches_the_caller():
    # Every iteration allocates n*n*n floats on the heap: 2**60 fails and the body returns 1.
    n = E.Var("n")
    A = T.Buffer("A", "float32", (64,))
    S = T.Buffer("S", "float32", (n, n, n), "local")
    i, k = E.Var("i"), E.Var("k")
    body = T.Allocate(S, T.seq(T.For(k, E.const(0), E.const(1), "serial", T.Store(S, k, E.const(1.0))),
                               T.Store(A, i, E.BufferLoad(S, E.const(0), "float32", 1))))
    cf = build(T.PrimFunc("pool_fail", (A,), (n,), T.For(i, E.const(0), E.const(64), "parallel", body)))
    a = np.zeros(64, np.float32)
    for _ in range(20):  # every time, and the pool stays usable after a failure
        assert call(cf, a, 1 << 20) != 0
        assert call(cf, a, 2) == 0
    np.testing.assert_array_equal(a, np.ones(64))


def test_a_forked_child_starts_its_own_workers():
    cf = build(increment("inc_fork"))
    x = np.zeros(100, np.float32)
    assert call(cf, x, 100) == 0  # the parent's pool has started
    pid = os.fork()
    if pid == 0:  # the child: no pool threads until its first parallel call
        code = 1
        try:
            y = np.zeros(1000, np.float32)
            for _ in range(300):
                call(cf, y, 1000)
            workers = len(os.listdir("/proc/self/task")) - 1
            code = 0 if (y == 300).all() and workers <= 1 else 2
        finally:
            os._exit(code)
    deadline = time.monotonic() + 60
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            pytest.fail("the forked child hung")
        time.sleep(0.02)
    assert os.waitstatus_to_exitcode(status) == 0
    assert call(cf, x, 100) == 0  # and the parent's pool still works
    np.testing.assert_array_equal(x, np.full(100, 2, np.float32))


PLAIN_SCRIPT = r"""
import ctypes, os, sys
lib = ctypes.CDLL(sys.argv[1])
fn = lib[sys.argv[2]]
fn.restype, fn.argtypes = ctypes.c_int32, [ctypes.c_void_p, ctypes.c_int32]
n = 1000
x = (ctypes.c_float * n)()
before = len(os.listdir("/proc/self/task"))
rcs = {fn(x, n) for _ in range(500)}
after = len(os.listdir("/proc/self/task"))
assert not [m for m in sys.modules if m.startswith("scheduler_core")]
print(sorted(rcs), all(v == 500 for v in x), after - before)
"""


def test_exported_library_and_object_run_without_this_package(tmp_path):
    cf = build(increment("inc_export"))
    mod = Module.from_compiled(cf)
    mod.export_library(tmp_path / "inc.so")
    mod.save(tmp_path / "inc.o")
    # the object needs libc only (no libgomp): link it by hand with pthreads and libm
    subprocess.run([find_c_compiler(), "-shared", "-o", str(tmp_path / "plain.so"), str(tmp_path / "inc.o"),
                    "-lpthread", "-lm"], check=True, capture_output=True, timeout=120)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "OMP_NUM_THREADS")}
    for lib in ("inc.so", "plain.so"):
        res = subprocess.run([sys.executable, "-c", PLAIN_SCRIPT, str(tmp_path / lib), "inc_export"],
                             capture_output=True, text=True, timeout=120, cwd=tmp_path, env=env)
        assert res.returncode == 0, res.stderr
        assert res.stdout.split() == ["[0]", "True", "1"]  # its own pool: one worker for 2 threads


MANY_MODULES_SCRIPT = r"""
import ctypes, os, sys, tempfile
from pathlib import Path
import numpy as np
from scheduler_core.codegen import parallel, thread_pool
from scheduler_core.runtime import Module, load_module
from tests.scheduler_core.codegen.test_thread_pool import build, call, increment, nested

tasks = lambda: len(os.listdir("/proc/self/task"))
before = tasks()
x = np.zeros(500, np.float32)
keep = []
for k in range(16):
    cf = build(increment(f"inc_many_{k}"), "llvm" if k % 2 else "llvm -num-cores=2")
    keep.append(cf)
    for _ in range(20):
        assert call(cf, x, 500) == 0
with tempfile.TemporaryDirectory() as tmp:
    for k in range(4):
        cf = build(nested(f"nested_many_{k}"))
        Module.from_compiled(cf).export_library(Path(tmp) / f"n{k}.so")
        Module.from_compiled(cf).save(Path(tmp) / f"n{k}.ll")
        for path in (Path(tmp) / f"n{k}.so", Path(tmp) / f"n{k}.ll"):
            loaded = load_module(path)
            y = np.zeros((40, 7), np.float32)
            loaded(y)
            assert (y == np.arange(40)[:, None] * 100 + np.arange(7) + 40).all()
            keep.append(loaded)
    hook = ctypes.c_void_p.in_dll(ctypes.CDLL(str(Path(tmp) / "n0.so")), thread_pool.HOOK_SYMBOL)
    assert hook.value == thread_pool.process_pool()
assert (x == 320).all()
print(tasks() - before, parallel.default_num_threads())
"""


def test_many_modules_in_one_process_share_one_pool():
    env = {**os.environ, "AUTOSCHED_PARALLEL_RUNTIME": "pool"}
    env.pop("OMP_NUM_THREADS", None)
    res = subprocess.run([sys.executable, "-c", MANY_MODULES_SCRIPT], capture_output=True, text=True,
                         timeout=300, cwd=ROOT, env=env)
    assert res.returncode == 0, res.stderr
    grown, default = map(int, res.stdout.split())
    assert grown <= max(default, 2) - 1  # the pool's workers, nothing per module


def test_unknown_runtime_is_a_build_error(monkeypatch):
    monkeypatch.setenv("AUTOSCHED_PARALLEL_RUNTIME", "tbb")
    with pytest.raises(sc.BuildError, match="RUNTIME"):
        build(increment("inc_bad"))


def test_attach_ignores_modules_without_a_pool():
    assert thread_pool.attach(None) is False and thread_pool.attach(0) is False
    assert thread_pool.attach_library(ctypes.CDLL(None)) is False
    assert thread_pool.has_hook(["x", thread_pool.HOOK_SYMBOL]) and not thread_pool.has_hook(["x"])

