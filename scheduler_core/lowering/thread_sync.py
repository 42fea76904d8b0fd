"""Barrier planning: where a block's threads must ``__syncthreads()``.

    per-thread code of a kernel --plan_barriers(body, thread_vars)--> the same with Barrier()s

TVM's ``src/tir/transforms/thread_storage_sync.cc`` (``ThreadSync("shared")``, its
``ThreadSyncPlanner``), simplified: a ``Barrier()`` goes where a shared buffer written in the
per-thread code is then read (read-after-write) or written after it was read
(write-after-read), and at the end of a loop body whose next iteration conflicts with what
the body did (the back edge), unless the loop is marked ``DISJOINT_ITERATIONS``.  A barrier
only ever goes under thread-uniform control flow (``kernel_form.Uniform``); a
``ThreadGuard`` may hold one (guard sinking moves the guard inside afterwards).  Where a
barrier would be needed under thread-dependent control flow, ``LoweringError`` names the
shared buffer (its stage).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from scheduler_core.base.errors import LoweringError
from scheduler_core.ir import tir as T
from scheduler_core.ir.simplify import const_value
from scheduler_core.ir.stmt_functor import stmt_exprs

from .kernel_form import DISJOINT_ITERATIONS, ThreadGuard, Uniform, expr_loads, has_barrier

__all__ = ["plan_barriers"]


def plan_barriers(body: T.Stmt, thread_vars: set) -> T.Stmt:
    """``body`` (a kernel's per-thread code, ThreadGuards allowed) with the ``Barrier()``\\ s its
    shared-memory accesses need.  ``thread_vars``: the kernel's threadIdx launch variables.
    Raises LoweringError where a barrier would be needed under thread-dependent control."""
    return _Barriers(thread_vars).plan(body)


@dataclass(frozen=True)
class _Pend:
    """Shared buffers read / written since the last barrier."""

    reads: frozenset = frozenset()
    writes: frozenset = frozenset()

    def __or__(self, o: _Pend) -> _Pend:
        return _Pend(self.reads | o.reads, self.writes | o.writes)

    def conflicts(self, acc: _Pend) -> frozenset:
        """The buffers ``acc`` reads after they were written, or writes after they were read."""
        return (acc.reads & self.writes) | (acc.writes & self.reads)

    def __bool__(self) -> bool:
        return bool(self.reads or self.writes)


_EMPTY = _Pend()


def _accesses(s: T.Stmt) -> _Pend:
    reads: set = set()
    writes: set = set()
    for n in T.walk_stmts(s):
        for e in stmt_exprs(n):
            reads.update(ld.buffer for ld in expr_loads(e) if ld.buffer.scope == "shared")
        if isinstance(n, T.Store) and n.buffer.scope == "shared":
            writes.add(n.buffer)
    return _Pend(frozenset(reads), frozenset(writes))


def _head(s: T.Stmt) -> tuple:
    """``(accesses before the first barrier on every path, whether a barrier always stops it)``."""
    if isinstance(s, T.Barrier):
        return _EMPTY, True
    if isinstance(s, T.SeqStmt):
        acc = _EMPTY
        for c in s.seq:
            a, stop = _head(c)
            acc = acc | a
            if stop:
                return acc, True
        return acc, False
    if isinstance(s, T.For):
        a, stop = _head(s.body)
        trips = const_value(s.extent)
        return _Pend(a.reads, a.writes) | _accesses_of_exprs(s), stop and isinstance(trips, int) and trips > 0
    if isinstance(s, ThreadGuard):
        a, stop = _head(s.then_case)
        return a | _accesses_of_exprs(s), stop
    if isinstance(s, T.IfThenElse):
        a, st = _head(s.then_case)
        b, se = (_EMPTY, False) if s.else_case is None else _head(s.else_case)
        return a | b | _accesses_of_exprs(s), st and se
    if isinstance(s, (T.Allocate, T.LetStmt)):
        a, stop = _head(s.body)
        return a | _accesses_of_exprs(s), stop
    return _accesses(s), False


def _accesses_of_exprs(s: T.Stmt) -> _Pend:
    reads = {ld.buffer for e in stmt_exprs(s) for ld in expr_loads(e) if ld.buffer.scope == "shared"}
    return _Pend(frozenset(reads), frozenset())


def _names(bufs) -> str:
    return ", ".join(sorted(b.name for b in bufs))


class _Barriers:
    """Places ``Barrier()``s in the per-thread code (TVM's thread-sync planner, simplified)."""

    def __init__(self, tdep: set):
        self.uniform = Uniform(tdep)

    def plan(self, s: T.Stmt) -> T.Stmt:
        out, _ = self._plan(s, _EMPTY)
        return out

    def _plan(self, s: T.Stmt, pend: _Pend) -> tuple:
        """``(s with barriers, the accesses pending after it)``, entered with ``pend`` pending.

        A statement whose accesses conflict with ``pend`` gets a barrier right before it
        (outside its loops); otherwise its inside is planned (conflicts within it, and at the
        back edge of its loops)."""
        if isinstance(s, T.Barrier):
            return s, _EMPTY
        if isinstance(s, T.SeqStmt):
            out = []
            for c in s.seq:
                c2, pend = self._plan(c, pend)
                out.append(c2)
            return (T.seq(*out) if out else s), pend
        acc = _accesses(s)
        if not acc:
            return s, pend
        if pend.conflicts(acc):
            s2, after = self._plan(s, _EMPTY)
            return T.seq(T.Barrier(), s2), after
        if isinstance(s, T.For):
            if not (self.uniform(s.min) and self.uniform(s.extent)):
                self.uniform.tdep.add(s.loop_var)
                return self._nonuniform(s, pend, f"the thread-dependent loop {s.loop_var.name}")
            body, p1 = self._plan(s.body, pend)
            trips = const_value(s.extent)
            runs = isinstance(trips, int) and trips > 0
            if p1.conflicts(_head(body)[0]) and not s.annotations.get(DISJOINT_ITERATIONS):
                return replace(s, body=T.seq(body, T.Barrier())), (_EMPTY if runs else pend)
            return replace(s, body=body), (p1 if runs else p1 | pend)
        if isinstance(s, ThreadGuard):  # pushed down around the barrier-free parts afterwards
            body, p = self._plan(s.then_case, pend)
            return replace(s, then_case=body), p | pend
        if isinstance(s, T.IfThenElse):
            if not self.uniform(s.cond):
                return self._nonuniform(s, pend, f"the thread-dependent condition {T.expr_str(s.cond)}")
            then, pt = self._plan(s.then_case, pend)
            if s.else_case is None:
                return replace(s, then_case=then), pt | pend
            other, pe = self._plan(s.else_case, pend)
            return replace(s, then_case=then, else_case=other), pt | pe
        if isinstance(s, T.LetStmt):
            self.uniform.bind(s.var, s.value)
            body, p = self._plan(s.body, pend)
            return replace(s, body=body), p
        if isinstance(s, T.Allocate):
            body, p = self._plan(s.body, pend)
            return replace(s, body=body), p
        return s, pend | acc

    def _nonuniform(self, s: T.Stmt, pend: _Pend, what: str) -> tuple:
        """A statement under thread-dependent control: no barrier may go inside it, so it
        counts as one access (a barrier before it where needed)."""
        for c in T.stmt_children(s):
            planned, end = _Barriers(self.uniform.tdep)._plan(c, _EMPTY)
            need = has_barrier(planned)
            if isinstance(s, T.For) and not need:
                need = bool(end.conflicts(_head(planned)[0]))
            if need:
                acc = _accesses(s)
                raise LoweringError(
                    f"stage writing shared buffer(s) {_names(acc.writes) or _names(acc.reads)}: a barrier is "
                    f"needed under {what}, where not every thread of the block would reach it")
        return s, pend | _accesses(s)
