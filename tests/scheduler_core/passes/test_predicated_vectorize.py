"""Vectorized loops with lane-dependent guards become masked (predicated) vector code.

The tail guard of a non-divisible split, ``if (o*W + v < n)``, used to send the whole
vectorized loop back to a serial loop; now the stores are predicated (masked stores,
values evaluated under the mask) with an unmasked fast path for full vectors.
"""

import ctypes

import numpy as np
import pytest

from scheduler_core import te
from scheduler_core.codegen import compile_primfunc as compile_passed
from scheduler_core.driver.build_module import build, run_passes
from scheduler_core.ir import expr as E
from scheduler_core.ir import expr_functor as EF
from scheduler_core.ir import tir as T
from scheduler_core.passes import vectorize_loops
from tests import workloads as W

RNG = np.random.default_rng(7)


def compile_primfunc(func):
    return compile_passed(run_passes(func), "llvm")


def call(cf, *args):
    ptrs = [a.ctypes.data if isinstance(a, np.ndarray) else int(a) for a in args]
    assert cf.ctypes_function(*ptrs) == 0


def _stores(s):
    return [x for x in T.walk_stmts(s) if isinstance(x, T.Store)]


def _loops(s):
    return [x for x in T.walk_stmts(s) if isinstance(x, T.For)]


