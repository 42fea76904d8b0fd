"""Symbolic integer intervals for bound inference (TVM's IntervalSet, simplified).

    interval(e, env)    -> Interval(lo, extent) | None     env: Var -> Interval
    union([...])        -> Interval | None
    const_range(e, env) -> (lo, hi) | None                 both ends constants

An ``Interval(lo, extent)`` is the integer set ``[lo, lo + extent)`` where ``lo`` is a
symbolic Expr (in the variables that stay fixed) and ``extent`` is, whenever possible, a
constant.  ``interval(e, env)`` evaluates an index expression where the variables in ``env``
range over intervals and every other variable is a fixed point.  ``None`` means "not
analysable": the caller falls back to the whole dimension.  The idea is TVM's
src/arith/int_set.cc (``IntervalSetEvaluator``); constant ranges come from
:func:`scheduler_core.arith.const_int_bound.const_int_bound` first.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from scheduler_core.ir.expr import BinaryOp, Cast, CheckedIndex, Expr, FloatImm, IntImm, Var, as_expr, is_float
from scheduler_core.ir.expr_functor import walk
from scheduler_core.ir.simplify import const_value, simplify

from .const_int_bound import DTYPE_RANGE, const_int_bound
from .linear_form import canonical, const_diff


@dataclass(frozen=True)
class Interval:
    """The integers ``lo .. lo + extent - 1`` (``lo``, ``extent``: int Exprs)."""

    lo: Expr
    extent: Expr

    @property
    def const_extent(self) -> int | None:
        """The extent if it is a constant, else None."""
        v = const_value(self.extent)
        return v if isinstance(v, int) else None

    @property
    def const_bounds(self) -> tuple[int, int] | None:
        """``(lo, hi)`` (both included) if both ends are constants, else None."""
        lo = const_value(self.lo)
        ext = self.const_extent
        if not isinstance(lo, int) or ext is None:
            return None
        return lo, lo + ext - 1


class Infeasible(Exception):
    """The constraints on a set of integers leave it empty (e.g. the guards of an access
    cannot all hold)."""


def intersect_bounds(r: tuple, bounds: tuple) -> tuple:
    """``(lo, hi)`` ``r`` cut to ``bounds`` (either end None: unbounded).

    Raises Infeasible when the intersection is empty."""
    a = r[0] if bounds[0] is None else (bounds[0] if r[0] is None else max(r[0], bounds[0]))
    b = r[1] if bounds[1] is None else (bounds[1] if r[1] is None else min(r[1], bounds[1]))
    if a is not None and b is not None and a > b:
        raise Infeasible
    return a, b


def point(e: Expr) -> Interval:
    """The interval holding the one value ``e``."""
    return Interval(e, IntImm(1))


def range_interval(lo: int, hi: int) -> Interval:
    """The interval ``lo .. hi`` (both included) of constants."""
    return Interval(IntImm(lo), IntImm(hi - lo + 1))


class EnvBounds(Mapping):
    """``env`` (Var -> Interval) seen as the variable mapping of :func:`const_int_bound`:
    ``Var -> (lo, hi)`` for an interval with constant ends, ``Var -> None`` for the others.
    A view: nothing is converted until asked."""

    def __init__(self, env: dict):
        self.env = env

    def __contains__(self, v: object) -> bool:
        return v in self.env

    def __getitem__(self, v: Var) -> tuple | None:
        r = self.env[v]
        if isinstance(r.lo, IntImm) and isinstance(r.extent, IntImm):
            return r.lo.value, r.lo.value + r.extent.value - 1
        return None

    def __iter__(self) -> Iterator:
        return iter(self.env)

    def __len__(self) -> int:
        return len(self.env)


def const_range(e: Expr, env: dict) -> tuple | None:
    """``(lo, hi)`` of ``e`` when its variables range over ``env``; None unless both ends are
    constants.  Constant bounds (:func:`const_int_bound`, variables outside ``env`` unknown)
    first, then the symbolic :func:`interval` (a variable outside ``env`` is a fixed point)."""
    fast = const_int_bound(e, EnvBounds(env))
    if fast is not None:
        return fast
    r = interval(e, env)
    return None if r is None else r.const_bounds


# ---------------------------------------------------------------------------
# Interval evaluation
# ---------------------------------------------------------------------------

def _add(x: Interval, y: Interval) -> Interval:
    return Interval(canonical(x.lo + y.lo), simplify(x.extent + y.extent - 1))


def _scale(x: Interval, c: int) -> Interval:
    if c >= 0:
        return Interval(canonical(x.lo * c), simplify((x.extent - 1) * c + 1))
    return Interval(canonical((x.lo + x.extent - 1) * c), simplify((x.extent - 1) * (-c) + 1))


def _cast(e: Cast, env: dict) -> Interval | None:
    """A cast to an integer dtype: the value's interval if it provably fits the dtype (or the
    cast cannot narrow), the whole dtype if it provably does not, else None."""
    if is_float(e.dtype) or e.dtype not in DTYPE_RANGE:
        return None
    v = interval(e.value, env)
    if v is None:
        return None
    target = DTYPE_RANGE[e.dtype]
    b = v.const_bounds
    if b is not None:
        return v if target[0] <= b[0] and b[1] <= target[1] else range_interval(*target)
    src = e.value.dtype
    widening = src in DTYPE_RANGE and DTYPE_RANGE[src][0] >= target[0] and DTYPE_RANGE[src][1] <= target[1]
    return v if widening else None


_ABSENT = object()  # env.get's default: the point interval is made only when needed


def interval(e: Expr, env: dict) -> Interval | None:
    """The set of values of int expression ``e`` when each Var in ``env`` ranges over its
    Interval (other variables are fixed points); None when not analysable."""
    t = type(e)
    if t is Var:  # the common leaf first (exact class: the node classes are final)
        r = env.get(e, _ABSENT)
        return point(e) if r is _ABSENT else r
    if t is not BinaryOp:
        e = as_expr(e)
    if isinstance(e, IntImm):
        return point(e)
    if isinstance(e, Var):
        r = env.get(e, _ABSENT)
        return point(e) if r is _ABSENT else r
    if isinstance(e, Cast):
        return _cast(e, env)
    if isinstance(e, CheckedIndex):  # clamped to [0, extent) at run time
        return Interval(IntImm(0), e.extent)
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
        return _mul(a, b)
    if e.op in ("floordiv", "floormod"):
        return _divmod(e.op, a, b)
    if e.op in ("min", "max"):
        return _min_max(e.op, a, b)
    return None


def _mul(a: Interval, b: Interval) -> Interval | None:
    cb = const_value(b.lo) if b.const_extent == 1 else None
    ca = const_value(a.lo) if a.const_extent == 1 else None
    if isinstance(cb, int):
        return _scale(a, cb)
    if isinstance(ca, int):
        return _scale(b, ca)
    return None


def _divmod(op: str, a: Interval, b: Interval) -> Interval | None:
    c = const_value(b.lo) if b.const_extent == 1 else None
    if not isinstance(c, int) or c <= 0:
        return None
    w = a.const_extent
    if w is None:
        return None
    lo_c = const_value(a.lo)
    if op == "floordiv":
        if isinstance(lo_c, int):
            lo, hi = lo_c // c, (lo_c + w - 1) // c
            return range_interval(lo, hi)
        return Interval(canonical(a.lo // c), IntImm((w - 1 + c - 1) // c + 1))
    if isinstance(lo_c, int) and (lo_c // c) == ((lo_c + w - 1) // c):
        return Interval(IntImm(lo_c % c), IntImm(w))
    return Interval(IntImm(0), IntImm(c))


def _min_max(op: str, a: Interval, b: Interval) -> Interval | None:
    d = const_diff(a.lo, b.lo)
    ea, eb = a.const_extent, b.const_extent
    if d is None or ea is None or eb is None:
        return None
    # Relative to b.lo, a spans [d, d + ea - 1] and b spans [0, eb - 1].
    pick = min if op == "min" else max
    lo_rel = pick(d, 0)
    hi_rel = pick(d + ea - 1, eb - 1)
    return Interval(canonical(b.lo + lo_rel), IntImm(max(hi_rel - lo_rel + 1, 1)))


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


__all__ = ["Infeasible", "Interval", "EnvBounds", "const_range", "intersect_bounds", "interval", "point",
           "range_interval", "union"]
