"""The exact range of an integer expression under constraints, by enumerating its variables.

    enumerated_range(e, env, constraints, limit)  -> (lo, hi) | None   (raises Infeasible)

Every point of the variables of ``e`` (and of the constraints that share a variable with it,
transitively) is evaluated at once with numpy (one broadcast axis per variable), casts wrap as
the compiled code does, and the values where the constraints hold give the range.  This is the
brute-force counterpart of the analyses of this package (no TVM analogue: TVM proves or gives
up), used when the variables span few points.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from scheduler_core.ir.expr import BinaryOp, Cast, Expr, IntImm, Var, is_float
from scheduler_core.ir.expr_functor import free_vars

from .divmod_form import const_divisor
from .int_set import Infeasible

_NUMPY_INT = {"int8": np.int8, "int16": np.int16, "int32": np.int32, "uint8": np.uint8,
              "uint16": np.uint16, "uint32": np.uint32}
_BINARY = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "floordiv": np.floor_divide,
           "floormod": np.remainder, "min": np.minimum, "max": np.maximum}


def enumerated_range(e: Expr, env: dict, constraints: list, limit: int) -> tuple | None:
    """The exact range ``(lo, hi)`` of ``e`` where ``constraints`` hold.

    Parameters
    ----------
    e : Expr, integer arithmetic (add, sub, mul, min, max, floordiv/floormod by a positive
        constant, integer casts) of variables
    env : dict, Var -> Interval; each variable enumerated needs constant ends
    constraints : list of ``(terms, lo, hi)``: ``lo <= sum(coef * atom) <= hi`` (None:
        unbounded); those sharing a variable with ``e`` (transitively) are applied, those
        that cannot be evaluated are left out (more points: the range still holds)
    limit : int, the most points enumerated

    Returns None when a variable has no constant range, there are more than ``limit`` points,
    or ``e`` is not integer arithmetic of the variables.  Raises Infeasible when no point
    satisfies the constraints.
    """
    used, order = _variables(e, constraints)
    values = _axes(order, env, limit)
    if values is None:
        return None

    def ev(n: Expr):
        key = id(n)
        if key not in values:
            values[key] = _evaluate(n, ev)
        return values[key]

    x = ev(e)
    if x is None:
        return None
    mask = np.ones([1] * len(order), dtype=bool)
    for n, (terms, lo, hi) in enumerate(constraints):
        if used[n]:
            mask = _apply(mask, terms, lo, hi, ev)
    shape = np.broadcast_shapes(np.shape(x), mask.shape)
    mask = np.broadcast_to(mask, shape)
    if not mask.any():
        raise Infeasible
    picked = np.broadcast_to(x, shape)[mask]
    return int(picked.min()), int(picked.max())


def _variables(e: Expr, constraints: list) -> tuple:
    """Which constraints share a variable with ``e`` (transitively), and the variables."""
    names = set(free_vars(e))
    g_vars = [{v for atom, _ in terms.values() for v in free_vars(atom)} for terms, _, _ in constraints]
    used = [False] * len(constraints)
    grown = True
    while grown:
        grown = False
        for n, vs in enumerate(g_vars):
            if not used[n] and vs & names:
                used[n], grown = True, True
                names |= vs
    return used, sorted(names, key=lambda v: v.name)


def _axes(order: list, env: dict, limit: int) -> dict | None:
    """``id(var) -> its values`` along its own broadcast axis; None past ``limit`` points."""
    points = 1
    values: dict = {}
    for n, v in enumerate(order):
        r = env[v].const_bounds if v in env else None
        if r is None:
            return None
        points *= r[1] - r[0] + 1
        if points > limit:
            return None
        axis = [1] * len(order)
        axis[n] = r[1] - r[0] + 1
        values[id(v)] = np.arange(r[0], r[1] + 1, dtype=np.int64).reshape(axis)
    return values


def _apply(mask: np.ndarray, terms: dict, lo, hi, ev: Callable) -> np.ndarray:
    parts = [ev(atom) for atom, _ in terms.values()]
    if any(p is None for p in parts) or \
            sum(abs(int(c)) * int(np.abs(p).max()) for (_, c), p in zip(terms.values(), parts)) >= 1 << 62:
        return mask
    total = sum(int(c) * p for (_, c), p in zip(terms.values(), parts))
    if lo is not None:
        mask = mask & (total >= lo)
    if hi is not None:
        mask = mask & (total <= hi)
    return mask


def _cast(dtype: str, a: np.ndarray) -> np.ndarray | None:
    """The integer cast as the compiled code does it (two's complement wrap-around)."""
    if dtype in ("int64",):
        return a
    if dtype == "bool":
        return (a != 0).astype(np.int64)
    if dtype in _NUMPY_INT:
        return np.asarray(a).astype(_NUMPY_INT[dtype]).astype(np.int64)
    if dtype == "uint64" and int(np.min(a)) >= 0:
        return a
    return None


def _evaluate(e: Expr, ev: Callable):
    """``e`` over numpy arrays of its variables' values (``ev`` evaluates a child); None
    for anything but integer arithmetic (``floordiv``/``floormod`` by positive constants)."""
    if isinstance(e, IntImm):
        return np.int64(e.value)
    if isinstance(e, Var):
        return None  # not among the enumerated variables
    if isinstance(e, Cast) and not is_float(e.dtype) and not is_float(e.value.dtype):
        a = ev(e.value)
        return None if a is None else _cast(e.dtype, a)
    if not isinstance(e, BinaryOp) or is_float(e.dtype):
        return None
    if e.op in ("floordiv", "floormod") and const_divisor(e) is None:
        return None
    a, b = ev(e.a), ev(e.b)
    if a is None or b is None:
        return None
    big_a, big_b = int(np.abs(a).max()), int(np.abs(b).max())
    if (big_a * big_b if e.op == "mul" else big_a + big_b) >= 1 << 62:
        return None  # int64 could wrap around
    fn = _BINARY.get(e.op)
    return None if fn is None else fn(a, b)


__all__ = ["enumerated_range"]
