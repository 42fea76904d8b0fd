"""GPU lowering: the loop program of ``lower_state`` -> the kernel form of a ``cuda`` target.

    lower_state(state) --lower_for_gpu(func, "cuda")--> kernel-form PrimFunc
        --CUDA C code generation / CPU emulation--> ...

The kernel form is specified in ``docs/gpu_kernel_form.md``; in short:

1. **Host code and kernels.** The top level of the program is host code: ``Allocate``s of
   global buffers, ``LetStmt``s, serial loops and conditions that enclose GPU-bound loops
   (a scan's time loop launches its kernels once per step).  Every maximal subtree below
   them that starts at a ``blockIdx``/``threadIdx`` loop is one kernel; a root nest with no
   GPU binding becomes a one-thread kernel (grid 1, block 1).
2. **One loop per tag.** Inside a kernel every loop bound to a tag is replaced by that
   tag's one launch variable (named after the tag).  Its extent is the launch dimension:
   all ``blockIdx`` loops of a tag must agree; for ``threadIdx`` the largest extent wins
   and a loop with a smaller one gets its body guarded by ``if threadIdx.x < extent``
   (cooperative fetching: a stage bound to ``threadIdx.x`` inside the consumer's
   ``threadIdx.x`` loop runs on the same threads).  ``vthread`` loops become serial loops.
   The kernel is rebuilt as block loops, the ``shared`` Allocates (hoisted from wherever
   the stages were attached), thread loops, then the per-thread code, where code that was
   outside every thread loop runs on every thread (as in CUDA).
3. **Barriers.** ``Barrier()`` goes where a shared buffer written in the per-thread code
   is then read (read-after-write) and at the end of a loop body whose next iteration
   writes a shared buffer the body read (write-after-read at the back edge).  The
   guards of step 2 are pushed down around the barrier-free parts, so a barrier is only
   ever under thread-uniform control flow; where a barrier would be needed under a
   thread-dependent condition, ``LoweringError`` names the shared buffer (its stage).
4. ``attrs["kernels"]``: one launch description per kernel in program order (name, grid,
   block, shared_bytes, params); ``attrs["target_kind"] = "cuda"``.
5. **Cross-thread reductions.** Before step 2, a reduction whose reduce loop is bound to
   threadIdx.x (Ansor's RuleCrossThreadReduction) becomes TVM's thread allreduce, written
   with the kernel form's own statements (see ``_ThreadAllReduce``): per-thread partials
   in a ``local`` buffer ``<X>.red_local`` (from the identity), a ``shared`` buffer
   ``<X>.red_shared`` with one slot per thread (per spatial element of the reduction's loops
   and per enclosing threadIdx.y/z), a tree reduction over the width padded to a power of
   two (``if threadIdx.x < n`` steps, a barrier after each), then the result stored where the
   init stored: by thread 0, or by every thread for a ``local`` result that later code of
   the block reads.  Any sum/prod/max/min update ``X[I] = X[I] op v``; a reduction whose
   init is host code (a zero-rank output) makes one kernel with its reduce loops.

Errors (``LoweringError``, naming the loop or buffer): a ``parallel`` loop; two different
extents bound to one ``blockIdx`` tag in a kernel, or a ``blockIdx`` tag bound twice on one
path; a ``threadIdx`` tag bound inside a loop of the same tag with a larger extent; a launch
extent that depends on a variable of the kernel; a shared buffer whose size is not a
constant; a ``local`` or ``shared`` buffer allocated in host code around kernels, or a
``local`` buffer written by thread-bound loops it is allocated outside of; a
read-modify-write of a global or shared element by every thread (block) of a tag that is
not a cross-thread reduction of step 5 (a reduction across blocks, or an update with no
init in the program); a barrier needed under thread-dependent control flow.  For a
cross-thread reduction: its reduce loop bound to threadIdx.y/z, more than one bound reduce
loop, a GPU-bound loop inside its reduce loops, a threadIdx.x loop around it, a
non-constant thread count or spatial extent inside the reduce loops, an update that is not
a sum/prod/max/min of the element, or several outputs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from scheduler_core.base.errors import LoweringError
from scheduler_core.base.target import Target
from scheduler_core.ir import tir as T
from scheduler_core.ir.expr import BinaryOp, BufferLoad, CmpOp, Expr, IntImm, Var, dtype_bits
from scheduler_core.ir.expr_functor import free_vars, structural_equal, substitute, walk
from scheduler_core.ir.simplify import const_value, simplify

BLOCK_TAGS = ("blockIdx.x", "blockIdx.y", "blockIdx.z")
THREAD_TAGS = ("threadIdx.x", "threadIdx.y", "threadIdx.z")
GPU_TAGS = BLOCK_TAGS + THREAD_TAGS
KERNEL_ANNOTATION = "kernel"  # For.annotations key on a kernel's outermost loop: its launch name
# For.annotations key (removed before the kernel is returned) of a loop whose iterations
# access disjoint parts of the shared buffers: no barrier at its back edge.
_DISJOINT = "gpu_lowering.disjoint_iterations"


# ---------------------------------------------------------------------------
# Generic statement helpers
# ---------------------------------------------------------------------------

@dataclass(frozen=True, eq=False)
class _ThreadGuard(T.Stmt):
    """``if cond: body`` for the threads beyond a loop's extent; pushed down around the
    barrier-free statements before the kernel is returned (never leaves this module)."""

    cond: Expr
    body: T.Stmt


def _children(s: T.Stmt) -> tuple:
    if isinstance(s, _ThreadGuard):
        return (s.body,)
    return T.stmt_children(s)


def _walk(s: T.Stmt):
    stack = [s]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(reversed(_children(node)))


def _stmt_exprs(s: T.Stmt) -> tuple:
    """The expressions held directly by ``s`` (not by its children)."""
    if isinstance(s, T.Store):
        return (s.index, s.value) + (() if s.predicate is None else (s.predicate,))
    if isinstance(s, T.For):
        return (s.min, s.extent)
    if isinstance(s, (T.IfThenElse, _ThreadGuard)):
        return (s.cond,)
    if isinstance(s, T.LetStmt):
        return (s.value,)
    if isinstance(s, T.Evaluate):
        return (s.value,)
    return ()


def _map_exprs(s: T.Stmt, fe: Callable[[Expr], Expr]) -> T.Stmt:
    """``s`` with ``fe`` applied to every expression of the subtree (buffers kept)."""
    if isinstance(s, T.Store):
        pred = None if s.predicate is None else fe(s.predicate)
        return T.Store(s.buffer, fe(s.index), fe(s.value), pred)
    if isinstance(s, T.For):
        return T.For(s.loop_var, fe(s.min), fe(s.extent), s.kind, _map_exprs(s.body, fe), dict(s.annotations))
    if isinstance(s, T.IfThenElse):
        other = None if s.else_case is None else _map_exprs(s.else_case, fe)
        return T.IfThenElse(fe(s.cond), _map_exprs(s.then_case, fe), other, s.likely)
    if isinstance(s, _ThreadGuard):
        return _ThreadGuard(fe(s.cond), _map_exprs(s.body, fe))
    if isinstance(s, T.SeqStmt):
        return T.SeqStmt(tuple(_map_exprs(c, fe) for c in s.seq))
    if isinstance(s, T.Allocate):
        return T.Allocate(s.buffer, _map_exprs(s.body, fe))
    if isinstance(s, T.LetStmt):
        return T.LetStmt(s.var, fe(s.value), _map_exprs(s.body, fe))
    if isinstance(s, T.Evaluate):
        return T.Evaluate(fe(s.value))
    return s  # Barrier


def _loads(e: Expr) -> list:
    return [n for n in walk(e) if isinstance(n, BufferLoad)]


def _has_gpu_loop(s: T.Stmt) -> bool:
    return any(isinstance(n, T.For) and n.kind in GPU_TAGS for n in _walk(s))


def _has_barrier(s: T.Stmt) -> bool:
    return any(isinstance(n, T.Barrier) for n in _walk(s))


def _same(a: Expr, b: Expr) -> bool:
    ca, cb = const_value(a), const_value(b)
    if isinstance(ca, int) and isinstance(cb, int):
        return ca == cb
    return structural_equal(simplify(a), simplify(b)) or const_value(simplify(a - b)) == 0


def _less(a: Expr, b: Expr) -> bool | None:
    """``a < b`` when decidable (constants, or ``b - a`` a constant), else None."""
    d = const_value(simplify(b - a))
    if isinstance(d, int):
        return d > 0
    return None


def _bytes(buf: T.Buffer) -> int | None:
    n = 1
    for s in buf.shape:
        v = const_value(s)
        if not isinstance(v, int):
            return None
        n *= v
    return n * max(1, dtype_bits(buf.dtype) // 8)


def _launch_value(e: Expr) -> int | str:
    v = const_value(e)
    return v if isinstance(v, int) else T.expr_str(e)


# ---------------------------------------------------------------------------
# Reductions across threadIdx.x: TVM's thread allreduce
# ---------------------------------------------------------------------------

_COMBINERS = {"add": "sum", "mul": "prod", "max": "max", "min": "min"}


@dataclass
class _XUpdate:
    """A read-modify-write ``X[I] = X[I] op v`` inside a thread loop whose variable ``I``
    does not use: every thread of the loop updates the same element."""

    store: T.Store
    path: list  # the statements from the searched statement down to the store's parent
    threads: list  # the thread-bound loops on the path whose variable the index does not use


def _flat(s: T.Stmt) -> list:
    if isinstance(s, T.SeqStmt):
        return [x for c in s.seq for x in _flat(c)]
    return [s]


def _rmw(s: T.Store) -> bool:
    return any(ld.buffer is s.buffer and structural_equal(ld.index, s.index) for ld in _loads(s.value))


def _xupdates(s: T.Stmt) -> list:
    """The cross-thread updates inside ``s`` (a buffer allocated below a thread loop is that
    thread's own: its updates are not cross-thread)."""
    out: list = []

    def go(n: T.Stmt, path: list) -> None:
        if isinstance(n, T.Store):
            if _rmw(n):
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
                    and not any(ld.buffer is buf for ld in _loads(n.value))):
                return i
    return None


