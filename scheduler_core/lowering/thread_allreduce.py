"""Reductions across threadIdx.x: TVM's thread allreduce, in the kernel form's own statements.

    kernel subtree --ThreadAllReduce(kernel).rewrite(stmt, [])--> the same subtree where each
        cross-thread reduction is a per-thread partial, a shared tree reduction and barriers

TVM's ``src/tir/transforms/lower_thread_allreduce.cc`` (``LowerThreadAllreduce``), for the
reductions Ansor's ``RuleCrossThreadReduction`` makes: a reduce loop bound to threadIdx.x.
It runs first on each kernel, before the thread tags are unified
(``unify_thread_binding``); the barrier planner (``thread_sync``) then puts a ``Barrier()``
between the tree steps.  ``reduction_regions`` also tells the host/device split where a
reduction whose init is host code (a zero-rank output) starts its kernel.  Errors
(``LoweringError``) are listed in ``scheduler_core.lowering.gpu``'s docstring, item 5.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from scheduler_core.base.errors import LoweringError
from scheduler_core.base.gpu_spec import GPU_TAGS, THREAD_TAGS
from scheduler_core.ir import tir as T
from scheduler_core.ir.expr import BinaryOp, BufferLoad, Expr, IntImm, Var
from scheduler_core.ir.expr_functor import free_vars, structural_equal
from scheduler_core.ir.simplify import const_value, simplify
from scheduler_core.ir.stmt_functor import map_stmt, replace_stmt

from .gpu_index import linear_loops
from .kernel_form import DISJOINT_ITERATIONS, expr_loads, has_gpu_loop, is_update, seq_elements

__all__ = ["ThreadAllReduce", "reduction_regions"]

_COMBINERS = {"add": "sum", "mul": "prod", "max": "max", "min": "min"}


@dataclass
class _XUpdate:
    """A read-modify-write ``X[I] = X[I] op v`` inside a thread loop whose variable ``I``
    does not use: every thread of the loop updates the same element."""

    store: T.Store
    path: list  # the statements from the searched statement down to the store's parent
    threads: list  # the thread-bound loops on the path whose variable the index does not use


def _xupdates(s: T.Stmt) -> list:
    """The cross-thread updates inside ``s`` (a buffer allocated below a thread loop is that
    thread's own: its updates are not cross-thread)."""
    out: list = []

    def go(n: T.Stmt, path: list) -> None:
        if isinstance(n, T.Store):
            if is_update(n):
                used = {id(v) for v in free_vars(n.index)}
                threads: list = []
                for a in path:
                    if isinstance(a, T.Allocate) and a.buffer is n.buffer:
                        threads = []
                    elif isinstance(a, T.For) and a.kind in THREAD_TAGS and id(a.loop_var) not in used:
                        threads.append(a)
                if threads:
                    out.append(_XUpdate(n, path, threads))
            return
        for c in T.stmt_children(n):
            go(c, path + [n])

    go(s, [])
    return out


def _find_init(elems: list, j: int, buf: T.Buffer, index: Expr) -> int | None:
    """The position before ``j`` of the element holding the reduction's init ``buf[index] = v``."""
    for i in range(j - 1, -1, -1):
        for n in T.walk_stmts(elems[i]):
            if (isinstance(n, T.Store) and n.buffer is buf and structural_equal(n.index, index)
                    and not any(ld.buffer is buf for ld in expr_loads(n.value))):
                return i
    return None


def reduction_regions(elems: list) -> list:
    """``(i, j)`` for each cross-thread reduction of a statement sequence: its init in
    ``elems[i]`` and its update (inside a thread loop) in ``elems[j]``, non-overlapping."""
    out: list = []
    start = 0
    for j, c in enumerate(elems):
        ups = _xupdates(c) if has_gpu_loop(c) else []
        if not ups:
            continue
        i = _find_init(elems, j, ups[0].store.buffer, ups[0].store.index)
        if i is not None and i >= start:
            out.append((i, j))
            start = j + 1
    return out


class ThreadAllReduce:
    """Rewrites each reduction whose reduce loop is bound to threadIdx.x (Ansor's
    RuleCrossThreadReduction) into TVM's thread allreduce, before the kernel is built:

        P[p] = identity                        # local: one partial per thread and element
        ... the reduce loops, X[I] = X[I] op v now P[p] = P[p] op v ...
        for t in E "threadIdx.x": R[(s*n + p)*E + t] = P[p]      # shared: a slot per thread
        for t in min(w, E - w) "threadIdx.x":                    # w = W/2, W/4, ..., 1
            R[(s*n + p)*E + t] = R[..t] op R[..t + w]             #   (W: E padded to a power of 2)
        X[I] = R[(s*n + p)*E]     # where the init stored; by every thread for a local X
                                  # (each holds the result), by thread 0 otherwise

    (``p``: the element among the ``n`` spatial elements the reduction's loops compute,
    ``s``: the enclosing threadIdx.y/z slot; ``E``: the threadIdx.x loop's extent).  The
    thread loops are then rewritten like any other (guards for the smaller ones) and the
    barrier planner puts a ``Barrier()`` between the steps and before ``R`` is reused."""

    def __init__(self, kernel: str):
        self.kernel = kernel
        self.partials: set = set()  # the local partial buffers (written in thread loops by design)
        self.names: set = set()

    def rewrite(self, s: T.Stmt, ctx: list) -> T.Stmt:
        """``ctx``: the loops of the kernel enclosing ``s``."""
        if isinstance(s, T.SeqStmt):
            elems = seq_elements(s)
            regions = reduction_regions(elems)
            out: list = []
            k = 0
            for i, j in regions:
                out.extend(self.rewrite(c, ctx) for c in elems[k:i])
                out.append(self.region(elems[i:j + 1], ctx))
                k = j + 1
            out.extend(self.rewrite(c, ctx) for c in elems[k:])
            return T.seq(*out)
        if isinstance(s, T.For):
            return replace(s, body=self.rewrite(s.body, ctx + [s]))
        if isinstance(s, T.IfThenElse):
            other = None if s.else_case is None else self.rewrite(s.else_case, ctx)
            return replace(s, then_case=self.rewrite(s.then_case, ctx), else_case=other)
        if isinstance(s, (T.Allocate, T.LetStmt)):
            return replace(s, body=self.rewrite(s.body, ctx))
        return s

    def _name(self, base: str) -> str:
        name, n = base, 1
        while name in self.names:
            name, n = f"{base}{n}", n + 1
        self.names.add(name)
        return name

    def region(self, elems: list, ctx: list) -> T.Stmt:
        """The allreduce of the reduction whose init is in ``elems[0]`` and update in ``elems[-1]``
        (``ctx``: the kernel's loops around them).  Raises LoweringError (module docstring)."""
        r = _analyse(elems, ctx, self.kernel)
        X, E = r.store.buffer, r.threads
        p_index, n_elem = linear_loops(r.spatial)
        s_index, n_slot = linear_loops(r.slots)
        width = 1
        while width < E:
            width *= 2
        partial = T.Buffer(self._name(f"{X.name}.red_local"), X.dtype, (IntImm(n_elem),), "local")
        shared = T.Buffer(self._name(f"{X.name}.red_shared"), X.dtype, (IntImm(n_slot * n_elem * E),), "shared")
        self.partials.add(partial)

        def slot(q: Expr, t: Expr) -> Expr:
            return simplify((s_index * n_elem + q) * E + t)

        def over_elements(body: Callable[[Expr], T.Stmt]) -> T.Stmt:
            if n_elem == 1:
                return body(IntImm(0))
            q = Var("red.e", "int32")
            return T.For(q, IntImm(0), IntImm(n_elem), "serial", body(q), {DISJOINT_ITERATIONS: True})

        def threads(extent: int, body: Callable[[Expr], T.Stmt]) -> T.Stmt:
            t = Var("red.t", "int32")
            return T.For(t, IntImm(0), IntImm(extent), "threadIdx.x", body(t))

        p_load = BufferLoad(partial, p_index, X.dtype)
        parts: list = [over_elements(lambda q: T.Store(partial, q, r.init.value))]
        parts.extend(elems[1:-1])
        parts.append(replace_stmt(elems[-1], r.store, T.Store(partial, p_index, r.update_of(p_load))))
        parts.append(threads(E, lambda t: over_elements(
            lambda q: T.Store(shared, slot(q, t), BufferLoad(partial, q, X.dtype)))))
        w = width // 2
        while w >= 1:
            def step(t: Expr, w: int = w) -> T.Stmt:
                return over_elements(lambda q: T.Store(shared, slot(q, t), r.combine(
                    BufferLoad(shared, slot(q, t), X.dtype), BufferLoad(shared, slot(q, t + w), X.dtype))))
            parts.append(threads(min(w, E - w), step))
            w //= 2
        result = BufferLoad(shared, slot(p_index, IntImm(0)), X.dtype)
        final = replace_stmt(elems[0], r.init, T.Store(X, r.store.index, result))
        final = map_stmt(final, f_stmt=_serial_loop)
        if X.scope != "local":  # thread 0 writes the result; a local X is every thread's own
            written = final
            final = threads(1, lambda t: written)
        parts.append(final)
        return T.Allocate(shared, T.Allocate(partial, T.seq(*parts)))


@dataclass(frozen=True)
class _Reduction:
    """A checked cross-thread reduction: its update ``store`` (``X[I] = X[I] op src`` or
    ``src op X[I]``), the init store of the identity, the spatial loops inside its reduce
    loops and the enclosing threadIdx.y/z loops (``slots``), and ``threads``, the constant
    extent of its threadIdx.x reduce loop."""

    store: T.Store
    init: T.Store
    src: Expr
    current_first: bool  # X[I] is the first operand of op
    spatial: list
    slots: list
    threads: int

    def combine(self, a: Expr, b: Expr) -> Expr:
        value = self.store.value
        assert isinstance(value, BinaryOp)
        return BinaryOp(value.op, a, b, value.dtype)

    def update_of(self, acc: Expr) -> Expr:
        """The update with ``acc`` in place of ``X[I]``."""
        return self.combine(acc, self.src) if self.current_first else self.combine(self.src, acc)


def _analyse(elems: list, ctx: list, kernel: str) -> _Reduction:
    """Check the reduction of ``elems`` (init first, update last) inside the loops ``ctx``."""
    ups = _xupdates(elems[-1])
    up = ups[0]
    what = f"{kernel}: stage {up.store.buffer.name} (a reduction across threadIdx.x)"
    red_loop = _reduce_loop(ups, what)
    spatial = _spatial_loops(up, red_loop, what)
    slots = _slot_loops(ctx, red_loop, what)
    E = const_value(red_loop.extent)
    if not isinstance(E, int):
        raise LoweringError(f"{what}: its reduce loop {red_loop.loop_var.name} bound to threadIdx.x has the "
                            f"extent {T.expr_str(red_loop.extent)}, not a constant")
    src, current_first = _operands(up.store, what)
    init = _init_store(elems[0], up.store, spatial, what)
    return _Reduction(up.store, init, src, current_first, spatial, slots, E)


def _reduce_loop(ups: list, what: str) -> T.For:
    """The one threadIdx.x loop of the one update store of one output."""
    X = ups[0].store.buffer
    others = sorted({u.store.buffer.name for u in ups if u.store.buffer is not X})
    if others:
        raise LoweringError(f"{what}: its reduce loops also update {', '.join(others)} across threads; "
                            f"a cross-thread reduction of several outputs is not supported")
    if len(ups) != 1:
        raise LoweringError(f"{what}: {len(ups)} update stores of {X.name} in its reduce loops; "
                            f"a cross-thread reduction needs exactly one")
    if ups[0].store.predicate is not None:
        raise LoweringError(f"{what}: a predicated (vector) update is not supported")
    bound = ups[0].threads
    if len(bound) > 1:
        loops = ", ".join(f"{lp.loop_var.name} ({lp.kind})" for lp in bound)
        raise LoweringError(f"{what}: the reduce loops {loops} are all bound to threads; a cross-thread "
                            f"reduction over more than one bound loop is not supported (bind one)")
    (red_loop,) = bound
    if red_loop.kind != "threadIdx.x":
        raise LoweringError(f"{what}: its reduce loop {red_loop.loop_var.name} is bound to {red_loop.kind}; "
                            f"a cross-thread reduction is supported on threadIdx.x only")
    return red_loop


def _spatial_loops(up: _XUpdate, red_loop: T.For, what: str) -> list:
    """The constant loops inside the reduce loops whose variables the output index uses."""
    used = {id(v) for v in free_vars(up.store.index)}
    spatial: list = []
    for lp in up.path:
        if not isinstance(lp, T.For) or lp is red_loop:
            continue
        if lp.kind in GPU_TAGS:
            raise LoweringError(f"{what}: loop {lp.loop_var.name} bound to {lp.kind} inside its reduce loops "
                                f"is not supported (bind only the spatial loops outside them)")
        if id(lp.loop_var) in used:
            if not (isinstance(const_value(lp.extent), int) and isinstance(const_value(lp.min), int)):
                raise LoweringError(f"{what}: its spatial loop {lp.loop_var.name} inside the reduce loops "
                                    f"has the extent {T.expr_str(lp.extent)}, not a constant")
            spatial.append(lp)
    return spatial


def _slot_loops(ctx: list, red_loop: T.For, what: str) -> list:
    """The enclosing threadIdx.y/z loops (constant): each slot reduces on its own."""
    slots: list = []
    for lp in ctx:
        if lp.kind == "threadIdx.x":
            raise LoweringError(f"{what}: it is computed inside loop {lp.loop_var.name} bound to threadIdx.x, "
                                f"and its reduce loop {red_loop.loop_var.name} is bound to threadIdx.x too")
        if lp.kind in THREAD_TAGS:
            if not isinstance(const_value(lp.extent), int):
                raise LoweringError(f"{what}: the enclosing loop {lp.loop_var.name} bound to {lp.kind} has "
                                    f"the extent {T.expr_str(lp.extent)}, not a constant")
            slots.append(lp)
    return slots


def _operands(store: T.Store, what: str) -> tuple:
    """``(src, current_first)`` of the update ``X[I] = X[I] op src`` (or ``src op X[I]``)."""
    X, index, value = store.buffer, store.index, store.value
    if not (isinstance(value, BinaryOp) and value.op in _COMBINERS):
        raise LoweringError(f"{what}: its update {T.expr_str(value)} is not a sum, product, max or min")
    cur_first = isinstance(value.a, BufferLoad) and value.a.buffer is X and structural_equal(value.a.index, index)
    cur_second = isinstance(value.b, BufferLoad) and value.b.buffer is X and structural_equal(value.b.index, index)
    src = value.b if cur_first else value.a
    if not (cur_first or cur_second) or any(ld.buffer is X for ld in expr_loads(src)):
        raise LoweringError(f"{what}: its update {T.expr_str(value)} is not {X.name}[...] combined with a value")
    return src, cur_first


def _init_store(init_elem: T.Stmt, store: T.Store, spatial: list, what: str) -> T.Store:
    """The init: a nest of loops and conditions around the one store of the identity into the
    element ``store`` updates, over (at least) the spatial loops."""
    X, index = store.buffer, store.index
    inits = [n for n in T.walk_stmts(init_elem) if isinstance(n, T.Store)]
    init = inits[0] if len(inits) == 1 else None
    if init is None or init.buffer is not X or not structural_equal(init.index, index) or any(
            isinstance(n, (T.Allocate, T.Barrier, T.Evaluate)) for n in T.walk_stmts(init_elem)):
        raise LoweringError(f"{what}: its init is not a loop nest storing the identity into {X.name}")
    init_loops = [n for n in T.walk_stmts(init_elem) if isinstance(n, T.For)]
    for lp in init_loops:
        if lp.kind in GPU_TAGS:
            raise LoweringError(f"{what}: its init loop {lp.loop_var.name} is bound to {lp.kind} (inside the "
                                f"reduce loops): not supported")
    bound_vars = {id(lp.loop_var) for lp in init_loops}
    for lp in spatial:
        if id(lp.loop_var) not in bound_vars:
            raise LoweringError(f"{what}: its spatial loop {lp.loop_var.name} is not a loop of its init")
    return init


def _serial_loop(s: T.Stmt) -> T.Stmt | None:
    """A vectorized loop made serial (the final stores read shared memory), else None."""
    if isinstance(s, T.For) and s.kind == "vectorized":
        return replace(s, kind="serial")
    return None
