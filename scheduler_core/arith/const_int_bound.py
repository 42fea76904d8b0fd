"""Constant integer bounds of an integer expression (TVM's ConstIntBound).

    const_int_bound(e, var_bounds, unknown=None)  ->  ConstIntBound(min_value, max_value) | None

Each variable ranges over a constant interval (``var_bounds``); the result holds every value
``e`` takes (it may be wider than the exact range, never narrower).  Arithmetic is exact
integer arithmetic (as in TVM, ``add``/``sub``/``mul`` are assumed not to overflow their
dtype); a ``Cast`` to an integer dtype of a range that does not fit that dtype is the whole
range of the dtype (the value wraps), and a cast that fits keeps the range.  Division by a
divisor whose range holds 0 assumes the divisor is not 0 (division by zero is undefined);
a divisor that is always 0 gives no bound.

Idea and rules from TVM src/arith/const_int_bound.cc (``BinaryOpBoundary`` over the corners
of the operands' ranges, ``HandleFloorDivision``, the floormod rules, ``Everything(dtype)``),
with the one-period refinement of ``floormod(a, c)`` (``a`` within one period of ``c``:
``(a.min % c, a.max % c)``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import NamedTuple

from scheduler_core.ir.expr import (
    BinaryOp,
    Cast,
    CheckedIndex,
    CmpOp,
    Expr,
    IntImm,
    LogicalOp,
    Not,
    Select,
    Var,
    is_float,
)


class ConstIntBound(NamedTuple):
    """The closed integer range ``min_value .. max_value`` (a tuple, so ``lo, hi = b`` works)."""

    min_value: int
    max_value: int


# Every value an integer dtype holds (TVM's Everything(dtype)); bool is 0 or 1.
DTYPE_RANGE: dict[str, ConstIntBound] = {
    "bool": ConstIntBound(0, 1),
    **{f"int{b}": ConstIntBound(-(1 << (b - 1)), (1 << (b - 1)) - 1) for b in (8, 16, 32, 64)},
    **{f"uint{b}": ConstIntBound(0, (1 << b) - 1) for b in (8, 16, 32, 64)},
}

Unknown = Callable[[Expr], "ConstIntBound | tuple | None"]


def dtype_range(dtype: str) -> ConstIntBound | None:
    """Every value of the integer (or bool) ``dtype``; None for a float dtype."""
    return DTYPE_RANGE.get(dtype)


def fits(bound: tuple | None, dtype: str) -> bool:
    """Whether every value of ``bound`` (``(lo, hi)``; None: unknown) fits ``dtype``."""
    r = DTYPE_RANGE.get(dtype)
    return bound is not None and r is not None and r[0] <= bound[0] and bound[1] <= r[1]


def const_int_bound(e: Expr, var_bounds: Mapping, unknown: Unknown | None = None,
                    memo: dict | None = None) -> ConstIntBound | None:
    """The constant range of the integer expression ``e``, or None when it has none.

    Parameters
    ----------
    e : Expr, an integer (or bool) expression
    var_bounds : Mapping ``Var -> (lo, hi)`` (a ConstIntBound or a pair of ints, both
        ends included), or ``Var -> None`` for a variable known to have no constant range
        (its uses give None)
    unknown : called with each node the analysis does not bound itself (a variable missing
        from ``var_bounds``, a load, a call, a float operation, a division by a divisor that
        is always 0); returns its range or None.  Default: None for all.
    memo : optional ``id(node) -> (node, bound)`` cache shared between calls with the same
        ``var_bounds`` and ``unknown`` (it keeps the nodes alive, so ids stay unique)

    Returns None when a sub-expression has no range; never raises for a well-formed ``e``.
    Source: TVM src/arith/const_int_bound.cc (see the module docstring for the rules).
    """
    r = _Bounder(var_bounds, unknown, memo).bound(e)
    return None if r is None else ConstIntBound(int(r[0]), int(r[1]))


class _Bounder:
    """One evaluation of :func:`const_int_bound` (the bindings, the fallback, the memo).
    Ranges are plain ``(lo, hi)`` tuples inside; only the result is a ConstIntBound."""

    def __init__(self, var_bounds: Mapping, unknown: Unknown | None, memo: dict | None):
        self.var_bounds, self.unknown, self.memo = var_bounds, unknown, memo

    def bound(self, e: Expr) -> tuple | None:
        memo = self.memo
        if memo is None:
            return self._visit(e)
        hit = memo.get(id(e))
        if hit is not None and hit[0] is e:
            return hit[1]
        r = self._visit(e)
        memo[id(e)] = (e, r)
        return r

    def fallback(self, e: Expr) -> tuple | None:
        return None if self.unknown is None else self.unknown(e)

    def _visit(self, e: Expr) -> tuple | None:
        if isinstance(e, IntImm):
            return e.value, e.value
        if isinstance(e, Var):
            return self.var_bounds[e] if e in self.var_bounds else self.fallback(e)
        if isinstance(e, (CmpOp, LogicalOp, Not)):
            return 0, 1
        if isinstance(e, Select):
            a, b = self.bound(e.true_value), self.bound(e.false_value)
            return None if a is None or b is None else (min(a[0], b[0]), max(a[1], b[1]))
        if isinstance(e, Cast):
            return self._cast(e)
        if isinstance(e, CheckedIndex):  # clamped to [0, extent) at run time
            n = self.bound(e.extent)
            return None if n is None or n[1] < 1 else (0, n[1] - 1)
        if isinstance(e, BinaryOp) and not is_float(e.dtype) and e.op in _BINARY:
            a = self.bound(e.a)
            b = None if a is None else self.bound(e.b)
            if a is None or b is None:
                return None
            r = _BINARY[e.op](a, b)
            return self.fallback(e) if r is _NO_VALUE else r
        return self.fallback(e)

    def _cast(self, e: Cast) -> tuple | None:
        target = DTYPE_RANGE.get(e.dtype)
        if target is None or is_float(e.value.dtype):
            return self.fallback(e)
        v = self.bound(e.value)
        if v is None:
            return self.fallback(e)
        if e.dtype == "bool":  # x != 0
            if v[0] > 0 or v[1] < 0:
                return 1, 1
            return (0, 0) if v == (0, 0) else (0, 1)
        return v if target[0] <= v[0] and v[1] <= target[1] else target


_NO_VALUE = ConstIntBound(1, 0)  # marks "no bound here": the fallback decides


def _corners(fn: Callable[[int, int], int], a: tuple, b: tuple) -> tuple:
    """TVM's BinaryOpBoundary: ``fn`` is monotone in each argument on these ranges."""
    vals = (fn(a[0], b[0]), fn(a[0], b[1]), fn(a[1], b[0]), fn(a[1], b[1]))
    return min(vals), max(vals)