def _reduction_regions(elems: list) -> list:
    """``(i, j)`` for each cross-thread reduction of a statement sequence: its init in
    ``elems[i]`` and its update (inside a thread loop) in ``elems[j]``, non-overlapping."""
    out: list = []
    start = 0
    for j, c in enumerate(elems):
        ups = _xupdates(c) if _has_gpu_loop(c) else []
        if not ups:
            continue
        i = _find_init(elems, j, ups[0].store.buffer, ups[0].store.index)
        if i is not None and i >= start:
            out.append((i, j))
            start = j + 1
    return out


def _replace_stmt(s: T.Stmt, old: T.Stmt, new: T.Stmt) -> T.Stmt:
    """``s`` with the statement ``old`` (by identity) replaced by ``new``."""
    if s is old:
        return new
    if isinstance(s, T.SeqStmt):
        return T.SeqStmt(tuple(_replace_stmt(c, old, new) for c in s.seq))
    if isinstance(s, T.IfThenElse):
        other = None if s.else_case is None else _replace_stmt(s.else_case, old, new)
        return replace(s, then_case=_replace_stmt(s.then_case, old, new), else_case=other)
    if isinstance(s, (T.For, T.Allocate, T.LetStmt)):
        return replace(s, body=_replace_stmt(s.body, old, new))
    return s


