"""Generic traversal and rewriting of expression trees (TVM's ExprFunctor/ExprMutator).

    children(e) / walk(e)          read: direct sub-expressions, pre-order iteration
    rebuild / transform / substitute   write: copy-on-change rewrites (nodes are immutable)
    free_vars, depth, structural_equal, iter_exprs, reduce_identity   queries
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from collections.abc import Iterator as PyIterator
from operator import attrgetter
from typing import Any

import numpy as np

from scheduler_core.base.errors import InvalidWorkloadError

from .expr import (
    BinaryOp,
    Broadcast,
    BufferLoad,
    Call,
    Cast,
    CheckedIndex,
    CmpOp,
    Expr,
    FloatImm,
    IntImm,
    IterVar,
    LogicalOp,
    Not,
    Ramp,
    Reduce,
    Select,
    TensorLoad,
    Var,
    as_expr,
    const,
    is_float,
)

# ---------------------------------------------------------------------------
# Generic traversal
# ---------------------------------------------------------------------------

def _children_of_node(e: Expr) -> tuple:
    """:func:`children` by ``isinstance`` tests: the path for a type outside ``_CHILDREN``."""
    if isinstance(e, (BinaryOp, CmpOp, LogicalOp)):
        return (e.a, e.b)
    if isinstance(e, Not):
        return (e.a,)
    if isinstance(e, Select):
        return (e.cond, e.true_value, e.false_value)
    if isinstance(e, Cast):
        return (e.value,)
    if isinstance(e, Call):
        return e.args
    if isinstance(e, TensorLoad):
        return e.indices
    if isinstance(e, Reduce):
        return (e.source,) if e.condition is None else (e.source, e.condition)
    if isinstance(e, Ramp):
        return (e.base, e.stride)
    if isinstance(e, Broadcast):
        return (e.value,)
    if isinstance(e, BufferLoad):
        return (e.index,)
    if isinstance(e, CheckedIndex):
        return (e.value, e.extent)
    return ()


# children by the exact node class (one dict look-up instead of a chain of isinstance tests;
# the node classes are final): _NO_CHILDREN for a leaf, else a function of the node.
_NO_CHILDREN: tuple = ()
_CHILDREN: dict[type, Any] = {
    IntImm: _NO_CHILDREN, FloatImm: _NO_CHILDREN, Var: _NO_CHILDREN,
    BinaryOp: attrgetter("a", "b"), CmpOp: attrgetter("a", "b"), LogicalOp: attrgetter("a", "b"),
    Not: lambda e: (e.a,),
    Select: attrgetter("cond", "true_value", "false_value"),
    Cast: lambda e: (e.value,),
    Call: attrgetter("args"),
    TensorLoad: attrgetter("indices"),
    Reduce: lambda e: (e.source,) if e.condition is None else (e.source, e.condition),
    Ramp: attrgetter("base", "stride"),
    Broadcast: lambda e: (e.value,),
    BufferLoad: lambda e: (e.index,),
    CheckedIndex: attrgetter("value", "extent"),
}


def children(e: Expr) -> tuple:
    """The direct sub-expressions of ``e`` (reduce axes are not expressions)."""
    f = _CHILDREN.get(type(e))
    if f is None:
        return _children_of_node(e)
    return f if f is _NO_CHILDREN else f(e)


def walk(e: Expr) -> PyIterator[Expr]:
    """Pre-order iteration over every node of ``e`` (iterative, no recursion limit)."""
    stack = [e]
    pop, push = stack.pop, stack.append
    while stack:
        node: Any = pop()  # Any: dispatched on its exact class
        yield node
        t = type(node)
        if t is BinaryOp or t is CmpOp or t is LogicalOp:  # the common interior nodes, inline
            push(node.b)
            push(node.a)
        elif t is not IntImm and t is not Var and t is not FloatImm:
            kids = children(node)
            if kids:
                stack.extend(reversed(kids))


def _rebuild_node(e: Expr, new_children: tuple) -> Expr:
    """:func:`rebuild` by ``isinstance`` tests: the path for a type outside ``_REBUILD``."""
    if isinstance(e, BinaryOp):
        return BinaryOp(e.op, new_children[0], new_children[1], e.dtype)
    if isinstance(e, CmpOp):
        return CmpOp(e.op, new_children[0], new_children[1])
    if isinstance(e, LogicalOp):
        return LogicalOp(e.op, new_children[0], new_children[1])
    if isinstance(e, Not):
        return Not(new_children[0])
    if isinstance(e, Select):
        return Select(new_children[0], new_children[1], new_children[2], e.dtype)
    if isinstance(e, Cast):
        return Cast(new_children[0], e.dtype)
    if isinstance(e, Call):
        return Call(e.name, tuple(new_children), e.dtype)
    if isinstance(e, TensorLoad):
        return TensorLoad(e.tensor, tuple(new_children), e.dtype)
    if isinstance(e, Reduce):
        cond = new_children[1] if len(new_children) > 1 else None
        return Reduce(e.combiner, new_children[0], e.axis, cond, e.dtype)
    if isinstance(e, Ramp):
        return Ramp(new_children[0], new_children[1], e.lanes, e.dtype)
    if isinstance(e, Broadcast):
        return Broadcast(new_children[0], e.lanes, e.dtype)
    if isinstance(e, BufferLoad):
        return BufferLoad(e.buffer, new_children[0], e.dtype, e.lanes)
    if isinstance(e, CheckedIndex):
        return CheckedIndex(new_children[0], new_children[1], new_children[0].dtype)
    return e


def rebuild(e: Any, new_children: tuple) -> Expr:
    """``e`` with its children replaced (same order as :func:`children`)."""
    t = type(e)
    if t is BinaryOp:  # the common case first
        return BinaryOp(e.op, new_children[0], new_children[1], e.dtype)
    return _rebuild_node(e, new_children)


def same_children(new: tuple, old: tuple) -> bool:
    """Whether the rewritten children ``new`` are the very objects ``old``."""
    for a, b in zip(new, old):
        if a is not b:
            return False
    return True


def transform(e: Expr, fn: Callable[[Expr], Expr | None]) -> Expr:
    """Bottom-up rewrite: ``fn(node)`` returns a replacement or ``None`` to keep it.

    ``fn`` sees each node *before* its children are rewritten; when it returns
    ``None`` the children are rewritten and the node rebuilt if any changed.
    """
    return _transform_rec(e, fn, {})


# The recursions of transform and substitute are module functions that take their state,
# not closures that call themselves: such a closure is a reference cycle (function -> cell
# -> function) holding its memo until the cyclic collector runs, and in the search that
# garbage made the collector take a quarter of the lowering time.
def _transform_rec(node: Any, fn: Callable, memo: dict) -> Expr:  # Any: dispatched on its exact class
    key = id(node)
    out = memo.get(key)  # never None: a memo value is an Expr
    if out is not None:
        return out
    out = fn(node)
    if out is None:
        out = _map_children(node, _transform_rec, fn, memo)
    memo[key] = out
    return out


def _map_children(node: Any, rec: Callable, arg: Any, memo: dict) -> Expr:
    """``node`` with ``rec(child, arg, memo)`` applied to each child; ``node`` itself when no
    child changed."""
    if type(node) is BinaryOp:  # the common interior node, inline
        a, b = node.a, node.b
        na, nb = rec(a, arg, memo), rec(b, arg, memo)
        return node if na is a and nb is b else BinaryOp(node.op, na, nb, node.dtype)
    kids = children(node)
    if not kids:
        return node
    new = tuple([rec(k, arg, memo) for k in kids])
    return node if same_children(new, kids) else rebuild(node, new)


def substitute(e: Expr, mapping: dict) -> Expr:
    """Replace variables: ``mapping`` maps ``Var`` -> ``Expr`` (by identity)."""
    if not mapping:
        return e
    return _substitute_rec(e, mapping.get, {})


# transform(e, lambda n: mapping.get(n) if isinstance(n, Var) else None), with the
# callback inlined: a variable becomes its image (itself if unmapped), a constant stays.
def _substitute_rec(node: Any, get: Callable, memo: dict) -> Expr:  # Any: dispatched on its exact class
    t = type(node)
    if t is Var:
        out = get(node)
        return node if out is None else out
    if t is IntImm or t is FloatImm:
        return node
    key = id(node)
    out = memo.get(key)  # never None: a memo value is an Expr
    if out is not None:
        return out
    if isinstance(node, Var) and t is not BinaryOp:  # a Var subclass
        out = get(node)
        out = node if out is None else out
    else:
        out = _map_children(node, _substitute_rec, get, memo)
    memo[key] = out
    return out


def free_vars(e: Expr) -> list:
    """Variables used in ``e`` in first-use order (reduce axis vars included)."""
    seen: dict[int, Var] = {}
    for n in walk(e):
        if isinstance(n, Var) and id(n) not in seen:
            seen[id(n)] = n
    return list(seen.values())


def depth(e: Expr) -> int:
    """The nesting depth of ``e`` (a leaf has depth 1), computed iteratively."""
    best = 0
    stack = [(e, 1)]
    while stack:
        node, d = stack.pop()
        best = max(best, d)
        stack.extend((c, d + 1) for c in children(node))
    return best


def structural_equal(a: Any, b: Any) -> bool:
    """Structural equality of expressions (variables compare by identity)."""
    if a is b:
        return True
    if type(a) is not type(b):
        return False
    if isinstance(a, (IntImm, FloatImm)):
        return a.value == b.value and a.dtype == b.dtype
    if isinstance(a, Var):
        return False
    if isinstance(a, Expr):
        for fa in a.__dataclass_fields__:
            va, vb = getattr(a, fa), getattr(b, fa)
            if isinstance(va, tuple):
                if len(va) != len(vb) or not all(structural_equal(x, y) for x, y in zip(va, vb)):
                    return False
            elif isinstance(va, (Expr, IterVar)):
                if not structural_equal(va, vb):
                    return False
            elif va is not vb and va != vb:
                return False
        return True
    if isinstance(a, IterVar):
        return a.var is b.var
    return a == b


def iter_exprs(items: Iterable[Any]) -> tuple:
    return tuple(as_expr(x) for x in items)


def reduce_identity(combiner: str, dtype: str) -> Expr:
    """The initial value of a ``combiner`` reduction: 0, 1, lowest or highest of ``dtype``."""
    if combiner == "sum":
        return const(0, dtype)
    if combiner == "prod":
        return const(1, dtype)
    info = np.finfo(dtype) if is_float(dtype) else np.iinfo(dtype)
    # TVM's identities are the lowest/highest finite values (te.min_value / max_value).
    if combiner == "max":
        return const(float(info.min) if is_float(dtype) else int(info.min), dtype)
    if combiner == "min":
        return const(float(info.max) if is_float(dtype) else int(info.max), dtype)
    raise InvalidWorkloadError(f"unknown reducer {combiner!r}")