def _trunc_div(x: int, y: int) -> int:
    q = abs(x) // abs(y)
    return q if (x >= 0) == (y >= 0) else -q


def _division(fn: Callable[[int, int], int], a: tuple, b: tuple) -> tuple:
    """``fn(a, b)`` (floor or truncating division) for b != 0 (TVM's HandleFloorDivision)."""
    if b[0] <= 0 <= b[1]:
        if b == (0, 0):
            return _NO_VALUE
        parts = [_corners(fn, a, s) for s in ((b[0], -1), (1, b[1])) if s[0] <= s[1]]
        return min(p[0] for p in parts), max(p[1] for p in parts)
    return _corners(fn, a, b)


def _floormod(a: tuple, b: tuple) -> tuple:
    """TVM's FloorMod rule: ``[0, b.max - 1]`` for a positive divisor, ``[b.min + 1, 0]`` for a
    negative one; one period of a constant divisor gives the exact range."""
    if b[0] == b[1] and b[0] != 0 and a[0] // b[0] == a[1] // b[0]:
        return a[0] % b[0], a[1] % b[0]
    if b[0] > 0:
        if a[0] >= 0:
            return a if a[1] < b[0] else (0, min(a[1], b[1] - 1))
        return 0, b[1] - 1
    if b == (0, 0):
        return _NO_VALUE
    return min(0, b[0] + 1), max(0, b[1] - 1)


_BINARY: dict[str, Callable[[tuple, tuple], tuple]] = {
    "add": lambda a, b: (a[0] + b[0], a[1] + b[1]),
    "sub": lambda a, b: (a[0] - b[1], a[1] - b[0]),
    "mul": lambda a, b: _corners(lambda x, y: x * y, a, b),
    "min": lambda a, b: (min(a[0], b[0]), min(a[1], b[1])),
    "max": lambda a, b: (max(a[0], b[0]), max(a[1], b[1])),
    "floordiv": lambda a, b: _division(lambda x, y: x // y, a, b),
    "div": lambda a, b: _division(_trunc_div, a, b),
    "floormod": _floormod,
}


__all__ = ["ConstIntBound", "DTYPE_RANGE", "const_int_bound", "dtype_range", "fits"]
