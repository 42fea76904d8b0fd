"""Structure of the unroll and vectorize passes (no compilation needed)."""

from scheduler_core.ir import expr as E
from scheduler_core.ir import expr_functor as EF
from scheduler_core.ir import simplify as ES
from scheduler_core.ir import tir as T
from scheduler_core.passes import substitute_stmt, unroll_loops, vectorize_loops

A = T.Buffer("A", "float32", (16, 64))
B = T.Buffer("B", "float32", (16, 64))
C = T.Buffer("C", "float32", (16, 64))


def _loop(var, extent, kind, body, **ann):
    return T.For(var, E.const(0), E.const(extent) if isinstance(extent, int) else extent,
                 kind, body, ann)


def _stores(s):
    return [x for x in T.walk_stmts(s) if isinstance(x, T.Store)]


def _loops(s):
    return [x for x in T.walk_stmts(s) if isinstance(x, T.For)]


# -- vectorize -------------------------------------------------------------------

def test_flattened_index_stays_unit_stride_ramp():
    """C[i*64 + j] = A[i*64 + j] + 1 over vectorized j (8 of 64) -> stride-1 ramps."""
    i, jo, ji = E.Var("i"), E.Var("jo"), E.Var("ji")
    idx = i * 64 + jo * 8 + ji
    body = T.Store(C, idx, E.BufferLoad(A, idx) + E.const(1.0))
    s = vectorize_loops(_loop(i, 16, "serial", _loop(jo, 8, "serial", _loop(ji, 8, "vectorized", body))))
    (st,) = _stores(s)
    assert isinstance(st.index, E.Ramp) and st.index.lanes == 8
    assert ES.is_const(st.index.stride, 1)
    assert isinstance(st.value, E.BinaryOp)
    load, one = st.value.a, st.value.b
    assert isinstance(load, E.BufferLoad) and load.lanes == 8 and isinstance(load.index, E.Ramp)
    assert isinstance(one, E.Broadcast) and one.lanes == 8
    assert [l.kind for l in _loops(s)] == ["serial", "serial"]


def test_strided_ramp_and_nonzero_min():
    """A vectorized outer dimension gives Ramp(stride 64); a loop min shifts the base."""
    i, j = E.Var("i"), E.Var("j")
    loop = T.For(i, E.const(4), E.const(4), "vectorized", T.Store(C, i * 64 + j, E.const(0.0)))
    s = vectorize_loops(_loop(j, 64, "serial", loop))
    (st,) = _stores(s)
    assert ES.is_const(st.index.stride, 64) and st.index.lanes == 4
    assert isinstance(st.value, E.Broadcast)


def test_reduction_pattern_vectorizes():
    """C[ramp] = C[ramp] + A[x]*B[ramp] (the matmul inner loop): A[x] is broadcast."""
    k, j = E.Var("k"), E.Var("j")
    body = T.Store(C, j, E.BufferLoad(C, j) + E.BufferLoad(A, k) * E.BufferLoad(B, k * 64 + j))
    s = vectorize_loops(_loop(k, 16, "serial", _loop(j, 16, "vectorized", body)))
    (st,) = _stores(s)
    mul = st.value.b
    assert isinstance(mul.a, E.Broadcast) and isinstance(mul.a.value, E.BufferLoad)
    assert mul.b.lanes == 16 and ES.is_const(mul.b.index.stride, 1)
    assert [l.kind for l in _loops(s)] == ["serial"]


def test_fallbacks_keep_serial_loop():
    """Allocate, symbolic extent -> serial loop (a var-dependent if is predicated now:
    tests/scheduler_core/passes/test_predicated_vectorize.py; a nested serial loop is
    interchanged outside the vectorized one)."""
    j, k, n = E.Var("j"), E.Var("k"), E.Var("n")
    st = T.Store(C, j, E.const(1.0))
    tmp = T.Buffer("tmp", "float32", (4,), "local")
    s = vectorize_loops(_loop(j, 8, "vectorized", _loop(k, 4, "serial", st)))
    assert isinstance(s, T.For) and s.loop_var is k and isinstance(_stores(s)[0].index, E.Ramp)
    cases = [
        T.Allocate(tmp, st),
    ]
    for body in cases:
        s = vectorize_loops(_loop(j, 8, "vectorized", body))
        assert isinstance(s, T.For) and s.kind == "serial"
        assert not any(isinstance(x, E.Ramp) for x in EF.walk(_stores(s)[0].index))
    s = vectorize_loops(_loop(j, n, "vectorized", st))
    assert s.kind == "serial"