def _linear(loops: list) -> tuple:
    """``(sum (v - min) * stride, product of extents)`` of constant-extent loops, outer first."""
    index: Expr = IntImm(0)
    total = 1
    for lp in loops:
        ext = const_value(lp.extent)
        assert isinstance(ext, int)
        index = index * ext + (lp.loop_var - lp.min)
        total *= ext
    return simplify(index), total


class _ThreadAllReduce:
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
            elems = _flat(s)
            regions = _reduction_regions(elems)
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
        """The allreduce of the reduction whose init is in ``elems[0]`` and update in ``elems[-1]``."""
        init_elem, main = elems[0], elems[-1]
        ups = _xupdates(main)
        up = ups[0]
        X, index = up.store.buffer, up.store.index
        what = f"{self.kernel}: stage {X.name} (a reduction across threadIdx.x)"
        others = sorted({u.store.buffer.name for u in ups if u.store.buffer is not X})
        if others:
            raise LoweringError(f"{what}: its reduce loops also update {', '.join(others)} across threads; "
                                f"a cross-thread reduction of several outputs is not supported")
        if len(ups) != 1:
            raise LoweringError(f"{what}: {len(ups)} update stores of {X.name} in its reduce loops; "
                                f"a cross-thread reduction needs exactly one")
        store = up.store
        if store.predicate is not None:
            raise LoweringError(f"{what}: a predicated (vector) update is not supported")
        bound = up.threads
        if len(bound) > 1:
            loops = ", ".join(f"{lp.loop_var.name} ({lp.kind})" for lp in bound)
            raise LoweringError(f"{what}: the reduce loops {loops} are all bound to threads; a cross-thread "
                                f"reduction over more than one bound loop is not supported (bind one)")
        (red_loop,) = bound
        if red_loop.kind != "threadIdx.x":
            raise LoweringError(f"{what}: its reduce loop {red_loop.loop_var.name} is bound to {red_loop.kind}; "
                                f"a cross-thread reduction is supported on threadIdx.x only")
        used = {id(v) for v in free_vars(index)}
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
        E = const_value(red_loop.extent)
        if not isinstance(E, int):
            raise LoweringError(f"{what}: its reduce loop {red_loop.loop_var.name} bound to threadIdx.x has the "
                                f"extent {T.expr_str(red_loop.extent)}, not a constant")
        value = store.value
        if not (isinstance(value, BinaryOp) and value.op in _COMBINERS):
            raise LoweringError(f"{what}: its update {T.expr_str(value)} is not a sum, product, max or min")
        cur_first = isinstance(value.a, BufferLoad) and value.a.buffer is X and structural_equal(value.a.index, index)
        cur_second = isinstance(value.b, BufferLoad) and value.b.buffer is X and structural_equal(value.b.index, index)
        src = value.b if cur_first else value.a
        if not (cur_first or cur_second) or any(ld.buffer is X for ld in _loads(src)):
            raise LoweringError(f"{what}: its update {T.expr_str(value)} is not {X.name}[...] combined with a value")

        def combine(a: Expr, b: Expr) -> Expr:
            return BinaryOp(value.op, a, b, value.dtype)

        # the init: a nest of loops and conditions around the one store of the identity
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

        p_index, n_elem = _linear(spatial)
        s_index, n_slot = _linear(slots)
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
            return T.For(q, IntImm(0), IntImm(n_elem), "serial", body(q), {_DISJOINT: True})

        def threads(extent: int, body: Callable[[Expr], T.Stmt]) -> T.Stmt:
            t = Var("red.t", "int32")
            return T.For(t, IntImm(0), IntImm(extent), "threadIdx.x", body(t))

        p_load = BufferLoad(partial, p_index, X.dtype)
        new_value = combine(p_load, src) if cur_first else combine(src, p_load)
        parts: list = [over_elements(lambda q: T.Store(partial, q, init.value))]
        parts.extend(elems[1:-1])
        parts.append(_replace_stmt(main, store, T.Store(partial, p_index, new_value)))
        parts.append(threads(E, lambda t: over_elements(
            lambda q: T.Store(shared, slot(q, t), BufferLoad(partial, q, X.dtype)))))
        w = width // 2
        while w >= 1:
            def step(t: Expr, w: int = w) -> T.Stmt:
                return over_elements(lambda q: T.Store(shared, slot(q, t), combine(
                    BufferLoad(shared, slot(q, t), X.dtype), BufferLoad(shared, slot(q, t + w), X.dtype))))
            parts.append(threads(min(w, E - w), step))
            w //= 2
        final = _replace_stmt(init_elem, init, T.Store(X, index, BufferLoad(shared, slot(p_index, IntImm(0)),
                                                                             X.dtype)))
        final = _serial_loops(final)
        if X.scope != "local":  # thread 0 writes the result; a local X is every thread's own
            written = final
            final = threads(1, lambda t: written)
        parts.append(final)
        return T.Allocate(shared, T.Allocate(partial, T.seq(*parts)))


