"""Thread tag unification: one launch variable per GPU tag in a kernel.

    kernel subtree --UnifyThreadBinding(root, ...).collect(); .per_thread()-->
        per-thread code where every blockIdx/threadIdx loop is its tag's launch variable

TVM's ``src/tir/transforms/unify_thread_binding.cc`` (``UnifyThreadBinding``): inside a
kernel every loop bound to a tag is replaced by that tag's one variable (named after the
tag).  Its extent is the launch dimension: all ``blockIdx`` loops of a tag must agree; for
``threadIdx`` the largest extent wins and a loop with a smaller one gets its body guarded
(``ThreadGuard(threadIdx.x < extent)``: cooperative fetching).  ``vthread`` loops become
serial loops and the ``shared`` Allocates are hoisted (collected in ``shared``, to go between
the block and thread loops).  The nesting rules and the cross-thread race check
(:meth:`UnifyThreadBinding.check_reductions`) raise ``LoweringError`` as listed in
``scheduler_core.lowering.gpu``'s docstring.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from scheduler_core.base.errors import LoweringError
from scheduler_core.base.gpu_spec import BLOCK_TAGS, GPU_TAGS, THREAD_TAGS
from scheduler_core.ir import tir as T
from scheduler_core.ir.expr import CmpOp, Expr, IntImm, Var
from scheduler_core.ir.expr_functor import free_vars, substitute
from scheduler_core.ir.simplify import const_value, simplify
from scheduler_core.ir.stmt_functor import map_stmt

from .gpu_index import less_than, same_value
from .kernel_form import ThreadGuard, has_gpu_loop, is_update

__all__ = ["TagInfo", "UnifyThreadBinding"]


@dataclass
class TagInfo:
    loops: list = field(default_factory=list)  # the For loops bound to the tag
    extent: Expr | None = None


class UnifyThreadBinding:
    """One kernel's GPU loops unified: one launch variable and extent per tag (see the module
    docstring); ``root`` is the kernel's subtree of host code after the thread allreduce."""

    def __init__(self, root: T.Stmt, name: str, host_vars: set, func: T.PrimFunc, partials: set):
        self.root = root
        self.name = name
        self.host_vars = host_vars  # Vars whose values the host knows at launch
        self.func = func
        self.tags: dict = {}  # tag -> _TagInfo
        self.launch_vars: dict = {}  # tag -> Var
        self.shared: list = []  # hoisted shared buffers, in program order
        self.partials = partials  # the per-thread partials of cross-thread reductions

    # -- analysis ------------------------------------------------------------
    def collect(self) -> None:
        """Gather the GPU loops per tag and check the nesting rules."""
        self._collect(self.root, {}, {})
        for tag, info in self.tags.items():
            first = info.loops[0]
            if tag in BLOCK_TAGS:
                for lp in info.loops[1:]:
                    if not same_value(lp.extent, first.extent):
                        raise LoweringError(
                            f"{self.name}: loops {first.loop_var.name} (extent {T.expr_str(first.extent)}) and "
                            f"{lp.loop_var.name} (extent {T.expr_str(lp.extent)}) are both bound to {tag} "
                            f"with different extents")
                info.extent = first.extent
            else:
                ext = first.extent
                for lp in info.loops[1:]:
                    if same_value(lp.extent, ext):
                        continue
                    bigger = less_than(ext, lp.extent)
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
            if s.kind == "vectorized" and has_gpu_loop(s.body):
                raise LoweringError(f"vectorized loop {s.loop_var.name} encloses blockIdx/threadIdx loops")
            if s.kind in GPU_TAGS:
                prev = outer.get(s.kind)
                if prev is not None:
                    if s.kind in BLOCK_TAGS:
                        raise LoweringError(
                            f"{s.kind} is bound twice on one path: loop {s.loop_var.name} inside loop "
                            f"{prev.loop_var.name}")
                    if not same_value(s.extent, prev.extent):
                        larger = less_than(prev.extent, s.extent)
                        if larger is None or larger:
                            raise LoweringError(
                                f"loop {s.loop_var.name} bound to {s.kind} with extent {T.expr_str(s.extent)} "
                                f"inside loop {prev.loop_var.name} bound to {s.kind} with extent "
                                f"{T.expr_str(prev.extent)}: an inner loop of a thread tag may not be "
                                f"larger than the outer one")
                self.tags.setdefault(s.kind, TagInfo()).loops.append(s)
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
        """The per-thread code: GPU loops replaced by their launch variable (guarded where
        smaller).  A kernel with no GPU loop gets one block of one thread."""
        for tag in self.tags:
            self.launch_vars[tag] = Var(tag, "int32")
        bound = {tag: info.extent for tag, info in self.tags.items()}
        body = self._rewrite(self.root, {}, bound)
        if not self.tags:  # no GPU binding: one thread of one block
            for tag in ("blockIdx.x", "threadIdx.x"):
                self.tags[tag] = TagInfo(extent=IntImm(1))
                self.launch_vars[tag] = Var(tag, "int32")
        return body

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
                if not same_value(s.extent, bound[s.kind]):
                    body = ThreadGuard(simplify(v < fe(s.extent)), body)
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
        return map_stmt(s, f_expr=fe)

    def _hoist(self, buf: T.Buffer) -> None:
        if buf.nbytes is None:
            raise LoweringError(f"shared buffer {buf.name} has the size {[T.expr_str(x) for x in buf.shape]}, "
                                f"not a constant: static shared memory needs a constant size")
        if buf not in self.shared:
            self.shared.append(buf)

    def check_reductions(self, body: T.Stmt) -> None:
        """Raise LoweringError for a read-modify-write of one global/shared element by every
        thread (block) of a tag in the per-thread code ``body`` (a race)."""
        self._check_reductions(body, frozenset(), set())

    def _check_reductions(self, s: T.Stmt, single: frozenset, let_vars: set) -> None:
        """A read-modify-write of one global/shared element by every thread (block) of a tag
        races.  ``single``: the tags restricted to one thread by an enclosing guard."""
        if isinstance(s, ThreadGuard):
            c = s.cond
            if isinstance(c, CmpOp) and c.op == "lt" and const_value(c.b) == 1 and isinstance(c.a, Var):
                single = single | {t for t, v in self.launch_vars.items() if v is c.a}
        if isinstance(s, T.LetStmt):
            let_vars = let_vars | {s.var}
        if isinstance(s, T.Store) and s.buffer.scope != "local" and is_update(s):
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
        for c in T.stmt_children(s):
            self._check_reductions(c, single, let_vars)
