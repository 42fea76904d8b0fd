"""Constant integer ranges of the CUDA printer: which int32 nodes may leave int32.

    expr_range(e, env, memo) -> (lo, hi) or None      (env: Var -> (lo, hi) or None)

The CUDA code generator computes an integer node in ``long long`` when its value range
may leave int32, and prints ``floordiv``/``floormod`` as C's ``/`` and ``%`` where both
operands are provably non-negative.  The ranges are ``arith.const_int_bound`` (TVM's
``ConstIntBoundAnalyzer``, src/arith/const_int_bound.cc) with the printer's policy for what
it does not bound: a variable the printer never bound, a load or a call ranges over its
whole dtype (TVM's ``Everything(dtype)``); a variable bound to None has no range.
"""

from __future__ import annotations

from scheduler_core.arith.const_int_bound import DTYPE_RANGE, const_int_bound, fits
from scheduler_core.ir import expr as E

__all__ = ["INT32_MIN", "INT32_MAX", "INT_RANGE", "fits32", "expr_range"]

INT32_MIN, INT32_MAX = DTYPE_RANGE["int32"]
INT_RANGE = DTYPE_RANGE  # dtype -> (lo, hi): every value of each integer dtype (and bool)


def fits32(r: tuple | None) -> bool:
    """Whether the range ``r`` (None: unknown) lies inside int32."""
    return fits(r, "int32")


def _whole_dtype(e: E.Expr) -> tuple | None:
    return DTYPE_RANGE.get(e.dtype)


def expr_range(e: E.Expr, env: dict, memo: dict) -> tuple | None:
    """``(lo, hi)`` bounds of an integer expression, or None when unknown.

    env: Var -> its range (or None: unknown); a Var not in ``env`` ranges over its dtype.
    memo: id(node) -> (node, range), kept by the caller and cleared when ``env`` changes
    (the node is kept alive in it, so its id is not reused)."""
    return const_int_bound(e, env, _whole_dtype, memo)