def _serial_loops(s: T.Stmt) -> T.Stmt:
    """``s`` with its vectorized loops serial (the final stores read shared memory)."""
    if isinstance(s, T.For):
        kind = "serial" if s.kind == "vectorized" else s.kind
        return replace(s, kind=kind, body=_serial_loops(s.body))
    if isinstance(s, T.SeqStmt):
        return T.SeqStmt(tuple(_serial_loops(c) for c in s.seq))
    if isinstance(s, T.IfThenElse):
        other = None if s.else_case is None else _serial_loops(s.else_case)
        return replace(s, then_case=_serial_loops(s.then_case), else_case=other)
    if isinstance(s, (T.Allocate, T.LetStmt)):
        return replace(s, body=_serial_loops(s.body))
    return s


# ---------------------------------------------------------------------------
# One kernel
# ---------------------------------------------------------------------------

@dataclass
class _TagInfo:
    loops: list = field(default_factory=list)  # the For loops bound to the tag
    extent: Expr | None = None


class _Kernel:
    """Builds one kernel from the subtree ``root`` of host code."""

    def __init__(self, root: T.Stmt, name: str, host_vars: set, func: T.PrimFunc):
        self.root = root
        self.name = name
        self.host_vars = host_vars  # Vars whose values the host knows at launch
        self.func = func
        self.tags: dict = {}  # tag -> _TagInfo
        self.launch_vars: dict = {}  # tag -> Var
        self.shared: list = []  # hoisted shared buffers, in program order
        self.partials: set = set()  # the per-thread partials of cross-thread reductions

    # -- analysis ------------------------------------------------------------
    def collect(self) -> None:
        """Gather the GPU loops per tag and check the nesting rules."""
        self._collect(self.root, {}, {})
        for tag, info in self.tags.items():
            first = info.loops[0]
            if tag in BLOCK_TAGS:
                for lp in info.loops[1:]:
                    if not _same(lp.extent, first.extent):
                        raise LoweringError(
                            f"{self.name}: loops {first.loop_var.name} (extent {T.expr_str(first.extent)}) and "
                            f"{lp.loop_var.name} (extent {T.expr_str(lp.extent)}) are both bound to {tag} "
                            f"with different extents")
                info.extent = first.extent
            else:
                ext = first.extent
                for lp in info.loops[1:]:
                    if _same(lp.extent, ext):
                        continue
                    bigger = _less(ext, lp.extent)
                    if bigger is None:
                        raise LoweringError(
                            f"{self.name}: cannot order the extents {T.expr_str(ext)} and "
                            f"{T.expr_str(lp.extent)} of loops bound to {tag} ({lp.loop_var.name})")
                    if bigger:
                        ext = lp.extent
                info.extent = ext
            allowed = set(self.host_vars) | set(self.func.scalar_params)
            for v in free_vars(info.extent):
                if v not in allowed:
                    lp = next(lp for lp in info.loops if v in free_vars(lp.extent))
                    raise LoweringError(
                        f"{self.name}: the extent {T.expr_str(lp.extent)} of loop {lp.loop_var.name} bound to "
                        f"{tag} depends on {v.name}, a variable of the kernel (launch dimensions are host values)")

    def _collect(self, s: T.Stmt, outer: dict, local_allocs: dict) -> None:
        """``outer``: tag -> the enclosing loop bound to it; ``local_allocs``: local buffer ->
        the thread tags enclosing its Allocate."""
        if isinstance(s, T.For):
            if s.kind == "parallel":
                raise LoweringError(f"loop {s.loop_var.name} is parallel: a cuda target has no parallel "
                                    f"loops (bind it to blockIdx/threadIdx instead)")
            if s.kind == "vectorized" and _has_gpu_loop(s.body):
                raise LoweringError(f"vectorized loop {s.loop_var.name} encloses blockIdx/threadIdx loops")
            if s.kind in GPU_TAGS:
                prev = outer.get(s.kind)
                if prev is not None:
                    if s.kind in BLOCK_TAGS:
                        raise LoweringError(
                            f"{s.kind} is bound twice on one path: loop {s.loop_var.name} inside loop "
                            f"{prev.loop_var.name}")
                    if not _same(s.extent, prev.extent):
                        larger = _less(prev.extent, s.extent)
                        if larger is None or larger:
                            raise LoweringError(
                                f"loop {s.loop_var.name} bound to {s.kind} with extent {T.expr_str(s.extent)} "
                                f"inside loop {prev.loop_var.name} bound to {s.kind} with extent "
                                f"{T.expr_str(prev.extent)}: an inner loop of a thread tag may not be "
                                f"larger than the outer one")
                self.tags.setdefault(s.kind, _TagInfo()).loops.append(s)
                outer = {**outer, s.kind: s}
            self._collect(s.body, outer, local_allocs)
            return
        if isinstance(s, T.Allocate):
            if s.buffer.scope == "global":
                raise LoweringError(f"global buffer {s.buffer.name} is allocated inside a kernel")
            if s.buffer.scope == "local":
                local_allocs = {**local_allocs, s.buffer: frozenset(t for t in outer if t in THREAD_TAGS)}
        if isinstance(s, T.Store) and s.buffer in local_allocs and s.buffer not in self.partials:
            inner = {t for t in outer if t in THREAD_TAGS} - local_allocs[s.buffer]
            if inner:
                tag = sorted(inner)[0]
                raise LoweringError(
                    f"local buffer {s.buffer.name} is written inside loop {outer[tag].loop_var.name} bound to "
                    f"{tag} but allocated outside it: each thread would hold only its own part; compute it "
                    f"inside the thread loops or use scope 'shared'")
        for c in T.stmt_children(s):
            self._collect(c, outer, local_allocs)

    # -- rewriting -------------------------------------------------------------
    def per_thread(self) -> T.Stmt:
        """The per-thread code: GPU loops replaced by their launch variable (guarded where smaller)."""
        for tag in self.tags:
            self.launch_vars[tag] = Var(tag, "int32")
        bound = {tag: info.extent for tag, info in self.tags.items()}
        return self._rewrite(self.root, {}, bound)

    def _rewrite(self, s: T.Stmt, sub: dict, bound: dict) -> T.Stmt:
        """``bound``: tag -> the extent its variable is known to be below here."""
        def fe(e: Expr) -> Expr:
            return substitute(e, sub)

        if isinstance(s, T.For):
            if s.kind in GPU_TAGS:
                v = self.launch_vars[s.kind]
                value: Expr = v if const_value(s.min) == 0 else v + fe(s.min)
                inner = {**bound, s.kind: s.extent}
                body = self._rewrite(s.body, {**sub, s.loop_var: value}, inner)
                if not _same(s.extent, bound[s.kind]):
                    body = _ThreadGuard(simplify(v < fe(s.extent)), body)
                return body
            kind = "serial" if s.kind == "vthread" else s.kind
            return T.For(s.loop_var, fe(s.min), fe(s.extent), kind, self._rewrite(s.body, sub, bound),
                         dict(s.annotations))
        if isinstance(s, T.Allocate):
            if s.buffer.scope == "shared":
                self._hoist(s.buffer)
                return self._rewrite(s.body, sub, bound)
            return T.Allocate(s.buffer, self._rewrite(s.body, sub, bound))
        if isinstance(s, T.SeqStmt):
            return T.SeqStmt(tuple(self._rewrite(c, sub, bound) for c in s.seq))
        if isinstance(s, T.IfThenElse):
            other = None if s.else_case is None else self._rewrite(s.else_case, sub, bound)
            return T.IfThenElse(fe(s.cond), self._rewrite(s.then_case, sub, bound), other, s.likely)
        if isinstance(s, T.LetStmt):
            return T.LetStmt(s.var, fe(s.value), self._rewrite(s.body, sub, bound))
        return _map_exprs(s, fe)

    def _hoist(self, buf: T.Buffer) -> None:
        if _bytes(buf) is None:
            raise LoweringError(f"shared buffer {buf.name} has the size {[T.expr_str(x) for x in buf.shape]}, "
                                f"not a constant: static shared memory needs a constant size")
        if buf not in self.shared:
            self.shared.append(buf)

    # -- assembly ----------------------------------------------------------------
    def build(self) -> tuple:
        """``(kernel statement, launch description)``."""
        allreduce = _ThreadAllReduce(self.name)
        self.root = allreduce.rewrite(self.root, [])
        self.partials = allreduce.partials
        self.collect()
        body = self.per_thread()
        if not self.tags:  # no GPU binding: one thread of one block
            for tag in ("blockIdx.x", "threadIdx.x"):
                self.tags[tag] = _TagInfo(extent=IntImm(1))
                self.launch_vars[tag] = Var(tag, "int32")
        self._check_reductions(body, frozenset(), set())
        threads = [t for t in THREAD_TAGS if t in self.tags]
        tdep = {self.launch_vars[t] for t in threads}
        if not all(const_value(self.tags[t].extent) == 1 for t in threads):
            body = _Barriers(tdep).plan(body)
        body = _sink_guards(body, _Uniform(tdep))
        for tag in THREAD_TAGS:
            if tag in self.tags:
                body = T.For(self.launch_vars[tag], IntImm(0), self.tags[tag].extent, tag, body)
        if self.shared and not any(t in self.tags for t in BLOCK_TAGS):  # one block holds the shared memory
            self.tags["blockIdx.x"] = _TagInfo(extent=IntImm(1))
            self.launch_vars["blockIdx.x"] = Var("blockIdx.x", "int32")
        for buf in reversed(self.shared):
            body = T.Allocate(buf, body)
        for tag in BLOCK_TAGS:
            if tag in self.tags:
                body = T.For(self.launch_vars[tag], IntImm(0), self.tags[tag].extent, tag, body)
        assert isinstance(body, T.For)
        body = replace(body, annotations={**body.annotations, KERNEL_ANNOTATION: self.name})
        return body, self._launch(body)

    def _check_reductions(self, s: T.Stmt, single: frozenset, let_vars: set) -> None:
        """A read-modify-write of one global/shared element by every thread (block) of a tag
        races.  ``single``: the tags restricted to one thread by an enclosing guard."""
        if isinstance(s, _ThreadGuard):
            c = s.cond
            if isinstance(c, CmpOp) and c.op == "lt" and const_value(c.b) == 1 and isinstance(c.a, Var):
                single = single | {t for t, v in self.launch_vars.items() if v is c.a}
        if isinstance(s, T.LetStmt):
            let_vars = let_vars | {s.var}
        if isinstance(s, T.Store) and s.buffer.scope != "local" and any(
                ld.buffer is s.buffer and structural_equal(ld.index, s.index) for ld in _loads(s.value)):
            used = set(free_vars(s.index))
            if not used & let_vars:
                tags = THREAD_TAGS if s.buffer.scope == "shared" else GPU_TAGS
                for tag in tags:
                    info = self.tags.get(tag)
                    if info is None or tag in single or const_value(info.extent) == 1:
                        continue
                    if self.launch_vars[tag] not in used:
                        raise LoweringError(
                            f"stage {s.buffer.name}: every {tag} of {self.name} updates the same element "
                            f"{s.buffer.name}[{T.expr_str(s.index)}] (a reduction across GPU threads or blocks "
                            f"is not supported: bind only spatial loops of a reduction)")
        for c in _children(s):
            self._check_reductions(c, single, let_vars)

    def _launch(self, kernel: T.Stmt) -> dict:
        bufs: list = []
        used_vars: set = set()
        for n in _walk(kernel):
            for e in _stmt_exprs(n):
                for x in walk(e):
                    if isinstance(x, BufferLoad) and x.buffer.scope == "global" and x.buffer not in bufs:
                        bufs.append(x.buffer)
                    elif isinstance(x, Var):
                        used_vars.add(x)
            if isinstance(n, T.Store) and n.buffer.scope == "global" and n.buffer not in bufs:
                bufs.append(n.buffer)
        order = {b: k for k, b in enumerate(self.func.params)}
        bufs.sort(key=lambda b: (0, order[b]) if b in order else (1, 0))
        scalars = [v.name for v in self.func.scalar_params if v in used_vars]
        host = sorted(v.name for v in self.host_vars if v in used_vars and v not in self.func.scalar_params)

        def dims(tags: tuple) -> list:
            return [_launch_value(self.tags[t].extent) if t in self.tags else 1 for t in tags]

        return {"name": self.name, "grid": dims(BLOCK_TAGS), "block": dims(THREAD_TAGS),
                "shared_bytes": sum(_bytes(b) or 0 for b in self.shared),
                "params": [b.name for b in bufs] + scalars + host}


