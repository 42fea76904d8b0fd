"""Reductions over a vectorized axis keep a vector accumulator and reduce it at the end.

``X[s] = X[s] op g`` inside ``for ... for v vectorized`` (op in sum/prod/max/min) used
to fall back to a serial loop (the store index does not depend on the lane); now the
vectorize pass gives ``acc[0:L] op= g`` and one horizontal reduction after the nest.
"""

import numpy as np
import pytest

from scheduler_core import te
from scheduler_core.codegen import compile_primfunc as compile_passed
from scheduler_core.codegen.vector_math import _symbol
from scheduler_core.driver.build_module import build, run_passes
from scheduler_core.ir import expr as E
from scheduler_core.ir import expr_functor as EF
from scheduler_core.ir import tir as T
from scheduler_core.passes import vectorize_loops
from scheduler_core.passes.vectorize import vector_reduction
from tests import workloads as W

RNG = np.random.default_rng(11)
NP = {"add": np.sum, "mul": np.prod, "max": np.max, "min": np.min}
COMBINER = {"add": "sum", "mul": "prod", "max": "max", "min": "min"}


def call(cf, *args):
    ptrs = [a.ctypes.data if isinstance(a, np.ndarray) else int(a) for a in args]
    assert cf.ctypes_function(*ptrs) == 0


def _loops(s):
    return [x for x in T.walk_stmts(s) if isinstance(x, T.For)]


