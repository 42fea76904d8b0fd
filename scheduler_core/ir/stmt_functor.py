"""Generic traversal of the loop program: the one statement visitor and mutator.

    stmt_exprs(stmt)                      -> the expressions a statement holds directly
    post_order_visit(stmt, f)             -> calls f on every statement, children first
    map_stmt(stmt, f_stmt, f_expr, preorder) -> the statement with some nodes replaced
    replace_stmt(stmt, old, new)          -> the statement with ``old`` (by identity) replaced

These are TVM's ``tir::StmtFunctor`` family (``src/tir/ir/stmt_functor.cc``:
``PostOrderVisit``, ``IRTransform``) for the statements of :mod:`scheduler_core.ir.tir`;
every pass that walks or rewrites statements uses them instead of its own walker.
``stmt_children`` and ``walk_stmts`` (pre-order iteration) stay in ``tir``.

Statement subclasses (a pass's private marker such as a ``IfThenElse`` subclass) are
visited as their base class and rebuilt with ``dataclasses.replace``, so they keep their
class.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from . import tir as T
from .expr import BufferLoad, Expr, as_expr
from .expr_functor import walk

__all__ = ["stmt_exprs", "post_order_visit", "map_stmt", "replace_stmt", "stmt_loads"]


def stmt_exprs(s: T.Stmt) -> tuple:
    """The expressions ``s`` holds directly (not those of its child statements), in order:

    * ``Store``: index, value, then the predicate when there is one;
    * ``For``: min, extent;
    * ``IfThenElse``: the condition;
    * ``LetStmt``, ``Evaluate``: the value;
    * ``Allocate``: the extents of the buffer's shape (as Exprs);
    * ``SeqStmt``, ``Barrier``: none.
    """
    if isinstance(s, T.Store):
        return (s.index, s.value) if s.predicate is None else (s.index, s.value, s.predicate)
    if isinstance(s, T.For):
        return (s.min, s.extent)
    if isinstance(s, T.IfThenElse):
        return (s.cond,)
    if isinstance(s, (T.LetStmt, T.Evaluate)):
        return (s.value,)
    if isinstance(s, T.Allocate):
        return tuple(as_expr(d) for d in s.buffer.shape)
    return ()


def post_order_visit(s: T.Stmt, f: Callable[[T.Stmt], None]) -> None:
    """Call ``f`` on every statement of ``s``, each after all the statements inside it (TVM's
    ``PostOrderVisit``, statements only).  Iterative: no recursion limit."""
    stack: list = [(s, False)]
    while stack:
        node, done = stack.pop()
        if done:
            f(node)
            continue
        stack.append((node, True))
        stack.extend((c, False) for c in reversed(T.stmt_children(node)))


def stmt_loads(s: T.Stmt):
    """Every ``BufferLoad`` in the expressions of ``s`` and of all statements inside it."""
    for st in T.walk_stmts(s):
        for e in stmt_exprs(st):
            for n in walk(e):
                if isinstance(n, BufferLoad):
                    yield n


def _rebuild(s: T.Stmt, exprs: tuple, kids: tuple) -> T.Stmt:
    """``s`` with new expressions (as :func:`stmt_exprs`, shapes excluded) and children."""
    if isinstance(s, T.Store):
        return replace(s, index=exprs[0], value=exprs[1], predicate=exprs[2] if len(exprs) > 2 else None)
    if isinstance(s, T.For):
        return replace(s, min=exprs[0], extent=exprs[1], body=kids[0], annotations=dict(s.annotations))
    if isinstance(s, T.IfThenElse):
        return replace(s, cond=exprs[0], then_case=kids[0], else_case=kids[1] if len(kids) > 1 else None)
    if isinstance(s, T.LetStmt):
        return replace(s, value=exprs[0], body=kids[0])
    if isinstance(s, T.Evaluate):
        return replace(s, value=exprs[0])
    if isinstance(s, T.Allocate):
        return replace(s, body=kids[0])
    if isinstance(s, T.SeqStmt):
        return replace(s, seq=kids)
    return s


def map_stmt(s: T.Stmt, f_stmt: Callable[[T.Stmt], T.Stmt | None] | None = None,
             f_expr: Callable[[Expr], Expr] | None = None,
             preorder: Callable[[T.Stmt], T.Stmt | None] | None = None) -> T.Stmt:
    """``s`` rewritten bottom-up (TVM's ``IRTransform``): a node is rebuilt only when one of its
    expressions or children changed (by identity); otherwise the same object comes back.

    Parameters
    ----------
    f_stmt : called on each statement after its children and expressions were rewritten
        (post-order); returns a replacement, or None to keep the (rebuilt) statement.
    f_expr : applied to every expression a statement holds (``stmt_exprs``), except the
        shapes of ``Allocate``\\ d buffers: buffers are compared by identity, so they are
        kept as they are (a pass that resizes a buffer replaces its accesses itself).
    preorder : called on each statement before its children; a non-None result replaces
        the statement and is not visited further (``IRTransform``'s ``preorder``).

    A child ``SeqStmt`` is kept as a ``SeqStmt`` (it is not flattened).  Recursive in the
    statement depth (loop nests are shallow).
    """
    return _map_stmt_rec(s, f_stmt, f_expr, preorder)


def _map_stmt_rec(node: T.Stmt, f_stmt, f_expr, preorder) -> T.Stmt:
    """One statement of :func:`map_stmt` (a module function, not a closure calling itself:
    that would be a reference cycle left to the cyclic collector)."""
    if preorder is not None:
        out = preorder(node)
        if out is not None:
            return out
    kids = T.stmt_children(node)
    new_kids = tuple(_map_stmt_rec(c, f_stmt, f_expr, preorder) for c in kids)
    exprs = () if isinstance(node, T.Allocate) else stmt_exprs(node)
    new_exprs = exprs if f_expr is None else tuple(f_expr(e) for e in exprs)
    changed = any(a is not b for a, b in zip(new_kids, kids)) or \
        any(a is not b for a, b in zip(new_exprs, exprs))
    if changed:
        node = _rebuild(node, new_exprs, new_kids)
    if f_stmt is not None:
        out = f_stmt(node)
        if out is not None:
            return out
    return node


def replace_stmt(s: T.Stmt, old: T.Stmt, new: T.Stmt) -> T.Stmt:
    """``s`` with the statement ``old`` (found by identity) replaced by ``new``; the nodes on the
    path to it are rebuilt, the rest is shared."""
    return map_stmt(s, preorder=lambda n: new if n is old else None)