# ---------------------------------------------------------------------------
# Uniformity, barriers, guards
# ---------------------------------------------------------------------------

class _Uniform:
    """Whether an expression has the same value on every thread of a block: it uses no
    ``threadIdx`` variable, no variable bound to a thread-dependent value, and loads no
    ``local`` buffer."""

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
        if not self(value):
            self.tdep.add(var)


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
    for n in _walk(s):
        for e in _stmt_exprs(n):
            reads.update(ld.buffer for ld in _loads(e) if ld.buffer.scope == "shared")
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
    if isinstance(s, T.IfThenElse):
        a, st = _head(s.then_case)
        b, se = (_EMPTY, False) if s.else_case is None else _head(s.else_case)
        return a | b | _accesses_of_exprs(s), st and se
    if isinstance(s, (T.Allocate, T.LetStmt, _ThreadGuard)):
        a, stop = _head(_children(s)[0])
        return a | _accesses_of_exprs(s), stop
    return _accesses(s), False


def _accesses_of_exprs(s: T.Stmt) -> _Pend:
    reads = {ld.buffer for e in _stmt_exprs(s) for ld in _loads(e) if ld.buffer.scope == "shared"}
    return _Pend(frozenset(reads), frozenset())


def _names(bufs) -> str:
    return ", ".join(sorted(b.name for b in bufs))


