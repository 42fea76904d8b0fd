"""Interval arithmetic for bound inference (TVM's IntSet evaluation, simplified).

An ``Interval(lo, extent)`` is the integer set ``[lo, lo + extent)`` where
``lo`` is a symbolic Expr (in the loop variables that stay fixed) and
``extent`` is, whenever possible, a constant.  ``interval(e, env)`` evaluates
an index expression where the variables in ``env`` range over intervals and
every other variable is a fixed point.  ``None`` means "not analysable": the
caller falls back to the whole dimension.
"""

from __future__ import annotations

from dataclasses import dataclass

from .expr import BinaryOp, Cast, Expr, FloatImm, IntImm, Var, as_expr, expr_str
from .expr_functor import children, rebuild, walk
from .simplify import const_value, simplify


@dataclass(frozen=True)
class Interval:
    lo: Expr
    extent: Expr

    @property
    def const_extent(self) -> int | None:
        v = const_value(self.extent)
        return v if isinstance(v, int) else None


def point(e: Expr) -> Interval:
    return Interval(e, IntImm(1))


# ---------------------------------------------------------------------------
# Linear forms: sum(coef * atom) + const, used to compare and tidy lo exprs
# ---------------------------------------------------------------------------

def _atom_key(e: Expr):
    if isinstance(e, Var):
        return ("v", id(e))
    ids = tuple(sorted(id(n) for n in walk(e) if isinstance(n, Var)))
    return ("a", expr_str(e), ids)


def linear_form(e: Expr):
    """``(terms: {key: (atom, coef)}, const)`` of an int expression."""
    e = as_expr(e)
    if isinstance(e, IntImm):
        return {}, e.value
    if isinstance(e, BinaryOp) and e.op in ("add", "sub"):
        ta, ca = linear_form(e.a)
        tb, cb = linear_form(e.b)
        sign = 1 if e.op == "add" else -1
        out = dict(ta)
        for k, (atom, c) in tb.items():
            prev = out.get(k, (atom, 0))[1]
            out[k] = (atom, prev + sign * c)
        return {k: v for k, v in out.items() if v[1] != 0}, ca + sign * cb
    if isinstance(e, BinaryOp) and e.op == "mul":
        for x, y in ((e.a, e.b), (e.b, e.a)):
            c = const_value(y)
            if isinstance(c, int):
                t, k0 = linear_form(x)
                return {k: (a, v * c) for k, (a, v) in t.items() if v * c != 0}, k0 * c
    return {_atom_key(e): (e, 1)}, 0


def from_linear(terms: dict, c: int) -> Expr:
    out: Expr | None = None
    for atom, coef in terms.values():
        term = atom if coef == 1 else atom * IntImm(coef)
        out = term if out is None else out + term
    if out is None:
        return IntImm(c)
    return simplify(out + IntImm(c)) if c else out


def canonical(e: Expr) -> Expr:
    """``e`` rewritten as a tidy linear form (constants gathered)."""
    return from_linear(*linear_form(e))


def const_diff(a: Expr, b: Expr) -> int | None:
    """``a - b`` if it is a constant, else None."""
    ta, ca = linear_form(a)
    tb, cb = linear_form(b)
    if set(ta) != set(tb):
        return None
    if any(ta[k][1] != tb[k][1] for k in ta):
        return None
    return ca - cb


# ---------------------------------------------------------------------------
# Interval evaluation
# ---------------------------------------------------------------------------

def _add(x: Interval, y: Interval) -> Interval:
    return Interval(canonical(x.lo + y.lo), simplify(x.extent + y.extent - 1))


def _scale(x: Interval, c: int) -> Interval:
    if c >= 0:
        return Interval(canonical(x.lo * c), simplify((x.extent - 1) * c + 1))
    return Interval(canonical((x.lo + x.extent - 1) * c), simplify((x.extent - 1) * (-c) + 1))


