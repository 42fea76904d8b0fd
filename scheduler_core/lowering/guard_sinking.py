"""Guard sinking: thread guards become conditions around the barrier-free code only.

    per-thread code with ThreadGuards and Barriers --sink_guards(body, thread_vars)-->
        the same with each ThreadGuard replaced by IfThenElses that hold no Barrier

A threadIdx loop smaller than its tag's launch dimension runs only on the first threads
(``ThreadGuard(threadIdx.x < extent, body)``), but a ``__syncthreads()`` must be reached by
every thread of the block.  So each guard is pushed down through the thread-uniform
statements (sequences, serial loops, lets, allocations, uniform conditions) that hold
barriers, and stays around each barrier-free run.  TVM reaches the same form differently
(its thread-extent conditions come from ``LoopPartition``, and ``ThreadSync`` syncs only
under thread-invariant conditions, ``src/tir/transforms/thread_storage_sync.cc``); this
pass has no TVM counterpart of its own.  It also drops the ``DISJOINT_ITERATIONS`` loop
annotation, which only the barrier planner reads.  Raises LoweringError for a barrier
under a thread-dependent statement.
"""

from __future__ import annotations

from dataclasses import replace

from scheduler_core.base.errors import LoweringError
from scheduler_core.ir import tir as T
from scheduler_core.ir.expr import Expr

from .kernel_form import DISJOINT_ITERATIONS, ThreadGuard, Uniform, has_barrier

__all__ = ["sink_guards"]


def sink_guards(body: T.Stmt, thread_vars: set) -> T.Stmt:
    """``body`` with every ``ThreadGuard`` replaced by IfThenElses around its barrier-free parts
    (see the module docstring).  ``thread_vars``: the kernel's threadIdx launch variables."""
    return _sink_guards(body, Uniform(thread_vars))


def _sink_guards(s: T.Stmt, uniform: Uniform) -> T.Stmt:
    """Replace each ``ThreadGuard`` by ``IfThenElse``s around its barrier-free parts."""
    if isinstance(s, ThreadGuard):
        body = _sink_guards(s.then_case, uniform)
        return _push(s.cond, body, uniform)
    if isinstance(s, T.LetStmt):
        uniform.bind(s.var, s.value)
    kids = T.stmt_children(s)
    if not kids:
        return s
    if isinstance(s, T.SeqStmt):
        return T.SeqStmt(tuple(_sink_guards(c, uniform) for c in s.seq))
    if isinstance(s, T.IfThenElse):
        other = None if s.else_case is None else _sink_guards(s.else_case, uniform)
        return replace(s, then_case=_sink_guards(s.then_case, uniform), else_case=other)
    assert isinstance(s, (T.For, T.Allocate, T.LetStmt))
    if isinstance(s, T.For) and DISJOINT_ITERATIONS in s.annotations:
        s = replace(s, annotations={k: v for k, v in s.annotations.items() if k != DISJOINT_ITERATIONS})
    return replace(s, body=_sink_guards(kids[0], uniform))


def _push(cond: Expr, s: T.Stmt, uniform: Uniform) -> T.Stmt:
    """``if cond: s`` with the condition moved inside the uniform statements holding barriers."""
    if not has_barrier(s):
        return T.IfThenElse(cond, s)
    if isinstance(s, T.Barrier):
        return s
    if isinstance(s, T.SeqStmt):
        out: list = []
        run: list = []
        for c in s.seq:
            if has_barrier(c):
                if run:
                    out.append(T.IfThenElse(cond, T.seq(*run)))
                    run = []
                out.append(_push(cond, c, uniform))
            else:
                run.append(c)
        if run:
            out.append(T.IfThenElse(cond, T.seq(*run)))
        return T.seq(*out)
    if isinstance(s, T.For):
        return replace(s, body=_push(cond, s.body, uniform))
    if isinstance(s, (T.Allocate, T.LetStmt)):
        return replace(s, body=_push(cond, s.body, uniform))
    if isinstance(s, T.IfThenElse) and uniform(s.cond):
        other = None if s.else_case is None else _push(cond, s.else_case, uniform)
        return replace(s, then_case=_push(cond, s.then_case, uniform), else_case=other)
    raise LoweringError(f"a barrier under the thread-dependent statement {type(s).__name__}")