class _Barriers:
    """Places ``Barrier()``s in the per-thread code (TVM's thread-sync planner, simplified)."""

    def __init__(self, tdep: set):
        self.uniform = _Uniform(tdep)

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
            if p1.conflicts(_head(body)[0]) and not s.annotations.get(_DISJOINT):
                return replace(s, body=T.seq(body, T.Barrier())), (_EMPTY if runs else pend)
            return replace(s, body=body), (p1 if runs else p1 | pend)
        if isinstance(s, T.IfThenElse):
            if not self.uniform(s.cond):
                return self._nonuniform(s, pend, f"the thread-dependent condition {T.expr_str(s.cond)}")
            then, pt = self._plan(s.then_case, pend)
            if s.else_case is None:
                return replace(s, then_case=then), pt | pend
            other, pe = self._plan(s.else_case, pend)
            return replace(s, then_case=then, else_case=other), pt | pe
        if isinstance(s, _ThreadGuard):  # pushed down around the barrier-free parts afterwards
            body, p = self._plan(s.body, pend)
            return _ThreadGuard(s.cond, body), p | pend
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
        for c in _children(s):
            planned, end = _Barriers(self.uniform.tdep)._plan(c, _EMPTY)
            need = _has_barrier(planned)
            if isinstance(s, T.For) and not need:
                need = bool(end.conflicts(_head(planned)[0]))
            if need:
                acc = _accesses(s)
                raise LoweringError(
                    f"stage writing shared buffer(s) {_names(acc.writes) or _names(acc.reads)}: a barrier is "
                    f"needed under {what}, where not every thread of the block would reach it")
        return s, pend | _accesses(s)


