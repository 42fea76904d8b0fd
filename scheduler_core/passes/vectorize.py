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

Guards (predication).  An ``IfThenElse`` whose condition depends on the loop var
-- the ``likely`` guard of a non-divisible split, ``if (jo*8 + ji < n)`` -- does
not stop vectorization: the stores under it get the vector condition as their
``predicate`` (masked stores; code generation evaluates their values under the
mask, so loads of inactive lanes are masked loads and never fault), the else
branch gets the negated condition.  When the condition is a conjunction of
comparisons affine in the loop var (true on an interval of lanes), the pass
emits ``if (cond(first lane) && cond(last lane)) {unmasked body} else {masked
body}``, so full vectors pay nothing for the tail (the main part + masked
remainder of LLVM's loop vectorizer with tail folding).

Reductions.  A perfect nest of serial loops ending in a vectorized loop whose
body is (under guards) one update ``X[s] = X[s] op g`` with ``op`` in
add/mul/max/min and ``s`` independent of the nest's vars -- a reduction whose
innermost reduce axis is vectorized, e.g. a row max or row sum -- becomes

    acc[0:L] = identity                       (a local vector accumulator)
    <same nest> acc[0:L] = acc[0:L] op select(guard, g, identity)
    X[s] = X[s] op (acc[0] op acc[1] op ... op acc[L-1])   (a balanced tree)

which reassociates the reduction (float sums change in the last bits, like
``-ffast-math``/``reassoc`` vectorization in LLVM and TVM's rfactor-to-lanes);
LLVM keeps ``acc`` in a vector register and the tree becomes shuffles.  A
vectorized loop whose body is one serial loop (``for v vectorized { for k {..} }``,
e.g. a vectorized reduce axis reordered outside a spatial one) is interchanged with
it when the interchanged nest then vectorizes without any fallback.

Widths.  The vector statements of a loop of ``L`` lanes use one width ``L`` when it is
a power of two, else one group per power-of-two piece of ``L`` (28 lanes -> 16 + 8 + 4,
a piece of one lane scalar): the x86 back end handles ``<28 x float>`` by re-packing it
lane by lane (``pow2_pieces``).

Like TVM, the pass assumes a loop marked vectorized has no dependence between
its iterations other than such reductions.  When the body holds something it
cannot vectorize -- a nested loop, an ``Allocate``, an ``Evaluate``, a store to
an index that does not depend on the loop var (other than the reduction above),
a nested guard whose condition could fault, or the loop has a non-constant
extent -- the loop is kept as a serial loop (correctness first).  Inner loops of
extent 1 are not loops: their var is substituted.  A vector ``Select`` stays a
vector select; code generation evaluates its branches under the lane mask, so
loads in the untaken lanes are masked loads and never fault.
"""

from __future__ import annotations

import dataclasses

from scheduler_core.ir import expr as E
from scheduler_core.ir import expr_functor as EF
from scheduler_core.ir import simplify as ES
from scheduler_core.ir import tir as T

from .unroll import const_extent, substitute_stmt

# Combiners of the vector-accumulator rewrite: BinaryOp op -> reduce_identity name.
_REDUCERS = {"add": "sum", "mul": "prod", "max": "max", "min": "min"}
MAX_ACCUMULATOR_LANES = 64  # wider vectorized reduce loops are strip-mined into ...
STRIP_LANES = 16  # ... serial chunks of this many lanes


class _Fallback(Exception):
    """The loop body cannot be vectorized; keep the loop serial."""


def vectorize_loops(stmt: T.Stmt) -> T.Stmt:
    """Replace every ``For(kind="vectorized")`` in ``stmt`` by vector statements.

    Guarded bodies become predicated (masked) stores, reductions over a
    vectorized axis use a vector accumulator, a vectorized loop around a serial
    loop is interchanged with it, and loops that cannot be vectorized become
    ``kind="serial"`` (see the module docstring).  Vector lanes = the constant
    loop extent.  Returns a new statement (a PrimFunc gives a PrimFunc); the
    input is not modified.  Source: TVM's VectorizeLoop.
    """
    if isinstance(stmt, T.PrimFunc):
        return dataclasses.replace(stmt, body=_visit(stmt.body, False))
    return _visit(stmt, False)


def _visit(stmt: T.Stmt, strict: bool) -> T.Stmt:
    """``vectorize_loops``; with ``strict`` a loop that cannot be vectorized raises
    ``_Fallback`` instead of becoming serial."""
    if isinstance(stmt, T.For):
        reduction = vector_reduction(stmt)
        if reduction is not None:
            return _visit(reduction, strict)
        if stmt.kind == "vectorized":
            return _vectorize_for(stmt, strict)
        return T.For(stmt.loop_var, stmt.min, stmt.extent, stmt.kind,
                     _visit(stmt.body, strict), dict(stmt.annotations))
    if isinstance(stmt, T.SeqStmt):
        return T.SeqStmt(tuple(_visit(c, strict) for c in stmt.seq))
    if isinstance(stmt, T.IfThenElse):
        other = None if stmt.else_case is None else _visit(stmt.else_case, strict)
        return T.IfThenElse(stmt.cond, _visit(stmt.then_case, strict), other, stmt.likely)
    if isinstance(stmt, T.Allocate):
        return T.Allocate(stmt.buffer, _visit(stmt.body, strict))
    if isinstance(stmt, T.LetStmt):
        return T.LetStmt(stmt.var, stmt.value, _visit(stmt.body, strict))
    return stmt


def _vectorize_for(loop: T.For, strict: bool) -> T.Stmt:
    lanes = const_extent(loop)
    if lanes is not None and lanes <= 1:
        if lanes == 1:
            return _visit(substitute_stmt(loop.body, {loop.loop_var: loop.min}), strict)
        return T.SeqStmt(())
    if lanes is not None:
        try:
            return _vectorize_pieces(loop, lanes)
        except _Fallback:
            pass
        inner = loop.body
        if isinstance(inner, T.For) and inner.kind == "serial" \
                and not _uses(inner.min, loop.loop_var) and not _uses(inner.extent, loop.loop_var):
            # for v vectorized { for k { B } }  ->  for k { for v vectorized { B } }: the
            # iterations of v are independent (or a reduction), so the order is free.  Kept
            # only when the interchanged nest vectorizes without any fallback.
            swapped = T.For(inner.loop_var, inner.min, inner.extent, "serial",
                            T.For(loop.loop_var, loop.min, loop.extent, "vectorized", inner.body,
                                  dict(loop.annotations)), dict(inner.annotations))
            try:
                return _visit(swapped, True)
            except _Fallback:
                pass
    if strict:
        raise _Fallback(f"loop {loop.loop_var.name} stays serial")
    return T.For(loop.loop_var, loop.min, loop.extent, "serial",
                 _visit(loop.body, False), dict(loop.annotations))


def pow2_pieces(lanes: int) -> list:
    """``lanes`` as a sum of powers of two, widest first: ``[(offset, width), ...]``
    (28 -> (0, 16), (16, 8), (24, 4))."""
    out, offset = [], 0
    width = 1 << (lanes.bit_length() - 1)
    while width:
        if lanes - offset >= width:
            out.append((offset, width))
            offset += width
        width >>= 1
    return out


def _vectorize_pieces(loop: T.For, lanes: int) -> T.Stmt:
    """The vector statements of ``loop`` (constant extent ``lanes`` >= 2): one group of
    ``lanes`` lanes when that is a power of two, else one group per power-of-two piece
    of it (a piece of one lane is the scalar body).  A vector type of a width that is
    not a power of two (``<28 x float>``) is legal LLVM, but the x86 back end widens and
    re-packs it lane by lane around every loop-carried value (tens of times slower than
    the same lanes as 16 + 8 + 4).  Raises ``_Fallback`` as ``_Vectorizer`` does."""
    pieces = pow2_pieces(lanes)
    if len(pieces) == 1:
        return _Vectorizer(loop.loop_var, loop.min, lanes).stmt(loop.body)
    out = []
    for offset, width in pieces:
        start = ES.simplify(loop.min + offset)
        if width == 1:
            out.append(_visit(substitute_stmt(loop.body, {loop.loop_var: start}), True))
        else:
            out.append(_Vectorizer(loop.loop_var, start, width).stmt(loop.body))
    return T.SeqStmt(tuple(out))


def _ramp(base: E.Expr, stride: E.Expr, lanes: int) -> E.Ramp:
    return E.Ramp(ES.simplify(base), ES.simplify(stride), lanes, base.dtype)


def _is_safe(e: E.Expr) -> bool:
    """No loads and no integer division by a non-constant: cannot fault when evaluated
    for lanes (or iterations) the original program would not have evaluated it for."""
    for n in EF.walk(e):
        if isinstance(n, (E.BufferLoad, E.TensorLoad)):
            return False
        if isinstance(n, E.BinaryOp) and n.op in ("div", "floordiv", "floormod") \
                and not E.is_float(n.dtype) and not isinstance(n.b, E.IntImm):
            return False
    return True


def _uses(e: E.Expr, var: E.Var) -> bool:
    return any(n is var for n in EF.walk(e))


def _loads_buffer(e: E.Expr, buf: T.Buffer) -> bool:
    return any(isinstance(n, E.BufferLoad) and n.buffer is buf for n in EF.walk(e))


def _interval_cond(cond: E.Expr, var: E.Var) -> bool:
    """``cond`` is a conjunction of ``<``/``<=``/``>``/``>=`` between integer expressions
    affine in ``var`` (so the lanes where it holds form one interval)."""
    if isinstance(cond, E.LogicalOp) and cond.op == "and":
        return _interval_cond(cond.a, var) and _interval_cond(cond.b, var)
    if not (isinstance(cond, E.CmpOp) and cond.op in ("lt", "le", "gt", "ge")):
        return False
    if not (E.is_int(cond.a.dtype) and _is_safe(cond)):
        return False
    return _affine_in(cond.a, var) and _affine_in(cond.b, var)


def _affine_in(e: E.Expr, var: E.Var) -> bool:
    if not _uses(e, var):
        return True
    if e is var:
        return True
    if isinstance(e, E.BinaryOp) and e.op in ("add", "sub"):
        return _affine_in(e.a, var) and _affine_in(e.b, var)
    if isinstance(e, E.BinaryOp) and e.op == "mul":
        return (_affine_in(e.a, var) and not _uses(e.b, var)) or \
            (_affine_in(e.b, var) and not _uses(e.a, var))
    return False


def _all_lanes(cond: E.Expr, var: E.Var, vmin: E.Expr, lanes: int) -> E.Expr:
    """The scalar "``cond`` holds for every lane" of an interval condition: it holds at
    the first and at the last lane."""
    first = EF.substitute(cond, {var: vmin})
    last = EF.substitute(cond, {var: vmin + (lanes - 1)})
    return ES.simplify(E.logical("and", first, last))


def _split_on(cond: E.Expr, fast: T.Stmt, slow: T.Stmt) -> T.Stmt:
    """``if (cond) fast else slow``, or one branch when ``cond`` folded to a constant."""
    known = ES.const_value(cond)
    if known is not None:
        return fast if known else slow
    return T.IfThenElse(cond, fast, slow, True)


# -- reductions over a vectorized axis ---------------------------------------------

def vector_reduction(loop: T.For) -> T.Stmt | None:
    """The vector-accumulator form of a reduction nest rooted at ``loop``, or ``None``.

    ``loop``: a perfect nest of serial loops (scalar guards allowed between them)
    ending in a ``vectorized`` loop of constant extent ``L`` >= 2 (above 64 it is first
    strip-mined into serial chunks of 16 lanes, the tail guarded; below, an ``L`` that is
    not a power of two into chunks of the widest power of two below ``L``) whose body is,
    under ``IfThenElse`` guards without else, one store ``X[s] = X[s] op g`` (op in
    add/mul/max/min, ``X`` of a numeric dtype, ``s`` using none of the nest's vars,
    ``g`` and the guards not reading ``X``, lane-dependent guards free of loads).
    Returns ``Allocate(acc[L]) {acc = identity; nest on acc; X[s] = X[s] op tree(acc)}``
    (see the module docstring); the result still holds the vectorized loops.
    Source: the reduction vectorization of LLVM's loop vectorizer (vector partial
    sums, horizontal reduction after the loop).
    """
    chain_vars: list = []
    node: T.Stmt = loop
    while True:
        if isinstance(node, T.For) and node.kind == "serial":
            chain_vars.append(node.loop_var)
            node = node.body
        elif isinstance(node, T.IfThenElse) and node.else_case is None and chain_vars:
            node = node.then_case
        else:
            break
    if not (isinstance(node, T.For) and node.kind == "vectorized"):
        return None
    vec = node
    lanes = const_extent(vec)
    if lanes is None or lanes < 2:
        return None
    if lanes > MAX_ACCUMULATOR_LANES or lanes & (lanes - 1):
        if not _is_update(vec.body):
            return None
        # A wide reduce loop: strip-mine it into serial chunks of STRIP_LANES lanes; a width
        # that is not a power of two into chunks of the widest power of two below it (the
        # accumulator is then a power-of-two vector, see _vectorize_pieces).
        width = STRIP_LANES if lanes > MAX_ACCUMULATOR_LANES else 1 << (lanes.bit_length() - 1)
        mined = _replace_innermost(loop, vec, _strip_mine(vec, lanes, width))
        return vector_reduction(mined) if isinstance(mined, T.For) else None
    var = vec.loop_var
    guards = []
    body = vec.body
    while isinstance(body, T.IfThenElse) and body.else_case is None:
        guards.append(body)
        body = body.then_case
    if not isinstance(body, T.Store) or body.predicate is not None:
        return None
    found = _match_update(body)
    if found is None:
        return None
    op, g, load_first = found
    buf = body.buffer
    if any(_uses(body.index, v) for v in chain_vars + [var]) or _loads_buffer(body.index, buf):
        return None
    if any(_loads_buffer(c.cond, buf) for c in guards):
        return None
    lane_conds = [c.cond for c in guards if _uses(c.cond, var)]
    if not all(_is_safe(c) for c in lane_conds):
        return None

    identity = EF.reduce_identity(_REDUCERS[op], buf.dtype)
    acc = T.Buffer(f"{buf.name}_vacc", buf.dtype, (lanes,), "local")
    slot = ES.simplify(var - vec.min)

    def update(value: E.Expr) -> T.Store:
        cur = E.BufferLoad(acc, slot, buf.dtype)
        return T.Store(acc, slot, E.binary(op, cur, value) if load_first else E.binary(op, value, cur))

    inner: T.Stmt
    if lane_conds:
        cond = lane_conds[0]
        for c in lane_conds[1:]:
            cond = E.logical("and", cond, c)
        masked = update(E.select(cond, g, identity))
        if _interval_cond(cond, var):
            inner = _split_on(_all_lanes(cond, var, vec.min, lanes), update(g), masked)
        else:
            inner = masked
    else:
        inner = update(g)
    for guard in reversed(guards):  # guards that do not depend on the lane stay scalar ifs
        if not _uses(guard.cond, var):
            inner = T.IfThenElse(guard.cond, inner, None, guard.likely)
    new_nest = _replace_innermost(loop, vec, T.For(var, vec.min, vec.extent, "vectorized", inner,
                                                    dict(vec.annotations)))
    init_var = E.Var(f"{var.name}_init", var.dtype)
    init = T.For(init_var, E.const(0, var.dtype), E.const(lanes, var.dtype), "vectorized",
                 T.Store(acc, init_var, identity))
    parts: list[E.Expr] = [E.BufferLoad(acc, E.const(k, slot.dtype), buf.dtype) for k in range(lanes)]
    while len(parts) > 1:
        nxt = [E.binary(op, parts[k], parts[k + 1]) for k in range(0, len(parts) - 1, 2)]
        parts = nxt + ([parts[-1]] if len(parts) % 2 else [])
    total = parts[0]
    old = E.BufferLoad(buf, body.index, buf.dtype)
    final = T.Store(buf, body.index, E.binary(op, old, total) if load_first else E.binary(op, total, old))
    return T.Allocate(acc, T.SeqStmt((init, new_nest, final)))


def _is_update(body: T.Stmt) -> bool:
    while isinstance(body, T.IfThenElse) and body.else_case is None:
        body = body.then_case
    return isinstance(body, T.Store) and body.predicate is None and _match_update(body) is not None


def _strip_mine(vec: T.For, lanes: int, w: int) -> T.For:
    """``for v in [m, m+L) vectorized {B}`` -> ``for vo { for vi vectorized(W) {
    if (vo*W + vi < L) B[v := m + vo*W + vi] } }``."""
    vo = E.Var(f"{vec.loop_var.name}.o", vec.loop_var.dtype)
    vi = E.Var(f"{vec.loop_var.name}.i", vec.loop_var.dtype)
    pos = vo * w + vi
    body = substitute_stmt(vec.body, {vec.loop_var: ES.simplify(vec.min + pos)})
    if lanes % w:
        body = T.IfThenElse(pos < lanes, body, None, True)
    zero = E.const(0, vo.dtype)
    return T.For(vo, zero, E.const(-(-lanes // w), vo.dtype), "serial",
                 T.For(vi, zero, E.const(w, vi.dtype), "vectorized", body, dict(vec.annotations)))


def _match_update(s: T.Store) -> tuple | None:
    """``(op, g, load_first)`` of ``X[s] = X[s] op g`` (or ``g op X[s]``), else ``None``."""
    v = s.value
    if not (isinstance(v, E.BinaryOp) and v.op in _REDUCERS and v.dtype == s.buffer.dtype):
        return None
    if not (E.is_float(v.dtype) or E.is_int(v.dtype)) or v.dtype == "bool":
        return None
    for cur, g, first in ((v.a, v.b, True), (v.b, v.a, False)):
        if isinstance(cur, E.BufferLoad) and cur.buffer is s.buffer and cur.lanes == 1 \
                and EF.structural_equal(cur.index, s.index) and not _loads_buffer(g, s.buffer):
            return v.op, g, first
    return None


def _replace_innermost(node: T.Stmt, target: T.For, new: T.Stmt) -> T.Stmt:
    if node is target:
        return new
    if isinstance(node, T.For):
        return T.For(node.loop_var, node.min, node.extent, node.kind,
                     _replace_innermost(node.body, target, new), dict(node.annotations))
    if isinstance(node, T.IfThenElse):
        return T.IfThenElse(node.cond, _replace_innermost(node.then_case, target, new), None, node.likely)
    raise TypeError(f"unexpected {type(node).__name__} in a reduction nest")


class _Vectorizer:
    """Rewrites one loop body with ``var -> Ramp(min, 1, lanes)``.

    ``expr`` returns ``(new_expr, lanes)`` with lanes 1 for scalars.  ``pred`` is
    the vector condition of the enclosing lane-dependent guards (``None``: all lanes).
    """

    def __init__(self, var: E.Var, vmin: E.Expr, lanes: int):
        self.var = var
        self.vmin = vmin
        self.lanes = lanes
        self.ramp = _ramp(vmin, E.const(1, var.dtype), lanes)
        self.memo: dict = {}
        self.pred: E.Expr | None = None

    # -- statements ---------------------------------------------------------
    def stmt(self, s: T.Stmt) -> T.Stmt:
        if isinstance(s, T.Store):
            return self._store(s)
        if isinstance(s, T.SeqStmt):
            return T.SeqStmt(tuple(self.stmt(c) for c in s.seq))
        if isinstance(s, T.IfThenElse):
            cond, n = self.expr(s.cond)
            if n != 1:
                return self._predicated_if(s, cond)
            other = None if s.else_case is None else self.stmt(s.else_case)
            return T.IfThenElse(cond, self.stmt(s.then_case), other, s.likely)
        if isinstance(s, T.For) and const_extent(s) == 1:
            return self.stmt(substitute_stmt(s.body, {s.loop_var: s.min}))
        if isinstance(s, T.LetStmt):
            value, n = self.expr(s.value)
            if n == 1 and (self.pred is None or _is_safe(s.value)):
                return T.LetStmt(s.var, value, self.stmt(s.body))
            # A vector-valued let, or one that may fault in masked-off lanes: inline it
            # (expressions are pure), so that it is evaluated under the store's mask.
            return self.stmt(substitute_stmt(s.body, {s.var: s.value}))
        raise _Fallback(f"cannot vectorize a {type(s).__name__}")

    def _predicated_if(self, s: T.IfThenElse, cond: E.Expr) -> T.Stmt:
        """A guard that depends on the lane: predicate the stores of each branch."""
        outer = self.pred
        if outer is not None and not _is_safe(s.cond):
            raise _Fallback("a nested lane guard could fault in masked-off lanes")
        if outer is None and s.else_case is None and _interval_cond(s.cond, self.var):
            # All lanes active (the common case of a split tail guard): no masks at all.
            fast = self.stmt(s.then_case)
            self.pred = cond
            try:
                slow = self.stmt(s.then_case)
            finally:
                self.pred = outer
            return _split_on(_all_lanes(s.cond, self.var, self.vmin, self.lanes), fast, slow)
        try:
            self.pred = cond if outer is None else E.logical("and", outer, cond)
            then = self.stmt(s.then_case)
            other = None
            if s.else_case is not None:
                neg = E.Not(cond)
                self.pred = neg if outer is None else E.logical("and", outer, neg)
                other = self.stmt(s.else_case)
        finally:
            self.pred = outer
        return then if other is None else T.SeqStmt((then, other))

    def _store(self, s: T.Store) -> T.Store:
        index, ni = self.expr(s.index)
        if ni == 1:
            raise _Fallback("store index does not depend on the vector var")
        if self.pred is not None and not _is_safe(s.index):
            raise _Fallback("a predicated store's index could fault in masked-off lanes")
        value, nv = self.expr(s.value)
        pred = None
        if s.predicate is not None:
            if self.pred is not None and not _is_safe(s.predicate):
                raise _Fallback("a store predicate could fault in masked-off lanes")
            pred = self._bcast(*self.expr(s.predicate))
        if self.pred is not None:
            pred = self.pred if pred is None else E.logical("and", self.pred, pred)
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

