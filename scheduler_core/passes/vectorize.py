"""Loop vectorization on the lowered loop program (TVM's ``tir.transform.VectorizeLoop``).

    for (j, m, L) "vectorized" { C[i*64 + j] = A[i*64 + j] + x }
        --vectorize_loops-->
    C[ramp(i*64 + m, 1, L)] = A[ramp(i*64 + m, 1, L)] + broadcast(x, L)

The loop var becomes ``Ramp(m, 1, L)`` and every expression that depends on it
becomes a vector of ``L`` lanes: ``Ramp + s -> Ramp(base + s, stride)``,
``Ramp * s -> Ramp(base * s, stride * s)``, scalar operands of vector operations
are wrapped in ``Broadcast``, loads and stores with a vector index carry
``lanes``.  Index arithmetic stays a Ramp as long as it is affine in the loop
var, so a flattened row-major index keeps stride 1 and code generation emits one
contiguous vector load/store.

Like TVM, the pass assumes a loop marked vectorized has no dependence between
its iterations (the schedule only vectorizes spatial axes).  When the body holds
something it cannot vectorize -- a nested loop, an ``IfThenElse`` whose condition
depends on the loop var, an ``Allocate``, an ``Evaluate``, a store to an index
that does not depend on the loop var, or the loop has a non-constant extent --
the loop is kept as a serial loop (correctness first).  Inner loops of extent 1
are not loops: their var is substituted.  A vector ``Select`` stays
a vector select; code generation evaluates its branches under the lane mask, so
loads in the untaken lanes are masked loads and never fault.
"""

from __future__ import annotations

import dataclasses

from scheduler_core.ir import expr as E
from scheduler_core.ir import expr_functor as EF
from scheduler_core.ir import simplify as ES
from scheduler_core.ir import tir as T

from .unroll import const_extent, substitute_stmt


class _Fallback(Exception):
    """The loop body cannot be vectorized; keep the loop serial."""


def vectorize_loops(stmt: T.Stmt) -> T.Stmt:
    """Replace every ``For(kind="vectorized")`` in ``stmt`` by vector statements.

    Loops that cannot be vectorized become ``kind="serial"`` (see the module
    docstring).  Vector lanes = the constant loop extent.  Returns a new
    statement (a PrimFunc gives a PrimFunc); the input is not modified.
    Source: TVM's VectorizeLoop.
    """
    if isinstance(stmt, T.PrimFunc):
        return dataclasses.replace(stmt, body=vectorize_loops(stmt.body))
    if isinstance(stmt, T.For):
        if stmt.kind == "vectorized":
            return _vectorize_for(stmt)
        return T.For(stmt.loop_var, stmt.min, stmt.extent, stmt.kind,
                     vectorize_loops(stmt.body), dict(stmt.annotations))
    if isinstance(stmt, T.SeqStmt):
        return T.SeqStmt(tuple(vectorize_loops(c) for c in stmt.seq))
    if isinstance(stmt, T.IfThenElse):
        other = None if stmt.else_case is None else vectorize_loops(stmt.else_case)
        return T.IfThenElse(stmt.cond, vectorize_loops(stmt.then_case), other, stmt.likely)
    if isinstance(stmt, T.Allocate):
        return T.Allocate(stmt.buffer, vectorize_loops(stmt.body))
    if isinstance(stmt, T.LetStmt):
        return T.LetStmt(stmt.var, stmt.value, vectorize_loops(stmt.body))
    return stmt


def _vectorize_for(loop: T.For) -> T.Stmt:
    lanes = const_extent(loop)
    if lanes is not None and lanes <= 1:
        if lanes == 1:
            return vectorize_loops(substitute_stmt(loop.body, {loop.loop_var: loop.min}))
        return T.SeqStmt(())
    if lanes is not None:
        try:
            return _Vectorizer(loop.loop_var, loop.min, lanes).stmt(loop.body)
        except _Fallback:
            pass
    return T.For(loop.loop_var, loop.min, loop.extent, "serial",
                 vectorize_loops(loop.body), dict(loop.annotations))


def _ramp(base: E.Expr, stride: E.Expr, lanes: int) -> E.Ramp:
    return E.Ramp(ES.simplify(base), ES.simplify(stride), lanes, base.dtype)