def _sink_guards(s: T.Stmt, uniform: _Uniform) -> T.Stmt:
    """Replace each ``_ThreadGuard`` by ``IfThenElse``s around its barrier-free parts."""
    if isinstance(s, _ThreadGuard):
        body = _sink_guards(s.body, uniform)
        return _push(s.cond, body, uniform)
    if isinstance(s, T.LetStmt):
        uniform.bind(s.var, s.value)
    kids = _children(s)
    if not kids:
        return s
    if isinstance(s, T.SeqStmt):
        return T.SeqStmt(tuple(_sink_guards(c, uniform) for c in s.seq))
    if isinstance(s, T.IfThenElse):
        other = None if s.else_case is None else _sink_guards(s.else_case, uniform)
        return replace(s, then_case=_sink_guards(s.then_case, uniform), else_case=other)
    assert isinstance(s, (T.For, T.Allocate, T.LetStmt))
    if isinstance(s, T.For) and _DISJOINT in s.annotations:
        s = replace(s, annotations={k: v for k, v in s.annotations.items() if k != _DISJOINT})
    return replace(s, body=_sink_guards(kids[0], uniform))


def _push(cond: Expr, s: T.Stmt, uniform: _Uniform) -> T.Stmt:
    """``if cond: s`` with the condition moved inside the uniform statements holding barriers."""
    if not _has_barrier(s):
        return T.IfThenElse(cond, s)
    if isinstance(s, T.Barrier):
        return s
    if isinstance(s, T.SeqStmt):
        out: list = []
        run: list = []
        for c in s.seq:
            if _has_barrier(c):
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


