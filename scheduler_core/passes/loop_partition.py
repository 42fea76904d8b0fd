"""Loop partitioning: split a loop where the guards of non-divisible splits stop mattering.

    for (io, 0, 171) {                        for (io, 0, 170) {
      for (ii, 0, 6) {                          for (ii, 0, 6) { C[..] = .. }     (no guard)
        if (@likely(io*6 + ii < 1024)) {  -->  }
          C[..] = ..                           for (io_tail, 170, 1) {
        }                                        for (ii, 0, 6) {
      }                                            if (@likely(io_tail*6 + ii < 1024)) { C[..] = .. }
    }                                            }
                                               }

A split whose lengths do not divide the extent (a 6-row register tile of a 1024-row
matmul) covers ``ceil(1024 / 6) * 6 = 1026`` rows and guards its statements with
``likely`` conditions.  The guard sits innermost, inside the reduction loop, so every
iteration of the register tile pays a branch and, worse, LLVM cannot keep the tile's
accumulators in registers across the reduction (a store under a condition is not promoted
out of the loop).  This pass finds, for each serial or parallel loop with constant bounds,
the longest prefix of its iterations on which the ``likely`` conditions inside it are
provably true (constant integer bounds of ``cond``'s operands, every loop inside at its
full range and the enclosing loops at their current ranges), and splits the loop there:
the first part runs without those guards, the rest (the tail) keeps them and is partitioned
again further in (its inner loops).  A guard that is provably true is removed; one that is
provably false removes its statement.

Source of the idea: TVM's ``tir.transform.LoopPartition`` (src/tir/transforms/loop_partition.cc),
which splits loops at the points where ``likely`` conditions change value; here only a
prefix is split off (the tails of split loops are at their ends), found by a binary search
over the prefix length with ``const_int_bound``.  Vectorized loops are left to
``vectorize_loops`` (its own full-vector / masked split); loops bound to GPU threads are not
touched.  Each loop is partitioned at most ``MAX_TAIL_DEPTH`` times along one path, so the
code grows by a bounded factor.
"""

from __future__ import annotations

from dataclasses import replace

from scheduler_core.arith.const_int_bound import const_int_bound
from scheduler_core.ir import expr as E
from scheduler_core.ir import simplify as ES
from scheduler_core.ir import tir as T
from scheduler_core.ir.expr_functor import free_vars

from .unroll import substitute_stmt

__all__ = ["partition_loops", "MAX_TAIL_DEPTH"]

MAX_TAIL_DEPTH = 3  # partitions nested along one path of the loop tree
_PARTITIONED_KINDS = ("serial", "parallel")


def partition_loops(body: T.Stmt) -> T.Stmt:
    """``body`` with its loops partitioned at the end of their guard-free prefixes and the
    guards proved true removed (see the module docstring).  The result computes the same
    thing; statements that did not change are the same objects."""
    return _stmt(body, {}, 0)


def _const_int(e: E.Expr) -> int | None:
    v = ES.const_value(e)
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _decide(cond: E.Expr, bounds: dict) -> bool | None:
    """True / False when ``cond`` holds / fails for every value of the variables in their
    ``bounds`` (``Var -> (lo, hi)``), None when that is not known."""
    if isinstance(cond, E.LogicalOp):
        a, b = _decide(cond.a, bounds), _decide(cond.b, bounds)
        if cond.op == "and":
            return True if a is True and b is True else (False if a is False or b is False else None)
        return True if a is True or b is True else (False if a is False and b is False else None)
    if isinstance(cond, E.Not):
        a = _decide(cond.a, bounds)
        return None if a is None else not a
    if not isinstance(cond, E.CmpOp) or not E.is_int(cond.a.dtype) or not E.is_int(cond.b.dtype):
        return None
    r = const_int_bound(ES.simplify(cond.a - cond.b), bounds)
    if r is None:
        return None
    lo, hi = r
    op = cond.op
    if op == "lt":
        return True if hi < 0 else (False if lo >= 0 else None)
    if op == "le":
        return True if hi <= 0 else (False if lo > 0 else None)
    if op == "gt":
        return True if lo > 0 else (False if hi <= 0 else None)
    if op == "ge":
        return True if lo >= 0 else (False if hi < 0 else None)
    if op == "eq":
        return True if lo == hi == 0 else (False if lo > 0 or hi < 0 else None)
    return True if lo > 0 or hi < 0 else (False if lo == hi == 0 else None)  # ne


