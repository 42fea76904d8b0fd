"""Proof that every tensor access of a DAG stays inside its tensor.

    ops --check_ops_access_bounds--> ok | InvalidWorkloadError naming op, tensor, index, range

For each ComputeOp the iteration domain is its spatial axes (``0 .. extent-1``) and the
axes of any reduction (``dom_min .. dom_min+extent-1``); every ``TensorLoad`` index is
evaluated over that domain with the interval arithmetic lowering uses
(:func:`scheduler_core.arith.int_set.interval`) and must lie in ``0 .. dim-1``.

Narrowing.  ``if_then_else(cond, a, b)`` checks ``a`` under ``cond`` and ``b`` under
``not cond``; a reduction's ``condition`` holds for its source.  A condition narrows when
it is a conjunction of integer comparisons (``<, <=, >, >=, ==``, and ``!=`` where it
cuts an end off one variable's range) whose sides differ by an affine expression: a
comparison with one loop variable tightens that variable's range, and any comparison
bounds the index expressions with the same affine terms (e.g. ``y*2 + ry - 1 >= 0`` bounds
the index ``y*2 + ry - 1``).  Parts of a condition that are not understood (``||``, calls,
loads, deep nests) are dropped, which only widens the checked range: an access is rejected
only when even that range leaves the tensor.  (``&&`` does not guard its right side: compiled
code evaluates both sides.)

Scans.  Each scan's time range ``[min, min+extent)`` must start at or above 0 and fit the
first dimension of every state placeholder and update tensor; each init tensor must fit the
scan's output (the update's shape) in every dimension, as must each state placeholder (init,
update and state share the output buffer).  The ops of a scan's body (its updates and the
computes that read its state, directly or through other such computes; lowering runs one
time step of them per iteration of the scan's time loop) are checked with their first axis
ranging over the scan's time range instead of ``0 .. extent-1``.

Division by zero.  An index holding an integer ``div``/``floordiv``/``floormod`` whose divisor
is always 0 over the domain (a constant 0, or e.g. a reduce variable whose range is {0}) is
rejected, whatever the tensor's shape.

Not proved (skipped, never rejected):
  * symbolic shapes: an access whose index range or tensor dimension is not a constant
    (a ``Var`` in a shape; manual schedules allow them) is not checked;
  * indices the interval arithmetic cannot evaluate (data-dependent ``A[B[i]]``, products
    of loop variables) and index or condition expressions nested deeper than
    ``MAX_INDEX_DEPTH`` (the interval machinery recurses over them).

The walk over op bodies uses an explicit stack, so arbitrarily deep bodies built in Python
raise no RecursionError.  ``ComputeDAG.__init__`` does not call this check (construction
stays cheap and the search rebuilds DAGs often); the JSON decoder does, and library users
call :func:`check_access_bounds`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from scheduler_core.arith.int_set import Interval, const_range, interval, range_interval
from scheduler_core.arith.linear_form import linear_form, signature
from scheduler_core.base.errors import InvalidWorkloadError
from scheduler_core.ir.expr import (
    BinaryOp,
    Call,
    CmpOp,
    Expr,
    LogicalOp,
    Not,
    Reduce,
    Select,
    TensorLoad,
    Var,
    as_expr,
    expr_str,
    is_int,
)
from scheduler_core.ir.expr_functor import children, depth, walk
from scheduler_core.ir.simplify import const_value, simplify

from .tensor import ComputeOp, ScanOp

MAX_INDEX_DEPTH = 200  # deeper index/condition expressions are not analysed (arith.int_set recurses)

_NEGATE = {"lt": "ge", "le": "gt", "gt": "le", "ge": "lt", "eq": "ne", "ne": "eq"}


def check_access_bounds(dag: Any) -> None:
    """Raise InvalidWorkloadError unless every access of ``dag`` (a ComputeDAG, or anything
    with ``ops`` in topological order) provably stays inside its tensor, or is not provable
    for the reasons listed in the module docstring (symbolic shapes, opaque indices)."""
    check_ops_access_bounds(list(dag.ops))


def check_ops_access_bounds(ops: Sequence[Any], paths: Sequence[str] | None = None) -> None:
    """The check of :func:`check_access_bounds` over ``ops`` in topological order.

    ``paths[k]`` (e.g. ``"ops[3]"``) becomes the ``path`` of an error about ``ops[k]``.
    """
    ops = list(ops)
    where = list(paths) if paths is not None else [""] * len(ops)
    body_scan: dict[int, ScanOp] = {}  # id(op) -> the scan whose time loop computes it
    for k, op in enumerate(ops):
        if isinstance(op, ScanOp):
            _check_scan(op, where[k])
            for j in _scan_body(ops, k):
                body_scan.setdefault(id(ops[j]), op)
    for k, op in enumerate(ops):
        if isinstance(op, ComputeOp):
            _check_compute(op, body_scan.get(id(op)), where[k])


# ---------------------------------------------------------------------------
# Scans
# ---------------------------------------------------------------------------

def _const(e: Any) -> int | None:
    v = const_value(simplify(as_expr(e)))
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _scan_body(ops: list, k: int) -> list:
    """Indices of the ops computed in scan ``ops[k]``'s time loop (lowering's scan body)."""
    scan = ops[k]
    reads_state = {id(t.op) for t in scan.state_placeholder}
    out = []
    for j, op in enumerate(ops[:k]):
        if isinstance(op, ComputeOp) and any(id(t.op) in reads_state for t in op.input_tensors()):
            reads_state.add(id(op))
            out.append(j)
    updates = {id(t.op) for t in scan.update}
    out.extend(j for j, op in enumerate(ops) if id(op) in updates and j not in out)
    return out


def _check_scan(op: ScanOp, path: str) -> None:
    ax = op.scan_axis
    lo, ext = _const(ax.dom_min), _const(ax.dom_extent)
    for u, i, s in zip(op.update, op.init, op.state_placeholder):
        if lo is not None and ext is not None and ext > 0:
            hi = lo + ext - 1
            for role, t in (("state", s), ("update", u)):
                dim = _const(t.shape[0]) if t.shape else None
                if dim is not None and (lo < 0 or hi > dim - 1):
                    raise InvalidWorkloadError(
                        f"op {op.name}: scan axis {ax.var.name} ranges over [{lo}, {hi}] but "
                        f"{role} {t.name} has {dim} elements along dimension 0", path)
        for role, t in (("init", i), ("state", s)):
            for d, (a, b) in enumerate(zip(t.shape, u.shape)):
                na, nb = _const(a), _const(b)
                if na is not None and nb is not None and na > nb:
                    raise InvalidWorkloadError(
                        f"op {op.name}: {role} {t.name} has {na} elements along dimension {d} "
                        f"but the scan's output (update {u.name}) has {nb}", path)


# ---------------------------------------------------------------------------
# Compute bodies
# ---------------------------------------------------------------------------

@dataclass(frozen=True)
class _Ctx:
    """What holds where an expression is evaluated: variable ranges and affine bounds."""

    env: dict  # Var -> Interval
    affine: tuple  # ((signature, lo | None, hi | None), ...): lo <= sum of terms <= hi


def _bounds(iv: Interval | None) -> tuple[int, int] | None:
    if iv is None:
        return None
    lo, ext = _const(iv.lo), iv.const_extent
    if lo is None or ext is None:
        return None
    return lo, lo + ext - 1


def _check_compute(op: ComputeOp, scan: ScanOp | None, path: str) -> None:
    env: dict = {}
    for j, iv in enumerate(op.axis):
        src = scan.scan_axis if scan is not None and j == 0 else iv
        env[iv.var] = Interval(simplify(as_expr(src.dom_min)), simplify(as_expr(src.dom_extent)))
    if any(_empty(iv) for iv in env.values()):
        return  # no iteration: nothing is read
    stack: list = [(b, _Ctx(env, ())) for b in op.bodies]
    seen: dict = {}  # (id(node), id(ctx)) -> ctx, which keeps the ids alive and unique
    while stack:
        node, ctx = stack.pop()
        key = (id(node), id(ctx))
        if key in seen:
            continue
        seen[key] = ctx
        if isinstance(node, TensorLoad):
            _check_load(op, node, ctx, path)
            stack.extend((c, ctx) for c in node.indices)
        elif isinstance(node, Select):
            stack.append((node.cond, ctx))
            for value, positive in ((node.true_value, True), (node.false_value, False)):
                inner = _narrow(ctx, node.cond, positive)
                if inner is not None:
                    stack.append((value, inner))
        elif isinstance(node, Reduce):
            renv = dict(ctx.env)
            for iv in node.axis:
                renv[iv.var] = Interval(simplify(as_expr(iv.dom_min)), simplify(as_expr(iv.dom_extent)))
            if any(_empty(renv[iv.var]) for iv in node.axis):
                continue  # an empty reduction reads nothing
            rctx = _Ctx(renv, ctx.affine)
            source_ctx: _Ctx | None = rctx
            if node.condition is not None:
                stack.append((node.condition, rctx))
                source_ctx = _narrow(rctx, node.condition, True)
            if source_ctx is not None:
                stack.append((node.source, source_ctx))
        else:
            stack.extend((c, ctx) for c in children(node))


def _empty(iv: Interval) -> bool:
    ext = iv.const_extent
    return ext is not None and ext <= 0


def _zero_divisor(idx: Expr, env: dict) -> BinaryOp | None:
    """The first integer ``div``/``floordiv``/``floormod`` of ``idx`` whose divisor is always 0
    where the variables range over ``env``; None when there is none (or it is not provable)."""
    for n in walk(idx):
        if not (isinstance(n, BinaryOp) and n.op in ("div", "floordiv", "floormod") and is_int(n.dtype)):
            continue
        if const_value(n.b) == 0:
            return n
        if depth(n.b) > MAX_INDEX_DEPTH:
            continue
        b = _bounds(interval(n.b, env))
        if b == (0, 0):
            return n
    return None


def _check_load(op: ComputeOp, load: TensorLoad, ctx: _Ctx, path: str) -> None:
    t = load.tensor
    for d, (idx, dim_e) in enumerate(zip(load.indices, t.shape)):
        zero = _zero_divisor(idx, ctx.env)
        if zero is not None:
            raise InvalidWorkloadError(
                f"op {op.name} reads {expr_str(load)}: index {d} divides by zero "
                f"({expr_str(zero)}: the divisor {expr_str(zero.b)} is always 0)", path)
        dim = _const(dim_e)
        if dim is None or depth(idx) > MAX_INDEX_DEPTH:
            continue
        # an if_then_else index: each branch under its condition (as a select around loads)
        parts = [(idx, ctx)]
        while parts:
            part, pctx = parts.pop()
            if isinstance(part, Select):
                for value, positive in ((part.true_value, True), (part.false_value, False)):
                    inner = _narrow(pctx, part.cond, positive)
                    if inner is not None:
                        parts.append((value, inner))
                continue
            _check_index(op, load, d, part, dim, pctx, path)


def _check_index(op: ComputeOp, load: TensorLoad, d: int, idx: Expr, dim: int, ctx: _Ctx, path: str) -> None:
    """Raise unless ``idx`` (index ``d`` of ``load``, or a branch of it) stays in ``0 .. dim-1``
    over ``ctx``; an index the check cannot bound passes only when it may be data-dependent or
    symbolic (:func:`_unmodelled`)."""
    b = _bounds(interval(idx, ctx.env))
    if b is None:  # constant bounds: casts, floormod by a negative divisor, products
        fast = const_range(idx, ctx.env)
        b = None if fast is None else (int(fast[0]), int(fast[1]))
    if b is None:
        unknown = _unmodelled(idx, ctx.env)
        if unknown is not None:
            raise InvalidWorkloadError(
                f"op {op.name} reads {expr_str(load)}: index {d} cannot be proved inside "
                f"[0, {dim - 1}]: {unknown} is not modelled by the bounds check", path)
        return
    lo, hi = _affine_clip(idx, ctx, b)
    if lo > hi:
        return  # the affine bounds leave no value: this read never happens
    if lo < 0 or hi > dim - 1:
        raise InvalidWorkloadError(
            f"op {op.name} reads {expr_str(load)}: index {d} ranges over [{lo}, {hi}] "
            f"but {load.tensor.name} has {dim} elements along dimension {d}", path)


def _unmodelled(idx: Expr, env: dict) -> str | None:
    """What keeps an index of loop variables only from being bounded (a call such as ``abs`` or
    ``floor``, ``pow``, a float): its text, or None when the index may legitimately stay unproved
    (it reads a tensor, a gather checked at run time, or uses a symbolic size)."""
    culprit = None
    for n in walk(idx):
        if isinstance(n, TensorLoad) or (isinstance(n, Var) and n not in env):
            return None
        if culprit is None and (isinstance(n, Call) or (isinstance(n, BinaryOp) and n.op == "pow")
                                or not is_int(n.dtype)):
            culprit = expr_str(n)
    return culprit


def _affine_clip(idx: Expr, ctx: _Ctx, b: tuple[int, int]) -> tuple[int, int]:
    """Intersect ``b`` with the affine bounds of ``ctx`` that constrain ``idx``'s terms."""
    lo, hi = b
    if not ctx.affine:
        return lo, hi
    terms, c = linear_form(idx)
    if not terms:
        return lo, hi
    sig = signature(terms)
    neg = frozenset((k, -v) for k, v in sig)
    for s, alo, ahi in ctx.affine:
        if s == sig:
            lo = max(lo, alo + c) if alo is not None else lo
            hi = min(hi, ahi + c) if ahi is not None else hi
        elif s == neg:  # idx = -(terms of s) + c
            lo = max(lo, c - ahi) if ahi is not None else lo
            hi = min(hi, c - alo) if alo is not None else hi
    return lo, hi


