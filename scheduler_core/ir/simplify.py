"""Simplification of expressions: constant folding and algebraic identities.

``simplify`` folds constants and drops identities (``x*1``, ``x+0``,
``floordiv(x, 1)``...), enough for readable lowered programs; bound-aware
rewrites (``floordiv(j0*16 + j1, 16) -> j0``) are in ``scheduler_core.arith.divmod_form.simplify_divmod``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from .expr import (
    BinaryOp,
    Cast,
    CmpOp,
    Expr,
    FloatImm,
    IntImm,
    IterVar,
    LogicalOp,
    Not,
    Select,
    Var,
    as_expr,
    const,
    is_float,
)
from .expr_functor import children, rebuild, same_children

# ---------------------------------------------------------------------------
# Simplification (constant folding and identities; enough for readable IR)
# ---------------------------------------------------------------------------

_MAX_FOLD_BITS = 128  # integer results wider than this stay unfolded (hostile nested pow)


def _fold(op: str, x, y):
    if op == "add": return x + y
    if op == "sub": return x - y
    if op == "mul": return x * y
    if op == "div": return x / y if y != 0 else None
    if op == "floordiv": return x // y if y != 0 else None
    if op == "floormod": return x % y if y != 0 else None
    if op == "min": return min(x, y)
    if op == "max": return max(x, y)
    if op == "pow":
        if isinstance(x, int) and isinstance(y, int) and abs(x) > 1 and y * x.bit_length() > _MAX_FOLD_BITS:
            return None
        try:
            v = x ** y
        except (OverflowError, ZeroDivisionError):
            return None
        return None if isinstance(v, complex) else v
    return None


def _cmp_fold(op: str, x, y) -> bool:
    return {"eq": x == y, "ne": x != y, "lt": x < y, "le": x <= y, "gt": x > y, "ge": x >= y}[op]


def is_const(e: Any, value: Any = None) -> bool:
    if not isinstance(e, (IntImm, FloatImm)):
        return False
    return value is None or e.value == value


def _simplify_binary(n: BinaryOp) -> Expr:
    """:func:`_simplify_node` of a ``BinaryOp`` (constant tests by exact class: the node
    classes are final)."""
    a: Any = n.a  # Any: narrowed by exact class below, which mypy does not follow
    b: Any = n.b
    op = n.op
    ta, tb = type(a), type(b)
    a_const = ta is IntImm or ta is FloatImm
    b_const = tb is IntImm or tb is FloatImm
    if a_const and b_const:
        v = _fold(op, a.value, b.value)
        if v is not None:
            if type(v) is int and v.bit_length() <= _MAX_FOLD_BITS and not is_float(n.dtype):
                # integers wrap, as in the reference evaluator and the compiled code
                return IntImm(wrap_int(v, n.dtype), n.dtype)
            if is_float(n.dtype) or (isinstance(v, int) and v.bit_length() <= _MAX_FOLD_BITS):
                return const(v, n.dtype)
    if op == "add":
        if a_const and a.value == 0: return b
        if b_const and b.value == 0: return a
        # (x + c1) + c2 -> x + (c1 + c2)
        if tb is IntImm and ta is BinaryOp and a.op == "add" and type(a.b) is IntImm:
            return _simplify_binary(BinaryOp("add", a.a, IntImm(a.b.value + b.value, n.dtype), n.dtype))
    elif op == "mul":
        if a_const and a.value == 1: return b
        if b_const and b.value == 1: return a
        if not is_float(n.dtype) and ((a_const and a.value == 0) or (b_const and b.value == 0)):
            return IntImm(0, n.dtype)
        if tb is IntImm and ta is BinaryOp and a.op == "mul" and type(a.b) is IntImm:
            return BinaryOp("mul", a.a, IntImm(a.b.value * b.value, n.dtype), n.dtype)
    elif op == "sub":
        if b_const and b.value == 0: return a
        if a is b and not is_float(n.dtype): return IntImm(0, n.dtype)
        if tb is IntImm and ta is BinaryOp and a.op == "add" and type(a.b) is IntImm:
            return _simplify_binary(BinaryOp("add", a.a, IntImm(a.b.value - b.value, n.dtype), n.dtype))
    elif op == "floordiv" or op == "div":
        if b_const and b.value == 1: return a
        if op == "floordiv" and a_const and a.value == 0: return a
    elif op == "floormod":
        if b_const and b.value == 1: return IntImm(0, n.dtype)
        if a_const and a.value == 0: return a
    elif (op == "min" or op == "max") and a is b:
        return a
    return n


def _simplify_node(n: Expr) -> Expr:
    if type(n) is BinaryOp:  # the common case, by exact class
        return _simplify_binary(n)
    if isinstance(n, BinaryOp):
        return _simplify_binary(n)
    if isinstance(n, CmpOp):
        if isinstance(n.a, (IntImm, FloatImm)) and isinstance(n.b, (IntImm, FloatImm)):
            return IntImm(int(_cmp_fold(n.op, n.a.value, n.b.value)), "bool")
        return n
    if isinstance(n, LogicalOp):
        a, b = n.a, n.b
        if n.op == "and":
            if is_const(a, 1): return b
            if is_const(b, 1): return a
            if is_const(a, 0) or is_const(b, 0): return IntImm(0, "bool")
        else:
            if is_const(a, 0): return b
            if is_const(b, 0): return a
            if is_const(a, 1) or is_const(b, 1): return IntImm(1, "bool")
        return n
    if isinstance(n, Not) and isinstance(n.a, IntImm):
        return IntImm(int(not n.a.value), "bool")
    if isinstance(n, Select) and isinstance(n.cond, IntImm):
        return n.true_value if n.cond.value else n.false_value
    if isinstance(n, Cast) and isinstance(n.value, (IntImm, FloatImm)):
        v = n.value.value
        if is_float(n.dtype):
            return FloatImm(float(v), n.dtype)
        if n.dtype == "bool":
            return IntImm(int(bool(v)), "bool")
        if isinstance(v, float) and not math.isfinite(v):
            return n  # inf/nan have no integer value
        return IntImm(wrap_int(int(math.trunc(v)), n.dtype), n.dtype)
    return n


def wrap_int(v: int, dtype: str) -> int:
    """``v`` as the integer ``dtype`` holds it: two's-complement wrap-around, as the compiled code
    and the reference evaluator (``uint8(-64)`` is 192, ``int8(200)`` is -56)."""
    bits = {"int8": 8, "int16": 16, "int32": 32, "int64": 64,
            "uint8": 8, "uint16": 16, "uint32": 32, "uint64": 64}.get(dtype)
    if bits is None:
        return v
    v &= (1 << bits) - 1
    if not dtype.startswith("u") and v >= 1 << (bits - 1):
        v -= 1 << bits
    return v


_LEAF_TYPES = frozenset((IntImm, FloatImm, Var))


def simplify(e: Expr) -> Expr:
    """Fold constants and drop identities (``x*1``, ``x+0``, ``floordiv(x, 1)``...)."""
    t = type(e)
    if t is IntImm or t is Var or t is FloatImm:  # a leaf has nothing to fold
        return e
    return _simplify_rec(e, {})  # id(node) -> its simplified form (a node shared in e: once)


# The recursions below are module functions that take their memo, not closures that call
# themselves: such a closure is a reference cycle (function -> cell -> function) that keeps
# its memo alive until the cyclic collector runs, and in the search that garbage made the
# collector take a quarter of the lowering time.
def _simplify_rec(node: Any, memo: dict) -> Expr:  # Any: dispatched on its exact class
    t = type(node)
    if t in _LEAF_TYPES:
        return node
    key = id(node)
    out = memo.get(key)  # never None: a memo value is an Expr
    if out is not None:
        return out
    if t is BinaryOp:  # the common interior node, inline (and its leaf children)
        a, b = node.a, node.b
        na = a if type(a) in _LEAF_TYPES else _simplify_rec(a, memo)
        nb = b if type(b) in _LEAF_TYPES else _simplify_rec(b, memo)
        out = _simplify_binary(node if na is a and nb is b else BinaryOp(node.op, na, nb, node.dtype))
    else:
        kids = children(node)
        if kids:
            new = tuple([_simplify_rec(k, memo) for k in kids])
            out = _simplify_node(node if same_children(new, kids) else rebuild(node, new))
        else:
            out = node
    memo[key] = out
    return out


def const_value(e: Any) -> int | float | None:
    """The Python value of ``e`` if it simplifies to a constant, else ``None``."""
    t = type(e)
    if t is IntImm or t is FloatImm:  # the common cases, answered without simplifying
        return e.value
    if t is Var:
        return None
    if isinstance(e, (int, float)):
        return e
    if isinstance(e, (IntImm, FloatImm)):
        return e.value
    if isinstance(e, (IterVar, Var)):
        return None
    s = simplify(as_expr(e))
    if isinstance(s, (IntImm, FloatImm)):
        return s.value
    return None




def ceildiv(a: Any, b: Any) -> Expr:
    """``ceil(a / b)`` for non-negative ints, folded at once when both are constants."""
    if type(a) is IntImm:  # the common cases first, by exact class
        tb = type(b)
        if tb is IntImm:
            return IntImm((a.value + b.value - 1) // b.value, a.dtype)
        if tb is int:
            return IntImm((a.value + b - 1) // b, a.dtype)
    if isinstance(a, IntImm) and isinstance(b, (IntImm, int)):
        bv = b.value if isinstance(b, IntImm) else b
        return IntImm((a.value + bv - 1) // bv, a.dtype)
    if isinstance(a, int) and isinstance(b, int):
        return IntImm((a + b - 1) // b)
    eb = as_expr(b)
    return simplify((as_expr(a) + (eb - 1)) // eb)


def product(xs: Iterable[Any]) -> Expr:
    """The product of ints/Exprs, folding the constant part without building nodes."""
    c, rest = 1, []
    for x in xs:
        if isinstance(x, int):
            c *= x
        elif isinstance(x, IntImm):
            c *= x.value
        else:
            rest.append(as_expr(x))
    if not rest:
        return IntImm(c)
    out = rest[0]
    for r in rest[1:]:
        out = out * r
    return simplify(out * c) if c != 1 else simplify(out)