class _Vectorizer:
    """Rewrites one loop body with ``var -> Ramp(min, 1, lanes)``.

    ``expr`` returns ``(new_expr, lanes)`` with lanes 1 for scalars.
    """

    def __init__(self, var: E.Var, vmin: E.Expr, lanes: int):
        self.var = var
        self.lanes = lanes
        self.ramp = _ramp(vmin, E.const(1, var.dtype), lanes)
        self.memo: dict = {}

    # -- statements ---------------------------------------------------------
    def stmt(self, s: T.Stmt) -> T.Stmt:
        if isinstance(s, T.Store):
            return self._store(s)
        if isinstance(s, T.SeqStmt):
            return T.SeqStmt(tuple(self.stmt(c) for c in s.seq))
        if isinstance(s, T.IfThenElse):
            cond, n = self.expr(s.cond)
            if n != 1:
                raise _Fallback("condition depends on the vector var")
            other = None if s.else_case is None else self.stmt(s.else_case)
            return T.IfThenElse(cond, self.stmt(s.then_case), other, s.likely)
        if isinstance(s, T.For) and const_extent(s) == 1:
            return self.stmt(substitute_stmt(s.body, {s.loop_var: s.min}))
        if isinstance(s, T.LetStmt):
            value, n = self.expr(s.value)
            if n == 1:
                return T.LetStmt(s.var, value, self.stmt(s.body))
            # A vector-valued let: inline it (expressions are pure).
            return self.stmt(substitute_stmt(s.body, {s.var: s.value}))
        raise _Fallback(f"cannot vectorize a {type(s).__name__}")

    def _store(self, s: T.Store) -> T.Store:
        index, ni = self.expr(s.index)
        if ni == 1:
            raise _Fallback("store index does not depend on the vector var")
        value, nv = self.expr(s.value)
        pred = None
        if s.predicate is not None:
            pred = self._bcast(*self.expr(s.predicate))
        return T.Store(s.buffer, index, self._bcast(value, nv), pred)

    # -- expressions --------------------------------------------------------
    def _bcast(self, e: E.Expr, n: int) -> E.Expr:
        if n == self.lanes:
            return e
        return E.Broadcast(e, self.lanes, e.dtype)

    def expr(self, e: E.Expr) -> tuple:
        hit = self.memo.get(id(e))
        if hit is None or hit[0] is not e:
            hit = (e, self._expr(e))  # holding e keeps its id from being reused
            self.memo[id(e)] = hit
        return hit[1]

    def _expr(self, e: E.Expr) -> tuple:
        if e is self.var:
            return self.ramp, self.lanes
        if isinstance(e, (E.IntImm, E.FloatImm, E.Var)):
            return e, 1
        if isinstance(e, (E.Ramp, E.Broadcast, E.TensorLoad, E.Reduce)):
            raise _Fallback(f"cannot vectorize a {type(e).__name__}")
        if isinstance(e, E.BufferLoad):
            if e.lanes != 1:
                raise _Fallback("load is already a vector")
            index, n = self.expr(e.index)
            if n == 1:
                return (e if index is e.index else E.BufferLoad(e.buffer, index, e.dtype)), 1
            return E.BufferLoad(e.buffer, index, e.dtype, self.lanes), self.lanes
        kids = EF.children(e)
        new = [self.expr(k) for k in kids]
        if all(n == 1 for _, n in new):
            same = all(a is k for (a, _), k in zip(new, kids))
            return (e if same else EF.rebuild(e, tuple(a for a, _ in new))), 1
        if isinstance(e, E.BinaryOp):
            ramp = self._affine(e.op, new[0], new[1])
            if ramp is not None:
                return ramp, self.lanes
        if isinstance(e, E.Select) and new[0][1] == 1:
            cond = new[0][0]
            return E.Select(cond, self._bcast(*new[1]), self._bcast(*new[2]), e.dtype), self.lanes
        return EF.rebuild(e, tuple(self._bcast(a, n) for a, n in new)), self.lanes

    def _affine(self, op: str, av: tuple, bv: tuple) -> E.Ramp | None:
        """Keep ``ramp op scalar`` (and ``ramp +- ramp``) a Ramp when it is affine."""
        (a, na), (b, nb) = av, bv
        ra, rb = isinstance(a, E.Ramp), isinstance(b, E.Ramp)
        sa, sb = na == 1, nb == 1
        n = self.lanes
        if op == "add":
            if ra and sb:
                return _ramp(a.base + b, a.stride, n)
            if sa and rb:
                return _ramp(a + b.base, b.stride, n)
            if ra and rb:
                return _ramp(a.base + b.base, a.stride + b.stride, n)
        elif op == "sub":
            if ra and sb:
                return _ramp(a.base - b, a.stride, n)
            if sa and rb:
                return _ramp(a - b.base, E.const(0, b.stride.dtype) - b.stride, n)
            if ra and rb:
                return _ramp(a.base - b.base, a.stride - b.stride, n)
        elif op == "mul":
            if ra and sb:
                return _ramp(a.base * b, a.stride * b, n)
            if sa and rb:
                return _ramp(a * b.base, a * b.stride, n)
        return None

