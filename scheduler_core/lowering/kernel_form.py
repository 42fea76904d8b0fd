"""The vocabulary the GPU lowering passes share: thread guards, thread uniformity, queries.

    ThreadGuard(cond, body)   "if cond: body" for the threads beyond a loop's extent; the
                              barrier planner may put barriers inside it, guard sinking
                              turns it into IfThenElses around the barrier-free parts
    Uniform(tdep)(e)          whether e has one value on every thread of a block
    has_gpu_loop, has_barrier, expr_loads     small queries over statements / expressions

The kernel form itself is specified in ``docs/gpu_kernel_form.md``.  ``ThreadGuard`` is an
``IfThenElse`` subclass (no else branch), so the statement functor walks and rebuilds it as
one; it never leaves the GPU lowering (``lower_for_gpu`` returns none).  TVM keeps the same
distinction between a thread-extent guard and a data-dependent condition in
``src/tir/transforms/thread_storage_sync.cc`` (its ``ThreadSyncPlanner`` only syncs under
thread-invariant conditions).
"""

from __future__ import annotations

from dataclasses import dataclass

from scheduler_core.base.gpu_spec import GPU_TAGS
from scheduler_core.ir import tir as T
from scheduler_core.ir.expr import BufferLoad, Expr, Var
from scheduler_core.ir.expr_functor import structural_equal, walk

__all__ = ["KERNEL_ANNOTATION", "DISJOINT_ITERATIONS", "ThreadGuard", "Uniform", "has_gpu_loop",
           "has_barrier", "expr_loads", "seq_elements", "is_update"]

KERNEL_ANNOTATION = "kernel"  # For.annotations key on a kernel's outermost loop: its launch name
# For.annotations key (removed before the kernel is returned) of a loop whose iterations
# access disjoint parts of the shared buffers: no barrier at its back edge.
DISJOINT_ITERATIONS = "gpu_lowering.disjoint_iterations"


@dataclass(frozen=True, eq=False)
class ThreadGuard(T.IfThenElse):
    """``if cond: then_case`` for the threads beyond a loop's extent (a threadIdx loop smaller
    than the launch dimension); pushed down around the barrier-free statements before the
    kernel is returned (``guard_sinking.sink_guards``)."""


class Uniform:
    """Whether an expression has the same value on every thread of a block: it uses no
    ``threadIdx`` variable, no variable bound to a thread-dependent value, and loads no
    ``local`` buffer.  ``tdep``: the thread-dependent variables so far (grows by :meth:`bind`)."""

    def __init__(self, tdep: set):
        self.tdep = set(tdep)

    def __call__(self, e: Expr) -> bool:
        for n in walk(e):
            if isinstance(n, Var) and n in self.tdep:
                return False
            if isinstance(n, BufferLoad) and n.buffer.scope == "local":
                return False
        return True

    def bind(self, var: Var, value: Expr) -> None:
        """``var = value`` was bound (a LetStmt): ``var`` is thread-dependent if ``value`` is."""
        if not self(value):
            self.tdep.add(var)


def expr_loads(e: Expr) -> list:
    """The ``BufferLoad``\\ s of ``e``, pre-order."""
    return [n for n in walk(e) if isinstance(n, BufferLoad)]


def has_gpu_loop(s: T.Stmt) -> bool:
    """Whether ``s`` holds a loop bound to a blockIdx/threadIdx tag."""
    return any(isinstance(n, T.For) and n.kind in GPU_TAGS for n in T.walk_stmts(s))


def has_barrier(s: T.Stmt) -> bool:
    """Whether ``s`` holds a ``Barrier``."""
    return any(isinstance(n, T.Barrier) for n in T.walk_stmts(s))


def seq_elements(s: T.Stmt) -> list:
    """The statements of ``s`` in order, nested ``SeqStmt``\\ s flattened (``[s]`` for one)."""
    if isinstance(s, T.SeqStmt):
        return [x for c in s.seq for x in seq_elements(c)]
    return [s]


def is_update(s: T.Store) -> bool:
    """Whether ``s`` is a read-modify-write ``X[I] = f(X[I], ...)`` of one element."""
    return any(ld.buffer is s.buffer and structural_equal(ld.index, s.index) for ld in expr_loads(s.value))