def row_reduce(op: str, width: int, dtype: str) -> T.PrimFunc:
    """B[i] = reduce_op(A[i, 0:m]) with the reduce axis split by ``width``, the inner part
    vectorized and guarded by ``ko*width + v < m`` (m symbolic)."""
    n, m = E.Var("n"), E.Var("m")
    A = T.Buffer("A", dtype, (n, m))
    B = T.Buffer("B", dtype, (n,))
    i, ko, v = E.Var("i"), E.Var("ko"), E.Var("v")
    k = ko * width + v
    upd = T.Store(B, i, E.binary(op, E.BufferLoad(B, i, dtype), E.BufferLoad(A, i * m + k, dtype)))
    vec = T.For(v, E.const(0), E.const(width), "vectorized", T.IfThenElse(k < m, upd, None, True))
    red = T.For(ko, E.const(0), (m + (width - 1)) // width, "serial", vec)
    init = T.Store(B, i, EF.reduce_identity(COMBINER[op], dtype))
    body = T.For(i, E.const(0), n, "serial", T.SeqStmt((init, red)))
    return T.PrimFunc(f"red_{op}_{width}_{dtype}", (A, B), (n, m), body)


def _data(shape, op, dtype):
    if op == "mul":  # keep products finite / small
        if dtype == "int32":
            return RNG.choice(np.array([1, -1, 2], dtype), shape)
        return RNG.uniform(0.8, 1.25, shape).astype(dtype)
    if dtype == "int32":
        return RNG.integers(-1000, 1000, shape).astype(dtype)
    return RNG.standard_normal(shape).astype(dtype)


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32"])
@pytest.mark.parametrize("width", [4, 8, 16])
@pytest.mark.parametrize("op", ["add", "mul", "max", "min"])
def test_vectorized_reduction_with_tail(op, width, dtype):
    """Row reductions over m = 1..17 (tails of every length) match numpy."""
    f = run_passes(row_reduce(op, width, dtype))
    assert not any(l.loop_var.name == "v" for l in _loops(f.body))  # no serial fallback
    assert any(isinstance(s, T.Allocate) for s in T.walk_stmts(f.body))  # the accumulator
    cf = compile_passed(f, "llvm")
    n = 3
    for m in range(1, 18):
        a = _data((n, m), op, dtype)
        b = np.full(n, 5, dtype)
        call(cf, a, b, n, m)
        ref = NP[op](a, axis=1).astype(dtype)
        if dtype == "int32":
            np.testing.assert_array_equal(b, ref)
        else:
            tol = 1e-5 if dtype == "float32" else 1e-12  # sums reassociate: absolute slack too
            np.testing.assert_allclose(b, ref, rtol=tol, atol=tol)


def test_accumulator_structure():
    """acc = identity; the nest updates acc with a select on the tail; one final combine."""
    f = row_reduce("add", 8, "float32")
    nest = f.body.body.seq[1]
    out = vector_reduction(nest)
    assert isinstance(out, T.Allocate) and out.buffer.shape == (8,)
    init, loops, final = out.body.seq
    assert init.kind == "vectorized" and loops.loop_var.name == "ko"
    assert final.buffer.name == "B" and not any(isinstance(n, E.Ramp) for n in EF.walk(final.value))
    vec = vectorize_loops(out)
    masked = [s for s in T.walk_stmts(vec) if isinstance(s, T.Store) and s.buffer is out.buffer
              and any(isinstance(n, E.Select) for n in EF.walk(s.value))]
    assert masked and all(s.predicate is None for s in masked)  # a blend, not a masked store


def test_reduction_ir_has_no_scalar_loop():
    """After O3 the accumulator is a vector register: the IR has vector fadds and no
    per-element scalar loop over the reduce axis."""
    cf = compile_passed(run_passes(row_reduce("add", 8, "float32")), "llvm")
    assert "fadd contract <8 x float>" in cf.llvm_ir or "fadd <8 x float>" in cf.llvm_ir
    assert "alloca [8 x float]" not in cf.llvm_ir


@pytest.mark.parametrize("m,factor", [(100, None), (37, 8), (130, 64)])
def test_scheduled_row_reductions(m, factor):
    """te row sum/max with the reduce axis vectorized whole (100 lanes: strip-mined into
    chunks) or split by a non-divisor."""
    A = te.placeholder((4, m), name="A")
    k1 = te.reduce_axis((0, m), name="k1")
    mx = te.compute((4,), lambda i: te.max(A[i, k1], axis=k1), name="mx")
    k2 = te.reduce_axis((0, m), name="k2")
    sm = te.compute((4,), lambda i: te.sum(A[i, k2] * 2.0, axis=k2), name="sm")
    s = te.create_schedule([mx.op, sm.op])
    for t in (mx, sm):
        ax = s[t].leaf_iter_vars[-1]
        if factor is not None:
            _, ax = s[t].split(ax, factor=factor)
        s[t].vectorize(ax)
    mod = build(s, [A, mx, sm])
    a = RNG.standard_normal((4, m)).astype("float32")
    o1, o2 = np.zeros(4, "float32"), np.zeros(4, "float32")
    mod(a, o1, o2)
    np.testing.assert_allclose(o1, a.max(1), rtol=1e-6)
    np.testing.assert_allclose(o2, (a * 2).sum(1), rtol=1e-5)


def test_vectorized_reduce_axis_outside_spatial_loop():
    """``for k vectorized: for i: X[i] += A[i, k]`` is interchanged, then accumulated."""
    A = te.placeholder((6, 40), name="A")
    k = te.reduce_axis((0, 40), name="k")
    B = te.compute((6,), lambda i: te.sum(A[i, k], axis=k), name="B")
    s = te.create_schedule(B.op)
    i = s[B].leaf_iter_vars[0]
    kk = s[B].leaf_iter_vars[1]
    ko, ki = s[B].split(kk, factor=8)
    s[B].reorder(ko, ki, i)
    s[B].vectorize(ki)
    mod = build(s, [A, B])
    a = RNG.standard_normal((6, 40)).astype("float32")
    b = np.zeros(6, "float32")
    mod(a, b)
    np.testing.assert_allclose(b, a.sum(1), rtol=1e-5)


def _softmax_schedule(n, m, factor):
    A, out = W.softmax(n, m)
    s = te.create_schedule(out.op)
    for st in list(s.state.stages):
        if st.op_type == "placeholder":
            continue
        t = st.op.output(0)
        _, inner = s[t].split(s[t].leaf_iter_vars[-1], factor=factor)
        s[t].vectorize(inner)
        s[t].parallel(s[t].leaf_iter_vars[0])
    return s, A, out


def test_softmax_vectorized_schedule_and_libmvec_exp():
    """Softmax with vectorized row max / exp / row sum / divide matches numpy, and its
    exp goes through libmvec when the C library has it (no per-lane expf calls)."""
    s, A, out = _softmax_schedule(16, 70, 16)
    mod = build(s, [A, out])
    a = RNG.standard_normal((16, 70)).astype("float32")
    o = np.zeros((16, 70), "float32")
    mod(a, o)
    ref = np.exp(a - a.max(1, keepdims=True))
    np.testing.assert_allclose(o, ref / ref.sum(1, keepdims=True), rtol=2e-5, atol=1e-7)
    ir = mod.get_source("ll")
    if _symbol("exp", "float32") is not None:
        assert "@_ZGV" in ir and "call float @expf" not in ir