def _comparisons(cond: Expr, positive: bool) -> list:
    """``(op, a, b)`` integer comparisons implied by ``cond`` (or ``not cond``)."""
    out = []
    stack = [(cond, positive)]
    while stack:
        e, pos = stack.pop()
        if isinstance(e, Not):
            stack.append((e.a, not pos))
        elif isinstance(e, LogicalOp):
            if (e.op == "and") == pos:  # a && b, or !(a || b): both parts hold
                stack.append((e.a, pos))
                stack.append((e.b, pos))
            # a || b, or !(a && b): nothing known about either part
        elif isinstance(e, CmpOp) and is_int(e.a.dtype) and is_int(e.b.dtype):
            out.append((e.op if pos else _NEGATE[e.op], e.a, e.b))
    return out


def _narrow(ctx: _Ctx, cond: Expr, positive: bool) -> _Ctx | None:
    """``ctx`` under ``cond`` (``positive``) or ``not cond``; None when that cannot hold."""
    env = dict(ctx.env)
    affine = {s: (lo, hi) for s, lo, hi in ctx.affine}
    for op, a, b in _comparisons(cond, positive):
        if depth(a) > MAX_INDEX_DEPTH or depth(b) > MAX_INDEX_DEPTH:
            continue
        terms, k = linear_form(a - b)  # (sum of terms) + k  op  0
        bound = -k
        if op == "ne":  # only trims an end of one variable's range: i != 0 with i in [0, 5]
            if not _exclude(env, terms, bound):
                return None
            continue
        lo, hi = {"lt": (None, bound - 1), "le": (None, bound), "gt": (bound + 1, None),
                  "ge": (bound, None), "eq": (bound, bound)}[op]
        if not terms:
            if (lo is not None and lo > 0) or (hi is not None and hi < 0):
                return None  # a constant comparison that is false
            continue
        sig = signature(terms)
        if sig in affine:  # one entry per signature: deep nests of conditions stay cheap
            plo, phi = affine[sig]
            lo = plo if lo is None else lo if plo is None else max(lo, plo)
            hi = phi if hi is None else hi if phi is None else min(hi, phi)
        if lo is not None and hi is not None and lo > hi:
            return None
        affine[sig] = (lo, hi)
        if len(terms) == 1:
            (atom, coef), = terms.values()
            if isinstance(atom, Var) and atom in env:
                cur = _bounds(env[atom])
                if cur is None:
                    continue
                vlo, vhi = cur
                if lo is not None:  # coef*v >= lo
                    if coef > 0:
                        vlo = max(vlo, -(-lo // coef))
                    else:
                        vhi = min(vhi, lo // coef)
                if hi is not None:  # coef*v <= hi
                    if coef > 0:
                        vhi = min(vhi, hi // coef)
                    else:
                        vlo = max(vlo, -(-hi // coef))
                if vlo > vhi:
                    return None
                env[atom] = range_interval(vlo, vhi)
    return _Ctx(env, tuple((s, lo, hi) for s, (lo, hi) in affine.items()))


def _exclude(env: dict, terms: dict, bound: int) -> bool:
    """Narrow ``env`` by ``sum(terms) != bound``; False when nothing is left."""
    if len(terms) != 1:
        return True
    (atom, coef), = terms.values()
    cur = _bounds(env.get(atom)) if isinstance(atom, Var) else None
    if cur is None or bound % coef:
        return True
    vlo, vhi = cur
    value = bound // coef
    if value == vlo:
        vlo += 1
    elif value == vhi:
        vhi -= 1
    if vlo > vhi:
        return False
    env[atom] = range_interval(vlo, vhi)
    return True


__all__ = ["check_access_bounds", "check_ops_access_bounds", "MAX_INDEX_DEPTH"]