def _guards(s: T.Stmt, var: E.Var, bounds: dict, out: list) -> None:
    """The ``likely`` conditions under ``s`` that use ``var``, each with the bounds of the
    loops around it (inside ``s``) added to ``bounds``."""
    if isinstance(s, T.IfThenElse):
        if s.likely and any(v is var for v in free_vars(s.cond)):
            out.append((s.cond, bounds))
        _guards(s.then_case, var, bounds, out)
        if s.else_case is not None:
            _guards(s.else_case, var, bounds, out)
        return
    if isinstance(s, T.For):
        lo, ext = _const_int(s.min), _const_int(s.extent)
        inner = dict(bounds)
        inner[s.loop_var] = (lo, lo + ext - 1) if lo is not None and ext is not None and ext > 0 else None
        _guards(s.body, var, inner, out)
        return
    for c in T.stmt_children(s):
        _guards(c, var, bounds, out)


def _prefix(cond: E.Expr, var: E.Var, lo: int, ext: int, bounds: dict) -> int:
    """The largest ``t`` in [0, ext] with ``cond`` provably true for ``var`` in [lo, lo + t)."""
    good, bad = 0, ext + 1  # cond proved on [lo, lo + good); not on [lo, lo + bad)
    while bad - good > 1:
        mid = (good + bad) // 2
        b = dict(bounds)
        b[var] = (lo, lo + mid - 1)
        if _decide(cond, b) is True:
            good = mid
        else:
            bad = mid
    return good


def _stmt(s: T.Stmt, bounds: dict, depth: int) -> T.Stmt:
    if isinstance(s, T.For):
        return _for(s, bounds, depth)
    if isinstance(s, T.IfThenElse):
        known = _decide(s.cond, bounds) if s.likely else None
        if known is True:
            return _stmt(s.then_case, bounds, depth)
        if known is False:
            return T.SeqStmt(()) if s.else_case is None else _stmt(s.else_case, bounds, depth)
        then = _stmt(s.then_case, bounds, depth)
        other = None if s.else_case is None else _stmt(s.else_case, bounds, depth)
        if then is s.then_case and other is s.else_case:
            return s
        return T.IfThenElse(s.cond, then, other, s.likely)
    if isinstance(s, T.SeqStmt):
        kids = tuple(_stmt(c, bounds, depth) for c in s.seq)
        return s if all(a is b for a, b in zip(kids, s.seq)) else T.SeqStmt(kids)
    if isinstance(s, (T.Allocate, T.LetStmt)):
        body = _stmt(s.body, bounds, depth)
        return s if body is s.body else _with_body(s, body)
    return s


def _with_body(s: T.For | T.Allocate | T.LetStmt, body: T.Stmt) -> T.Stmt:
    return replace(s, body=body)


def _for(s: T.For, bounds: dict, depth: int) -> T.Stmt:
    lo, ext = _const_int(s.min), _const_int(s.extent)
    if lo is None or ext is None or ext <= 0:
        inner = dict(bounds)
        inner[s.loop_var] = None
        body = _stmt(s.body, inner, depth)
        return s if body is s.body else _with_body(s, body)
    t = ext
    if s.kind in _PARTITIONED_KINDS and depth < MAX_TAIL_DEPTH and ext > 1:
        conds: list = []
        _guards(s.body, s.loop_var, bounds, conds)
        cuts = [c for c in (_prefix(cond, s.loop_var, lo, ext, b) for cond, b in conds) if 0 < c < ext]
        if cuts:
            t = min(cuts)
    inner = dict(bounds)
    inner[s.loop_var] = (lo, lo + t - 1)
    body = _stmt(s.body, inner, depth)
    if _is_empty(body):  # every statement inside was under a guard proved false
        head: T.Stmt = T.SeqStmt(())
    else:
        head = s if body is s.body and t == ext else _with_body(_with_range(s, lo, t), body)
    if t == ext:
        return head
    # the tail: a loop of its own over a fresh variable, partitioned again further in
    tail_var = E.Var(f"{s.loop_var.name}_tail", s.loop_var.dtype)
    tail_body = substitute_stmt(s.body, {s.loop_var: tail_var})
    tail = T.For(tail_var, E.const(lo + t, s.min.dtype), E.const(ext - t, s.extent.dtype), s.kind,
                 tail_body, dict(s.annotations))
    return T.seq(head, _for(tail, bounds, depth + 1))


def _is_empty(s: T.Stmt) -> bool:
    return isinstance(s, T.SeqStmt) and all(_is_empty(c) for c in s.seq)


def _with_range(s: T.For, lo: int, ext: int) -> T.For:
    return replace(s, min=E.const(lo, s.min.dtype), extent=E.const(ext, s.extent.dtype))
