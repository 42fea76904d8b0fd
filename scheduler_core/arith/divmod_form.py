"""Floor division by a positive constant: rewrites by ranges, and a normal form.

    simplify_divmod(e, env)     floordiv/floormod made exact by the ranges of env removed
    DivModNormalForm().normalize(e)   one quantity written two ways becomes one atom

``simplify_divmod`` is TVM's rewrite rule ``floordiv(x*c + r, c) -> x`` / ``floormod(x*c + r, c)
-> r`` when ``0 <= r < c`` over the variables' ranges (src/arith/rewrite_simplify.cc with the
bounds of src/arith/const_int_bound.cc).  The normal form applies identities of floor division
by a positive constant that hold whatever the ranges (TVM's canonical_simplify.cc
``SplitExpr`` normalisation): nested divisions flattened, multiples and common factors taken
out, split/fuse pairs joined.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from scheduler_core.ir.expr import BinaryOp, Cast, Expr, FloatImm, IntImm, Var, is_float
from scheduler_core.ir.expr_functor import children, rebuild, walk
from scheduler_core.ir.simplify import const_value

from .int_set import interval
from .linear_form import (
    LinearForm,
    add_terms,
    canonical,
    from_linear,
    joined_linear_form,
    linear_form,
    sorted_linear,
)

RangeFn = Callable[[Expr, dict], "tuple | None"]


def const_divisor(e: Expr) -> int | None:
    """``c`` when ``e`` is an integer ``floordiv``/``floormod`` by a constant ``c > 0``, else None."""
    if isinstance(e, BinaryOp) and e.op in ("floordiv", "floormod") and not is_float(e.dtype):
        c = const_value(e.b)
        if isinstance(c, int) and c > 0:
            return c
    return None


def _interval_range(e: Expr, env: dict) -> tuple | None:
    r = interval(e, env)
    return None if r is None else r.const_bounds


def _divmod_rewrite(n: Expr, env: dict, rng: RangeFn) -> Expr | None:
    c = const_divisor(n)
    if c is None:
        return None
    assert isinstance(n, BinaryOp)
    terms, k0 = linear_form(n.a)
    q_terms = {key: (atom, coef // c) for key, (atom, coef) in terms.items() if coef % c == 0}
    r = from_linear({key: v for key, v in terms.items() if v[1] % c != 0}, k0)
    b = rng(r, env)
    if b is None or b[0] // c != b[1] // c:
        return None
    d = b[0] // c
    if n.op == "floordiv":
        return from_linear(q_terms, d)
    return canonical(r - d * c) if d else r


def simplify_divmod(e: Expr, env: dict, bound: RangeFn | None = None, memo: dict | None = None) -> Expr:
    """Remove ``floordiv``/``floormod`` by a constant where the ranges in ``env`` allow.

    ``floordiv(x*c + r, c) -> x + d`` and ``floormod(x*c + r, c) -> r - d*c`` when ``r`` lies in
    one period ``d*c .. d*c + c - 1`` (TVM's arith rewrite rules with the loop variables'
    bounds).  One bottom-up pass.  ``bound(r, env)`` gives the constant range of ``r``
    (default: the symbolic :func:`interval`); ``memo`` (``id -> (node, result)``) may be shared
    by calls with the same ``env`` and ``bound``.
    """
    for n in walk(e):
        if isinstance(n, BinaryOp) and (n.op == "floordiv" or n.op == "floormod"):
            break
    else:
        return e
    return _simplify_divmod_rec(e, env, _interval_range if bound is None else bound, {} if memo is None else memo)


def _simplify_divmod_rec(node: Any, env: dict, rng: RangeFn, memo: dict) -> Expr:
    """One node of :func:`simplify_divmod` (a module function, not a closure calling itself:
    that would be a reference cycle holding the memo until the cyclic collector runs)."""
    t = type(node)  # Any: dispatched on its exact class
    if t is IntImm or t is Var or t is FloatImm:  # a leaf: no child, nothing to rewrite
        return node
    hit = memo.get(id(node))
    if hit is not None and hit[0] is node:
        return hit[1]
    out = node
    if t is BinaryOp:  # the common interior node, inline
        a, b = node.a, node.b
        na, nb = _simplify_divmod_rec(a, env, rng, memo), _simplify_divmod_rec(b, env, rng, memo)
        if na is not a or nb is not b:
            out = BinaryOp(node.op, na, nb, node.dtype)
    else:
        kids = children(node)
        if kids:
            new = tuple([_simplify_divmod_rec(k, env, rng, memo) for k in kids])
            if any(a is not b for a, b in zip(new, kids)):
                out = rebuild(node, new)
    rewritten = _divmod_rewrite(out, env, rng)
    out = rewritten if rewritten is not None else out
    memo[id(node)] = (node, out)
    return out


class DivModNormalForm:
    """Expressions with every ``floordiv``/``floormod`` by a positive constant in a normal form,
    so that one quantity written two ways is one atom of a linear form.  One object per batch
    of related expressions: its memo keeps the expressions it has seen alive."""

    def __init__(self) -> None:
        self.memo: dict = {}

    def linear(self, e: Expr) -> LinearForm:
        """:func:`linear_form` of ``e``, remembered."""
        key = ("linear", id(e))
        hit = self.memo.get(key)
        if hit is None or hit[0] is not e:
            hit = self.memo[key] = (e, linear_form(e))
        return hit[1]

    def joined(self, e: Expr) -> LinearForm:
        """:func:`joined_linear_form` of ``e`` (in normal form): the partner of ``floormod(a, c)``
        is the normal form of ``floordiv(a, c)`` (``floordiv(floordiv(x, 7), 5)`` is
        ``floordiv(x, 35)``)."""
        return joined_linear_form(e, self.linear, lambda atom, c: self.div("floordiv", atom.a, c, atom.dtype))

    def normalize(self, e: Expr) -> Expr:
        """``e`` with every ``floordiv``/``floormod`` by a positive constant in normal form."""
        hit = self.memo.get(id(e))
        if hit is not None and hit[0] is e:
            return hit[1]
        out = e
        if isinstance(e, BinaryOp):
            a, b = self.normalize(e.a), self.normalize(e.b)
            if a is not e.a or b is not e.b:
                out = BinaryOp(e.op, a, b, e.dtype)
            c = const_divisor(out)
            if c is not None:
                out = self.div(e.op, a, c, e.dtype)
        elif isinstance(e, Cast):
            v = self.normalize(e.value)
            out = e if v is e.value else Cast(v, e.dtype)
        self.memo[id(e)] = (e, out)
        return out

    def div(self, op: str, a: Expr, c: int, dtype: str) -> Expr:
        """The normal form of ``op(a, c)`` (``a`` in normal form, ``c > 0``), by identities that
        hold whatever the ranges:

        * the argument is a sorted linear form with split/fuse pairs joined;
        * multiples of ``c`` come out: ``floordiv(c*x + y, c) = x + floordiv(y, c)``,
          ``floormod(c*x + y, c) = floormod(y, c)`` (constants too: ``0 <= y's constant < c``);
        * a common factor goes: ``floordiv(g*y, g*c) = floordiv(y, c)``,
          ``floormod(g*y, g*c) = g*floormod(y, c)``;
        * nested divisions flatten (:meth:`_flatten`).
        """
        key = ("div", op, id(a), c)
        hit = self.memo.get(key)
        if hit is not None and hit[0] is a:
            return hit[1]
        terms, k = self.joined(a)
        q_terms = {t: (atom, coef // c) for t, (atom, coef) in terms.items() if coef % c == 0}
        r_terms = {t: v for t, v in terms.items() if v[1] % c != 0}
        kq, kr = divmod(k, c)
        out: Expr
        if not r_terms:
            out = sorted_linear(q_terms, kq) if op == "floordiv" else IntImm(kr)
        else:
            g = math.gcd(c, kr, *(coef for _, coef in r_terms.values()))
            inner: Expr | None = None
            if g > 1:
                y = sorted_linear({t: (atom, coef // g) for t, (atom, coef) in r_terms.items()}, kr // g)
                inner = self.div(op, y, c // g, dtype)
                if op == "floormod":
                    inner = _plus({}, 0, inner, g)
            else:
                inner = self._flatten(op, r_terms, kr, c, dtype)
            if inner is None:
                inner = BinaryOp(op, sorted_linear(r_terms, kr), IntImm(c), dtype)
            out = inner if op == "floormod" or not (q_terms or kq) else _plus(q_terms, kq, inner)
        self.memo[key] = (a, out)
        return out

    def _flatten(self, op: str, r_terms: dict, kr: int, c: int, dtype: str) -> Expr | None:
        """Nested divisions in ``op(sum(r_terms) + kr, c)`` taken apart, or None:
        ``floordiv(x + floordiv(y, d), c) = floordiv(d*x + y, d*c)`` (x an integer sum), and for
        ``c`` dividing ``d``: ``floormod(x + floormod(y, d), c) = floormod(x + y, c)`` and
        ``floordiv(floormod(y, d), c) = floormod(floordiv(y, c), d/c)``."""
        for key, (atom, coef) in r_terms.items():
            d = const_divisor(atom) if coef == 1 else None
            if d is None:
                continue
            assert isinstance(atom, BinaryOp)
            rest = {k2: v for k2, v in r_terms.items() if k2 != key}
            if op == "floordiv" and atom.op == "floordiv":
                if sum(1 for a, _ in r_terms.values() if isinstance(a, BinaryOp) and a.op == "floordiv") > 1:
                    return None
                scaled = {k2: (a, m * d) for k2, (a, m) in rest.items()}
                return self.div("floordiv", _plus(scaled, kr * d, atom.a), d * c, dtype)
            if op == "floormod" and atom.op == "floormod" and d % c == 0:
                return self.div("floormod", _plus(rest, kr, atom.a), c, dtype)
            if op == "floordiv" and atom.op == "floormod" and d % c == 0 and not rest and not kr:
                return self.div("floormod", self.div("floordiv", atom.a, c, dtype), d // c, dtype)
        return None


def _plus(terms: dict, k: int, e: Expr, scale: int = 1) -> Expr:
    """``sum(terms) + k + scale*e`` as a sorted linear form."""
    e_terms, e_k = linear_form(e)
    return sorted_linear(add_terms(terms, e_terms, scale), k + scale * e_k)


__all__ = ["DivModNormalForm", "const_divisor", "simplify_divmod"]