def interval(e: Expr, env: dict) -> Interval | None:
    """The set of values of int expression ``e`` when each Var in ``env`` ranges over its Interval."""
    e = as_expr(e)
    if isinstance(e, IntImm):
        return point(e)
    if isinstance(e, Var):
        return env.get(e, point(e))
    if isinstance(e, Cast):
        return interval(e.value, env) if not e.dtype.startswith("float") else None
    if isinstance(e, (FloatImm,)):
        return None
    if not isinstance(e, BinaryOp):
        if not any(isinstance(n, Var) and n in env for n in walk(e)):
            return point(e)
        return None
    a = interval(e.a, env)
    b = interval(e.b, env)
    if a is None or b is None:
        return None
    if a.const_extent == 1 and b.const_extent == 1:
        return point(canonical(BinaryOp(e.op, a.lo, b.lo, e.dtype)))
    if e.op == "add":
        return _add(a, b)
    if e.op == "sub":
        return _add(a, _scale(b, -1))
    if e.op == "mul":
        cb = const_value(b.lo) if b.const_extent == 1 else None
        ca = const_value(a.lo) if a.const_extent == 1 else None
        if isinstance(cb, int):
            return _scale(a, cb)
        if isinstance(ca, int):
            return _scale(b, ca)
        return None
    if e.op in ("floordiv", "floormod"):
        c = const_value(b.lo) if b.const_extent == 1 else None
        if not isinstance(c, int) or c <= 0:
            return None
        w = a.const_extent
        if w is None:
            return None
        if e.op == "floordiv":
            lo_c = const_value(a.lo)
            if isinstance(lo_c, int):
                lo, hi = lo_c // c, (lo_c + w - 1) // c
                return Interval(IntImm(lo), IntImm(hi - lo + 1))
            return Interval(canonical(a.lo // c), IntImm((w - 1 + c - 1) // c + 1))
        lo_c = const_value(a.lo)
        if isinstance(lo_c, int) and (lo_c // c) == ((lo_c + w - 1) // c):
            return Interval(IntImm(lo_c % c), IntImm(w))
        return Interval(IntImm(0), IntImm(c))
    if e.op in ("min", "max"):
        d = const_diff(a.lo, b.lo)
        ea, eb = a.const_extent, b.const_extent
        if d is None or ea is None or eb is None:
            return None
        # Relative to b.lo, a spans [d, d + ea - 1] and b spans [0, eb - 1].
        pick = min if e.op == "min" else max
        lo_rel = pick(d, 0)
        hi_rel = pick(d + ea - 1, eb - 1)
        return Interval(canonical(b.lo + lo_rel), IntImm(max(hi_rel - lo_rel + 1, 1)))
    return None


def union(xs: list) -> Interval | None:
    """The smallest interval holding every interval of ``xs`` (None if not comparable)."""
    if not xs or any(x is None for x in xs):
        return None
    base = xs[0]
    lo_rel, hi_rel = 0, base.const_extent
    if hi_rel is None:
        return base if all(x is base for x in xs) else None
    for x in xs[1:]:
        d = const_diff(x.lo, base.lo)
        ext = x.const_extent
        if d is None or ext is None:
            return None
        lo_rel = min(lo_rel, d)
        hi_rel = max(hi_rel, d + ext)
    return Interval(canonical(base.lo + lo_rel), IntImm(hi_rel - lo_rel))


def _divmod_rewrite(n, env: dict):
    if not (isinstance(n, BinaryOp) and n.op in ("floordiv", "floormod")):
        return None
    c = const_value(n.b)
    if not isinstance(c, int) or c <= 0 or n.dtype.startswith("float"):
        return None
    terms, k0 = linear_form(n.a)
    q_terms = {key: (atom, coef // c) for key, (atom, coef) in terms.items() if coef % c == 0}
    r_terms = {key: v for key, v in terms.items() if v[1] % c != 0}
    r = from_linear(r_terms, k0)
    ri = interval(r, env)
    if ri is None or ri.const_extent is None:
        return None
    lo = const_value(ri.lo)
    if not isinstance(lo, int):
        return None
    hi = lo + ri.const_extent - 1
    if lo // c != hi // c:
        return None
    d = lo // c
    if n.op == "floordiv":
        return from_linear(q_terms, d)
    return canonical(r - d * c) if d else r


def simplify_divmod(e: Expr, env: dict) -> Expr:
    """Remove ``floordiv``/``floormod`` by a constant where the ranges in ``env`` allow.

    ``floordiv(x*c + r, c) -> x`` and ``floormod(x*c + r, c) -> r`` when ``0 <= r < c``
    (TVM's arith rewrite rules with the loop variables' bounds).  One bottom-up pass.
    """
    if not any(isinstance(n, BinaryOp) and n.op in ("floordiv", "floormod") for n in walk(e)):
        return e
    memo: dict = {}

    def go(node):
        key = id(node)
        if key in memo:
            return memo[key]
        kids = children(node)
        out = node
        if kids:
            new = tuple(go(k) for k in kids)
            if any(a is not b for a, b in zip(new, kids)):
                out = rebuild(node, new)
        rewritten = _divmod_rewrite(out, env)
        out = rewritten if rewritten is not None else out
        memo[key] = out
        return out

    return go(e)