# ---------------------------------------------------------------------------
# Host code
# ---------------------------------------------------------------------------

class _Host:
    def __init__(self, func: T.PrimFunc):
        self.func = func
        self.kernels: list = []

    def visit(self, s: T.Stmt, host_vars: set) -> T.Stmt:
        if isinstance(s, T.For) and s.kind in GPU_TAGS:
            return self.kernel(s, host_vars)
        if isinstance(s, T.SeqStmt):
            # a cross-thread reduction whose init is host code (a zero-rank output) is one kernel
            elems = _flat(s)
            out: list = []
            k = 0
            for i, j in _reduction_regions(elems):
                out.extend(self.visit(c, host_vars) for c in elems[k:i])
                out.append(self.kernel(T.seq(*elems[i:j + 1]), host_vars))
                k = j + 1
            out.extend(self.visit(c, host_vars) for c in elems[k:])
            return T.SeqStmt(tuple(out))
        if isinstance(s, T.Allocate) and s.buffer.scope == "global":
            return replace(s, body=self.visit(s.body, host_vars))
        if not _has_gpu_loop(s):
            return self.kernel(s, host_vars)
        if isinstance(s, T.For):
            if s.kind not in ("serial", "unrolled"):
                raise LoweringError(f"loop {s.loop_var.name} ({s.kind}) encloses blockIdx/threadIdx loops: "
                                    f"only serial loops may run on the host around kernels")
            return T.For(s.loop_var, s.min, s.extent, "serial", self.visit(s.body, host_vars | {s.loop_var}),
                         dict(s.annotations))
        if isinstance(s, T.IfThenElse):
            other = None if s.else_case is None else self.visit(s.else_case, host_vars)
            return replace(s, then_case=self.visit(s.then_case, host_vars), else_case=other)
        if isinstance(s, T.LetStmt):
            return replace(s, body=self.visit(s.body, host_vars | {s.var}))
        if isinstance(s, T.Allocate):
            raise LoweringError(
                f"{s.buffer.scope} buffer {s.buffer.name} is allocated in host code around kernels (its stage "
                f"is attached outside the blockIdx/threadIdx loops of its consumer); attach it inside them "
                f"or compute it at root")
        raise LoweringError(f"unexpected {type(s).__name__} around GPU loops")

    def kernel(self, s: T.Stmt, host_vars: set) -> T.Stmt:
        name = f"{self.func.name}_kernel{len(self.kernels)}"
        stmt, launch = _Kernel(s, name, host_vars, self.func).build()
        self.kernels.append(launch)
        return stmt


def lower_for_gpu(func: T.PrimFunc, target: Any = "cuda") -> T.PrimFunc:
    """The kernel form (docs/gpu_kernel_form.md) of ``func``, the output of ``lower_state``.

    Parameters
    ----------
    func : PrimFunc from ``lower_state`` (before or after the unroll/vectorize passes)
    target : str or Target, a ``cuda`` target

    Returns a PrimFunc with the same params whose body is host code and kernels, with
    ``attrs["target_kind"] = "cuda"`` and ``attrs["kernels"]`` (launch descriptions).
    A function already in kernel form is returned unchanged.  Raises LoweringError (see
    the module docstring) and InvalidTargetError for a bad target string.
    """
    parsed = Target.parse(target)
    if parsed.kind != "cuda":
        raise LoweringError(f"lower_for_gpu needs a cuda target, got {parsed.str!r}")
    if func.attrs.get("target_kind") == "cuda" and "kernels" in func.attrs:
        return func
    host = _Host(func)
    body = host.visit(func.body, set(func.scalar_params))
    attrs: dict[str, Any] = {**func.attrs, "target_kind": "cuda", "kernels": host.kernels}
    return replace(func, body=body, attrs=attrs)


__all__ = ["lower_for_gpu", "BLOCK_TAGS", "THREAD_TAGS", "GPU_TAGS", "KERNEL_ANNOTATION"]
