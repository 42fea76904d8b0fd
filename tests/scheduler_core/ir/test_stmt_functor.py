"""The statement functor (scheduler_core.ir.stmt_functor), Buffer.nbytes and dtype_bytes."""

from __future__ import annotations

from scheduler_core.ir import tir as T
from scheduler_core.ir.expr import BufferLoad, IntImm, Var
from scheduler_core.ir.expr_functor import substitute
from scheduler_core.ir.stmt_functor import map_stmt, post_order_visit, replace_stmt, stmt_exprs, stmt_loads


def _program():
    """for i in [0, n): let t = i * 2; A[i] = B[t] + 1 if i < 3; allocate L[n] {L[0] = A[i]}"""
    n = Var("n")
    i = Var("i")
    t = Var("t")
    A = T.Buffer("A", "float32", (n,))
    B = T.Buffer("B", "float32", (n * 2,))
    L = T.Buffer("L", "float32", (n,), "local")
    store = T.Store(A, i, BufferLoad(B, t, "float32") + 1.0)
    alloc = T.Allocate(L, T.Store(L, IntImm(0), BufferLoad(A, i, "float32")))
    body = T.seq(T.IfThenElse(i < 3, store), alloc, T.Barrier())
    loop = T.For(i, IntImm(0), n, "serial", T.LetStmt(t, i * 2, body))
    return loop, dict(n=n, i=i, t=t, A=A, B=B, L=L, store=store, alloc=alloc)


def test_stmt_exprs_of_each_statement_includes_allocate_shapes():
    loop, v = _program()
    assert stmt_exprs(loop) == (loop.min, loop.extent)
    assert stmt_exprs(v["store"]) == (v["store"].index, v["store"].value)
    assert [str(e) for e in stmt_exprs(v["alloc"])] == ["n"]
    assert stmt_exprs(T.Barrier()) == ()
    assert stmt_exprs(T.SeqStmt(())) == ()
    pred = T.Store(v["A"], v["i"], IntImm(0), IntImm(1, "bool"))
    assert len(stmt_exprs(pred)) == 3
    # a constant int shape entry comes back as an Expr
    assert isinstance(stmt_exprs(T.Allocate(T.Buffer("s", "int8", (4,)), T.Barrier()))[0], IntImm)


def test_post_order_visit_sees_children_before_parents():
    loop, _ = _program()
    order: list = []
    post_order_visit(loop, lambda s: order.append(type(s).__name__))
    assert order[-1] == "For" and order[-2] == "LetStmt"
    assert order.index("Store") < order.index("IfThenElse") < order.index("SeqStmt")
    assert order.count("Store") == 2 and order.count("Barrier") == 1


def test_map_stmt_keeps_unchanged_nodes_and_rebuilds_changed_paths():
    loop, v = _program()
    assert map_stmt(loop) is loop
    assert map_stmt(loop, f_expr=lambda e: e) is loop
    # substitute n -> 8: every statement holding n is rebuilt, the Allocate's buffer is kept
    out = map_stmt(loop, f_expr=lambda e: substitute(e, {v["n"]: IntImm(8)}))
    assert out is not loop and str(out.extent) == "8"
    allocs = [s for s in T.walk_stmts(out) if isinstance(s, T.Allocate)]
    assert allocs[0].buffer is v["L"]
    # the Store under the IfThenElse did not hold n: it is the same object
    assert any(s is v["store"] for s in T.walk_stmts(out))


def test_map_stmt_f_stmt_is_post_order_and_preorder_stops_descent():
    loop, v = _program()
    seen: list = []

    def drop_barrier(s):
        seen.append(type(s).__name__)
        return T.Evaluate(IntImm(0)) if isinstance(s, T.Barrier) else None

    out = map_stmt(loop, f_stmt=drop_barrier)
    assert not any(isinstance(s, T.Barrier) for s in T.walk_stmts(out))
    assert seen[-1] == "For"
    # preorder replaces the IfThenElse whole: its Store is never seen by f_stmt
    seen.clear()
    out = map_stmt(loop, f_stmt=drop_barrier,
                   preorder=lambda s: T.Evaluate(IntImm(1)) if isinstance(s, T.IfThenElse) else None)
    assert seen.count("Store") == 1  # only the one inside the Allocate
    assert not any(s is v["store"] for s in T.walk_stmts(out))


def test_map_stmt_keeps_subclasses():
    from dataclasses import dataclass

    @dataclass(frozen=True, eq=False)
    class Guard(T.IfThenElse):
        pass

    i = Var("i")
    A = T.Buffer("A", "int32", (4,))
    g = Guard(i < 2, T.Store(A, i, i))
    out = map_stmt(g, f_expr=lambda e: substitute(e, {i: IntImm(1)}))
    assert type(out) is Guard and out is not g
    assert out.then_case.index.value == 1


def test_stmt_loads_finds_loads_in_every_statement():
    loop, v = _program()
    assert sorted(ld.buffer.name for ld in stmt_loads(loop)) == ["A", "B"]


def test_buffer_nbytes_and_dtype_bytes():
    assert T.dtype_bytes("float32") == 4 and T.dtype_bytes("bool") == 1
    assert T.dtype_bytes("float16", 4) == 8 and T.dtype_bytes("int8") == 1
    assert T.Buffer("a", "float16", (IntImm(3), 4)).nbytes == 24
    assert T.Buffer("a", "bool", (5,)).nbytes == 5
    assert T.Buffer("a", "float64", ()).nbytes == 8
    assert T.Buffer("a", "float32", (IntImm(2) * 8,)).nbytes == 64  # constant after simplifying
    assert T.Buffer("a", "float32", (Var("n"),)).nbytes is None
    assert T.Buffer("a", "float32", (Var("n"),)).num_elements is None


def test_replace_stmt_rebuilds_only_the_path():
    loop, v = _program()
    new = T.Evaluate(IntImm(7))
    out = replace_stmt(loop, v["store"], new)
    assert any(s is new for s in T.walk_stmts(out))
    assert not any(s is v["store"] for s in T.walk_stmts(out))
    assert any(s is v["alloc"] for s in T.walk_stmts(out))  # off the path: shared
    assert replace_stmt(loop, T.Barrier(), new) is loop  # not found: unchanged