def test_scalar_if_and_vector_select():
    """An if on an outer var stays a scalar branch; a var-dependent select becomes vector."""
    i, j = E.Var("i"), E.Var("j")
    val = E.select(j < 5, E.BufferLoad(A, j), E.const(0.0))
    body = T.IfThenElse(i < 3, T.Store(C, j, val))
    s = vectorize_loops(_loop(j, 8, "vectorized", body))
    assert isinstance(s, T.IfThenElse)
    sel = s.then_case.value
    assert isinstance(sel, E.Select) and isinstance(sel.cond, E.CmpOp)
    assert isinstance(sel.cond.a, E.Ramp) and isinstance(sel.cond.b, E.Broadcast)
    assert sel.true_value.lanes == 8 and isinstance(sel.false_value, E.Broadcast)


def test_inner_loop_of_extent_one_is_substituted():
    j, k = E.Var("j"), E.Var("k")
    s = vectorize_loops(_loop(j, 8, "vectorized", _loop(k, 1, "serial", T.Store(C, j + k, E.const(1.0)))))
    assert isinstance(s, T.Store) and isinstance(s.index, E.Ramp)


def test_vector_let_is_inlined():
    j, t = E.Var("j"), E.Var("t")
    body = T.LetStmt(t, j * 2, T.Store(C, t, E.const(1.0)))
    s = vectorize_loops(_loop(j, 8, "vectorized", body))
    assert isinstance(s, T.Store) and ES.is_const(s.index.stride, 2)


# -- unroll ------------------------------------------------------------------------

def test_explicit_unroll():
    i = E.Var("i")
    s = unroll_loops(_loop(i, 4, "unrolled", T.Store(C, i * 2 + 1, E.const(0.0))))
    assert not _loops(s)
    assert [st.index.value for st in _stores(s)] == [1, 3, 5, 7]


def test_non_constant_extent_left_alone():
    i, n = E.Var("i"), E.Var("n")
    loop = _loop(i, n, "unrolled", T.Store(C, i, E.const(0.0)))
    assert len(_loops(unroll_loops(loop))) == 1


def test_auto_unroll_max_step():
    """Under {"auto_unroll_max_step": 16}: the 4x4 nest (16 steps) unrolls, the
    annotated loop itself and a 4x8 nest (32 steps) do not."""
    o, a, b, c, d = (E.Var(x) for x in "oabcd")
    small = _loop(a, 4, "serial", _loop(b, 4, "serial", T.Store(C, a * 4 + b, E.const(0.0))))
    big = _loop(c, 4, "serial", _loop(d, 8, "serial", T.Store(C, c * 8 + d, E.const(1.0))))
    top = _loop(o, 2, "serial", T.seq(small, big), auto_unroll_max_step=16)
    s = unroll_loops(top)
    names = [l.loop_var.name for l in _loops(s)]
    assert names == ["o", "c"]  # d (8 steps) unrolled inside c; a and b fully unrolled
    assert len(_stores(s)) == 16 + 8
    assert unroll_loops(top, 0) is not top
    # without the annotation and with the default 0 nothing is unrolled
    plain = _loop(o, 2, "serial", T.seq(small, big))
    assert len(_loops(unroll_loops(plain))) == 5
    # o: 2 * 48 steps > 64 stays a loop; everything inside it unrolls
    assert [l.loop_var.name for l in _loops(unroll_loops(plain, auto_unroll_max_step=64))] == ["o"]


def test_auto_unroll_counts_vectorized_loop_as_one_step():
    i, j = E.Var("i"), E.Var("j")
    nest = _loop(i, 4, "serial", _loop(j, 16, "vectorized", T.Store(C, i * 16 + j, E.const(0.0))))
    s = unroll_loops(nest, auto_unroll_max_step=4)
    assert [l.kind for l in _loops(s)] == ["vectorized"] * 4


def test_passes_accept_primfunc():
    i = E.Var("i")
    f = T.PrimFunc("f", (C,), (), _loop(i, 8, "vectorized", T.Store(C, i, E.const(0.0))))
    g = unroll_loops(vectorize_loops(f))
    assert isinstance(g, T.PrimFunc) and isinstance(g.body, T.Store) and g.params == f.params


def test_substitute_stmt_simplifies():
    i = E.Var("i")
    s = substitute_stmt(T.Store(C, i * 1 + 0, E.const(0.0)), {i: E.const(3)})
    assert isinstance(s.index, E.IntImm) and s.index.value == 3