def guarded_axpy(width: int, dtype: str, with_else: bool = False) -> T.PrimFunc:
    """C[j] = A[j]*2 + B[j] over ``for o in ceil(n/width): for v vectorized(width):
    if (o*width + v < n)``; with_else: a second guarded store writes D on the lanes
    where ``v < 2`` and E elsewhere (an if/else on the lane)."""
    n = E.Var("n")
    A, B, C, D = (T.Buffer(x, dtype, (n,)) for x in "ABCD")
    o, v = E.Var("o"), E.Var("v")
    j = o * width + v
    body = T.Store(C, j, E.BufferLoad(A, j, dtype) * E.const(2, dtype) + E.BufferLoad(B, j, dtype))
    if with_else:
        body = T.SeqStmt((body, T.IfThenElse(v < 2, T.Store(D, j, E.BufferLoad(A, j, dtype)),
                                             T.Store(D, j, E.BufferLoad(B, j, dtype)))))
    inner = T.For(v, E.const(0), E.const(width), "vectorized", T.IfThenElse(j < n, body, None, True))
    outer = T.For(o, E.const(0), (n + (width - 1)) // width, "serial", inner)
    return T.PrimFunc(f"axpy_{width}_{dtype}_{int(with_else)}", (A, B, C, D), (n,), outer)


def _data(n, dtype):
    if dtype == "int32":
        return RNG.integers(-1000, 1000, n).astype(dtype)
    return RNG.standard_normal(n).astype(dtype)


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32"])
@pytest.mark.parametrize("width", [4, 8, 16])
def test_predicated_tail_matches_numpy(width, dtype):
    """Extents 1..17 with vector widths 4/8/16: the tail is masked, nothing past n is written."""
    f = guarded_axpy(width, dtype, with_else=True)
    passed = run_passes(f)
    assert all(l.kind != "vectorized" and l.loop_var.name != "v" for l in _loops(passed.body))
    assert any(s.predicate is not None for s in _stores(passed.body))
    cf = compile_passed(passed, "llvm")
    for n in range(1, 18):
        pad = 32  # sentinels after the end catch stores of masked-off lanes
        a, b = _data(n, dtype), _data(n, dtype)
        c = np.full(n + pad, 7, dtype)
        d = np.full(n + pad, 7, dtype)
        call(cf, a, b, c, d, n)
        np.testing.assert_allclose(c[:n], a * 2 + b, rtol=1e-6)
        lane = np.arange(n) % width
        np.testing.assert_array_equal(d[:n], np.where(lane < 2, a, b))
        assert (c[n:] == 7).all() and (d[n:] == 7).all()


def test_guarded_loop_ir_has_masked_stores():
    """The LLVM IR of a guarded vectorized loop holds masked vector stores, not a serial loop."""
    cf = compile_primfunc(guarded_axpy(8, "float32"))
    assert "llvm.masked.store" in cf.llvm_ir
    assert "store <8 x float>" in cf.llvm_ir  # the unmasked fast path for full vectors
    vectorized = vectorize_loops(guarded_axpy(8, "float32").body)
    (loop,) = _loops(vectorized)  # only the outer serial loop is left
    assert loop.loop_var.name == "o"


def test_fast_path_split():
    """An interval guard splits into ``if (all lanes) unmasked else masked``."""
    s = vectorize_loops(guarded_axpy(8, "float32").body)
    (branch,) = [x for x in T.walk_stmts(s) if isinstance(x, T.IfThenElse)]
    assert not any(isinstance(n, E.Ramp) for n in EF.walk(branch.cond))
    assert branch.then_case.predicate is None
    assert branch.else_case.predicate is not None


def test_masked_lanes_never_load_out_of_bounds():
    """The loads of masked-off lanes are masked: a buffer ending at a page boundary is safe."""
    dtype = "float32"
    f = guarded_axpy(16, dtype)
    cf = compile_primfunc(f)
    page = 4096
    n = 3
    raw = (ctypes.c_char * (3 * page))()
    base = (ctypes.addressof(raw) + page - 1) // page * page
    libc = ctypes.CDLL(None)
    libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    guard = base + page
    assert libc.mprotect(guard, page, 0) == 0  # PROT_NONE after the first page
    try:
        a_ptr = guard - n * 4
        a = np.ctypeslib.as_array((ctypes.c_float * n).from_address(a_ptr))
        a[:] = [1.0, 2.0, 3.0]
        b = np.ones(n, dtype)
        c = np.zeros(64, dtype)
        d = np.zeros(64, dtype)
        assert cf.ctypes_function(a_ptr, b.ctypes.data, c.ctypes.data, d.ctypes.data, n) == 0
        np.testing.assert_allclose(c[:n], [3.0, 5.0, 7.0])
    finally:
        libc.mprotect(guard, page, 3)


def test_nested_guard_with_unsafe_condition_stays_serial():
    """A lane guard nested in a lane guard whose condition loads memory could fault in
    masked-off lanes: the loop stays serial."""
    n = E.Var("n")
    A = T.Buffer("A", "int32", (n,))
    C = T.Buffer("C", "int32", (n,))
    v = E.Var("v")
    inner = T.IfThenElse(E.BufferLoad(A, v, "int32") > 0, T.Store(C, v, E.const(1)))
    loop = T.For(v, E.const(0), E.const(8), "vectorized", T.IfThenElse(v < n, inner))
    s = vectorize_loops(loop)
    assert isinstance(s, T.For) and s.kind == "serial"


@pytest.mark.parametrize("m,factor", [(20, 8), (33, 16), (7, 4)])
def test_scheduled_non_divisible_split(m, factor):
    """Through the schedule API: elementwise stages split by a non-divisor and vectorized."""
    A = te.placeholder((5, m), name="A")
    B = te.compute((5, m), lambda i, j: te.exp(A[i, j]) * 2.0, name="B")
    s = te.create_schedule(B.op)
    jo, ji = s[B].split(s[B].op.axis[1], factor=factor)
    s[B].vectorize(ji)
    mod = build(s, [A, B])
    a = RNG.standard_normal((5, m)).astype("float32")
    b = np.zeros((5, m), "float32")
    mod(a, b)
    np.testing.assert_allclose(b, np.exp(a) * 2.0, rtol=1e-5)
    assert "llvm.masked" in mod.get_source("ll")


def test_softmax_vectorized_tail_schedule():
    """Row softmax with every inner axis split by 8 (33 = 4*8 + 1) and vectorized."""
    A, out = W.softmax(6, 33)
    s = te.create_schedule(out.op)
    for st in list(s.state.stages):
        if st.op_type == "placeholder":
            continue
        t = st.op.output(0)
        ax = s[t].leaf_iter_vars[-1]
        _, inner = s[t].split(ax, factor=8)
        s[t].vectorize(inner)
    mod = build(s, [A, out])
    a = RNG.standard_normal((6, 33)).astype("float32")
    o = np.zeros((6, 33), "float32")
    mod(a, o)
    ref = np.exp(a - a.max(1, keepdims=True))
    np.testing.assert_allclose(o, ref / ref.sum(1, keepdims=True), rtol=1e-5, atol=1e-7)
