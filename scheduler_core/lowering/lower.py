"""Lowering: State -> loop program (``tir.PrimFunc``).

    State --plan (attach tree, regions, buffers)--> loop nests --passes--> PrimFunc

Reading guide:
1. ``_Plan`` decides, for every stage, where it is computed (root, inlined,
   attached at an iterator of another stage, or inside a scan's time loop),
   the region of its output it must compute (bound inference, consumers
   first: TVM's InferBound), and the buffer that holds it (a function
   argument, a scan's output, a root scratch buffer, or a local buffer sized
   by the region and allocated at the attach point).
2. ``StmtEmitter`` builds each stage's loop nest over its leaf iterators, with
   the stages attached at each loop placed at the start of that loop's body,
   reductions split into an init nest and an update nest, and ``likely``
   guards for non-divisible splits and over-approximated regions.
3. The unroll and vectorize passes then rewrite annotated loops.
"""

from __future__ import annotations

from dataclasses import dataclass

from scheduler_core.arith.int_set import Interval, interval, union
from scheduler_core.arith.linear_form import canonical, const_diff
from scheduler_core.arith.linear_memo import LinearForms
from scheduler_core.base.bounded_cache import BoundedCache
from scheduler_core.base.errors import LoweringError
from scheduler_core.dag.tensor import ScanOp, Tensor
from scheduler_core.ir import tir as T
from scheduler_core.ir.expr import (
    Expr,
    IntImm,
    TensorLoad,
    Var,
    as_expr,
)
from scheduler_core.ir.expr_functor import substitute, transform, walk
from scheduler_core.ir.simplify import simplify
from scheduler_core.schedule.iter_index import leaf_extents, root_values_with_guards
from scheduler_core.schedule.loop_state import State, scan_body_stages
from scheduler_core.schedule.transform_step import check_compute_locations

from .schedule_ops import StmtEmitter, const_of, tensor_key, vars_of


@dataclass
class BufferInfo:
    """Where a tensor lives: ``buffer`` holds the region starting at ``offsets``."""

    buffer: T.Buffer
    offsets: tuple  # per dim, Expr (0 for whole tensors)
    strides: tuple  # per dim, Expr

    def flat_index(self, indices, forms: LinearForms | None = None) -> Expr:
        """The element index ``canonical(sum((i - offset) * stride))`` of ``indices``.

        forms: the linear forms of a lowering (:class:`LinearForms`); with them the sum is
        added up on the (remembered) linear forms of its parts instead of being built,
        simplified and read back, which gives the same expression.
        """
        if forms is not None:
            fast = forms.flat_index(indices, self.offsets, self.strides)
            if fast is not None:
                return fast
        out: Expr = IntImm(0)
        for i, o, s in zip(indices, self.offsets, self.strides):
            term = as_expr(i) if const_of(o) == 0 else as_expr(i) - o
            out = out + (term if const_of(s) == 1 else term * s)
        return canonical(simplify(out))


def _const_dims(shape) -> list | None:
    """``[(value, dtype)]`` of a shape of int32/int64 constants (a Python int is int32), else None."""
    out = []
    for s in shape:
        if type(s) is int:
            out.append((s, "int32"))
        elif type(s) is IntImm and s.dtype in ("int32", "int64"):
            out.append((s.value, s.dtype))
        else:
            return None
    return out


def _row_major(shape, align=()) -> tuple:
    dims = _const_dims(shape)
    if dims is not None:
        # The constant case on Python ints: what simplify folds below (a product takes the
        # wider dtype of its factors), with no expression built and folded per dimension.
        out: list = [None] * len(shape)
        aligned = {a: (f, o) for a, f, o in align}
        n, dtype = 1, "int32"
        for d in range(len(shape) - 1, -1, -1):
            if d in aligned:
                f, o = aligned[d]
                while n % f != o:
                    n += 1
                dtype = "int32"
            out[d] = IntImm(n, dtype)
            n *= dims[d][0]
            dtype = "int64" if "int64" in (dtype, dims[d][1]) else "int32"
            if n.bit_length() > 64:
                break  # beyond any index type: left to simplify below
        else:
            return tuple(out)
    strides: list[Expr] = [IntImm(1)] * len(shape)
    acc: Expr = IntImm(1)
    aligned = {a: (f, o) for a, f, o in align}
    for d in range(len(shape) - 1, -1, -1):
        if d in aligned:
            f, o = aligned[d]
            c = const_of(acc)
            if isinstance(c, int):
                while c % f != o:
                    c += 1
                acc = IntImm(c)
        strides[d] = acc
        acc = simplify(acc * as_expr(shape[d]))
    return tuple(strides)


def _size(shape, strides) -> Expr:
    if not shape:
        return IntImm(1)
    return simplify(as_expr(strides[0]) * as_expr(shape[0]))


class _Plan:
    """Attach tree, regions and buffers of every stage of ``state``."""

    def __init__(self, state: State, args: list):
        # The steps leave compute locations to the final state, as TVM's do; its
        # InferBound refuses an impossible one, and so does this (naming stage and loop).
        self.state = check_compute_locations(state)
        self.stages = state.stages
        self.args = args
        self.n = len(self.stages)
        self.op_stage = {}
        for k, st in enumerate(self.stages):
            self.op_stage[id(st.op)] = k
        self._scan_setup()
        self._attach_setup()
        self.leaf_vars: dict[int, dict] = {}  # stage id -> {leaf iterator name: Var}
        self.root_vals: dict[int, dict] = {}  # stage id -> {root var name: value of the leaves}
        self.guards: dict[int, list] = {}  # stage id -> conditions of non-divisible splits
        self.regions: dict[int, list] = {}  # stage id -> [Interval] per output dimension
        self.leaf_ext: dict[int, dict] = {}  # stage id -> {leaf iterator name: extent}
        self.buffers: dict = {}  # tensor key -> BufferInfo
        self.allocs_root: list = []
        self.allocs_at: dict = {}  # stage id -> [BufferInfo] to allocate at its attach point
        self.forms = LinearForms()  # the linear forms of index expressions, for flat indices
        self._bind_args()
        for k in range(self.n - 1, -1, -1):
            if self.where[k] in ("placeholder", "inlined"):
                continue
            self._infer_region(k)
            self._make_indices(k)
        for k in range(self.n):
            if self.where[k] not in ("placeholder", "inlined", "scan"):
                self._assign_buffer(k)

    # -- scans -------------------------------------------------------------
    def _scan_setup(self):
        self.scan_of = scan_body_stages(self.state)  # stage id -> scan stage id (scan bodies)
        self.alias = {}        # tensor key -> (scan stage id, output index)
        for k, st in enumerate(self.stages):
            if not isinstance(st.op, ScanOp):
                continue
            op = st.op
            for i in range(op.num_outputs):
                for t in (op.init[i], op.update[i], op.state_placeholder[i]):
                    self.alias[tensor_key(t)] = (k, i)

    # -- where each stage is computed ---------------------------------------
    def _attach_setup(self):
        self.where = []
        self.attach = {}
        for k, st in enumerate(self.stages):
            if st.op_type == "placeholder":
                self.where.append("placeholder")
            elif st.compute_at == "inlined":
                self.where.append("inlined")
            elif st.compute_at == "iter":
                self.where.append("iter")
                self.attach[k] = st.attach
            elif k in self.scan_of:
                scan = self.stages[self.scan_of[k]]
                self.where.append("iter")
                self.attach[k] = (self.scan_of[k], scan.iters[-1].name)
            elif st.op_type == "scan":
                self.where.append("scan")
            else:
                self.where.append("root")
        self.children: dict = {}
        for k, (tgt, it) in self.attach.items():
            if self.where[tgt] == "inlined":
                raise LoweringError(f"{self.stages[k].name} is attached to inlined {self.stages[tgt].name}")
            self.children.setdefault((tgt, it), []).append(k)

    # -- arguments ---------------------------------------------------------
    def _bind_args(self):
        names: set = set()
        self.arg_buffers = []
        self.scalar_params = []
        seen_vars: set = set()
        for t in self.args:
            name = t.name.replace(".", "_")
            while name in names:
                name += "_"
            names.add(name)
            buf = T.Buffer(name, t.dtype, tuple(t.shape))
            self.arg_buffers.append(buf)
            info = BufferInfo(buf, tuple(IntImm(0) for _ in t.shape), _row_major(t.shape))
            self.buffers[tensor_key(t)] = info
            for s in t.shape:
                for v in vars_of(s):
                    if id(v) not in seen_vars:
                        seen_vars.add(id(v))
                        self.scalar_params.append(v)
            # The stage computing an argument writes it directly (origin op match).
            for st in self.stages:
                if st.origin_op is t.op and st.op is not t.op:
                    self.buffers[tensor_key(st.op.output(t.value_index))] = info
        self.used_names = names
        for key, (scan_k, i) in self.alias.items():
            scan_out = self.stages[scan_k].op.output(i)
            info = self._tensor_info(scan_out)
            if info is None:
                raise LoweringError(f"the scan {self.stages[scan_k].name} output {i} is not an argument")
            self.buffers[key] = info

    def _tensor_info(self, t: Tensor):
        if tensor_key(t) in self.buffers:
            return self.buffers[tensor_key(t)]
        st = self.stages[self.op_stage[id(t.op)]]
        if st.origin_op is not None and st.origin_op is not st.op:
            return self.buffers.get((id(st.origin_op), t.value_index))
        return None

    def _unique(self, name: str) -> str:
        name = name.replace(".", "_")
        while name in self.used_names:
            name += "_"
        self.used_names.add(name)
        return name

    # -- inlining ----------------------------------------------------------
    def inline(self, e: Expr) -> Expr:
        """``e`` with reads of inlined stages replaced by their bodies (recursively)."""
        def fn(n):
            if isinstance(n, TensorLoad):
                k = self.op_stage.get(id(n.tensor.op))
                if k is not None and self.where[k] == "inlined":
                    op = self.stages[k].op
                    idx = tuple(self.inline(i) for i in n.indices)
                    body = substitute(op.bodies[n.tensor.value_index], {iv.var: i for iv, i in zip(op.axis, idx)})
                    return self.inline(body)
            return None
        return transform(e, fn)

    def body_of(self, k: int, out: int = 0) -> Expr:
        """Stage ``k``'s body of output ``out`` with the inlined stages substituted (computed
        once per plan: bound inference and emission both ask for it)."""
        memo = self.__dict__.setdefault("_bodies", {})
        hit = memo.get((k, out))
        if hit is None:
            hit = memo[(k, out)] = self.inline(self.stages[k].op.bodies[out])
        return hit

    def loads_of(self, k: int) -> list:
        """The tensor reads of stage ``k``'s inlined bodies (found once per plan: bound
        inference asks for the reads of every consumer of every attached stage)."""
        memo = self.__dict__.setdefault("_reads", {})
        hit = memo.get(k)
        if hit is None:
            hit = memo[k] = [n for b in self.bodies_of(k) for n in _loads(b)]
        return hit

    def bodies_of(self, k: int) -> tuple:
        """The bodies of every output of stage ``k`` (one for most ops), inlined."""
        return tuple(self.body_of(k, i) for i in range(self.stages[k].op.num_outputs))

    # -- bound inference ---------------------------------------------------
    def full_region(self, k: int) -> list:
        op = self.stages[k].op
        return [Interval(IntImm(0), simplify(as_expr(s))) for s in op.output_shape(0)]

    def _infer_region(self, k: int):
        st = self.stages[k]
        if self.where[k] == "scan":
            self.regions[k] = [Interval(simplify(as_expr(st.op.scan_axis.dom_min)),
                                        simplify(as_expr(st.op.scan_axis.dom_extent)))]
            return
        if self.where[k] == "root" or self._is_scan_update(k):
            region = self.full_region(k)
            if self._is_scan_update(k):
                scan_k = self.scan_of[k]
                time = self.root_vals[scan_k][self.stages[scan_k].root[0].var.name]
                region[0] = Interval(time, IntImm(1))
            self.regions[k] = region
            return
        self.regions[k] = self._region_from_consumers(k)

    def _is_scan_update(self, k: int) -> bool:
        return any(self.stages[k].op is t.op for t in self._scan_updates())

    def _scan_updates(self):
        out: list = []
        for st in self.stages:
            if isinstance(st.op, ScanOp):
                out.extend(st.op.update)
        return out

    def _scope_env(self, tgt: int, it_name: str) -> tuple:
        """Vars relaxed inside loop ``it_name`` of stage ``tgt``, and the stages in that scope."""
        env = {}
        tst = self.stages[tgt]
        pos = tst.iter_index(it_name)
        for it in tst.iters[pos + 1:]:
            env[self.leaf_vars[tgt][it.name]] = Interval(IntImm(0), self.leaf_ext[tgt][it.name])
        inside = {tgt}
        frontier = [(tgt, i.name) for i in tst.iters[pos + 1:]] + [(tgt, it_name)]
        while frontier:
            key = frontier.pop()
            for c in self.children.get(key, []):
                if c in inside or c not in self.leaf_vars:
                    continue
                inside.add(c)
                for it in self.stages[c].iters:
                    env[self.leaf_vars[c][it.name]] = Interval(IntImm(0), self.leaf_ext[c][it.name])
                    frontier.append((c, it.name))
        return env, inside

    def is_shared(self, k: int) -> bool:
        """Whether stage ``k`` is a ``cache_read``/``cache_write`` stage of scope ``"shared"``
        computed inside another stage (a root one lives in global memory)."""
        st = self.stages[k]
        return self.where[k] == "iter" and st.origin_op is None and st.name.endswith(".shared")

    def _thread_env(self, k: int) -> dict:
        """The ``threadIdx`` loops enclosing stage ``k``'s attach point, relaxed to their range.

        A shared buffer is filled by the threads of a block together (TVM's InferBound
        relaxes the thread indices for shared scope), so its region covers every thread.
        """
        env: dict = {}
        seen: set = set()
        while self.where[k] == "iter" and k not in seen:
            seen.add(k)
            tgt, it_name = self.attach[k]
            tst = self.stages[tgt]
            for it in tst.iters[:tst.iter_index(it_name) + 1]:
                if it.annotation.startswith("threadIdx") and it.name in self.leaf_vars.get(tgt, {}):
                    env[self.leaf_vars[tgt][it.name]] = Interval(IntImm(0), self.leaf_ext[tgt][it.name])
            k = tgt
        return env

    def _region_from_consumers(self, k: int) -> list:
        tgt, it_name = self.attach[k]
        env, inside = self._scope_env(tgt, it_name)
        if self.is_shared(k):
            env = {**self._thread_env(k), **env}
        op = self.stages[k].op
        reads: list = [[] for _ in op.output_shape(0)]
        for c in range(self.n):
            if self.where[c] in ("placeholder", "inlined") or c == k:
                continue
            if isinstance(self.stages[c].op, ScanOp):
                continue
            loads = [n for n in self.loads_of(c) if n.tensor.op is op]
            if not loads:
                continue
            if c not in inside:
                raise LoweringError(
                    f"{self.stages[k].name} is computed inside {self.stages[tgt].name}.{it_name} "
                    f"but {self.stages[c].name} reads it outside that loop")
            sub = self.root_sub(c)
            ranges = self._root_ranges(c, env)
            for ld in loads:
                for d, idx in enumerate(ld.indices):
                    # Two supersets of the reads: the index over the relaxed loops, and the
                    # index over the consumer's root axes kept inside its region by its
                    # guards (TVM's PassUpDomain: a non-divisible split of a consumer
                    # axis still covers only that axis's range).  Their intersection is too.
                    reads[d].append(_intersect(self.forms.interval(substitute(idx, sub), env),
                                               self.forms.interval(idx, {**env, **ranges}), self.forms))
        full = self.full_region(k)
        region = []
        for d, rs in enumerate(reads):
            u = union(rs) if rs else None
            if u is None or u.const_extent is None and const_of(full[d].extent) is not None:
                u = full[d]
            fe = const_of(full[d].extent)
            if u.const_extent is not None and isinstance(fe, int) and u.const_extent >= fe:
                u = full[d]
            region.append(u)
        return region

    def _root_ranges(self, c: int, env: dict) -> dict:
        """Root var of stage ``c`` -> the values it takes where ``c``'s body runs, with the
        loop variables of ``env`` relaxed: its values over the loops, cut to ``c``'s region
        (spatial axes) or domain (reduce axes), which the guards of ``c`` enforce."""
        st = self.stages[c]
        spatial = [iv for iv in st.root if iv.kind != "reduce"]
        dom = {iv.var.name: r for iv, r in zip(spatial, self.regions[c])}
        for iv in st.root:
            if iv.kind == "reduce":
                dom[iv.var.name] = Interval(simplify(as_expr(iv.dom_min)), simplify(as_expr(iv.dom_extent)))
        out = {}
        for iv in st.root:
            r = dom.get(iv.var.name)
            lo = None if r is None else self.forms.interval(r.lo, env)
            within = None if lo is None or r is None else _add_extent(lo, r.extent)
            out[iv.var] = _intersect(self.forms.interval(self.root_vals[c][iv.var.name], env), within, self.forms)
            if out[iv.var] is None:
                del out[iv.var]
        return out

    def root_sub(self, c: int) -> dict:
        st = self.stages[c]
        return {iv.var: self.root_vals[c][iv.var.name] for iv in st.root}

    # -- per-stage loop variables and root index values ----------------------
    def _make_indices(self, k: int):
        st = self.stages[k]
        region = self.regions[k]
        spatial = [iv for iv in st.root if iv.kind != "reduce"]
        root_ext = {}
        for iv, r in zip(spatial, region):
            root_ext[iv.var.name] = r.extent
        for iv in st.root:
            if iv.kind == "reduce":
                root_ext[iv.var.name] = simplify(as_expr(iv.dom_extent))
        ext = leaf_extents(st, root_ext)
        missing = [it.name for it in st.iters if it.name not in ext or it.extent is None]
        if missing:
            raise LoweringError(f"stage {st.name}: unknown extent of iterators {missing}")
        self.leaf_ext[k] = ext
        self.leaf_vars[k] = {it.name: Var(it.name.replace("@", ".").rstrip(".")) for it in st.iters}
        # A loop of one trip contributes 0 to every index: no loop variable is needed.
        values = {name: (IntImm(0) if const_of(ext[name]) == 1 else var)
                  for name, var in self.leaf_vars[k].items()}
        vals, guards = root_values_with_guards(st, values, root_ext, extents=ext)
        out = {}
        for iv, r in zip(spatial, region):
            out[iv.var.name] = self.forms.canonical_add(r.lo, vals[iv.var.name])
        for iv in st.root:
            if iv.kind == "reduce":
                out[iv.var.name] = simplify(as_expr(iv.dom_min) + vals[iv.var.name])
        self.root_vals[k] = out
        # Guard an over-approximated region against the op's real domain (TVM's
        # MakeBoundCheck).  A stage of a scan's body is no exception: attached inside a
        # loop of another body stage, its region is a tile of that loop, which a
        # non-divisible split can push past the op's domain (past the last step too).
        # A scan's update stage is exact: one time step (the scan's own guard keeps the
        # time inside the scan) and whole dimensions otherwise.
        if self.where[k] == "iter" and not self._is_scan_update(k):
            full = self.full_region(k)
            for iv, r, f in zip(spatial, region, full):
                if r is not f:
                    v = out[iv.var.name]
                    if not self._provably_in(v, f.extent):
                        guards.append(simplify(v < f.extent))
                        guards.append(simplify(v >= 0))
        self.guards[k] = guards

    def range_env(self) -> dict:
        """Every loop variable made so far -> its range ``[0, extent)`` (cached once complete)."""
        cached = getattr(self, "_range_env", None)
        if cached is not None and len(cached[1]) == len(self.leaf_vars):
            return cached[0]
        # a new dict (a caller may hold the previous one), with the ranges made before reused
        env = {} if cached is None else dict(cached[0])
        done = set() if cached is None else cached[1]
        for kk, vars_ in self.leaf_vars.items():
            if kk in done:
                continue
            for name, var in vars_.items():
                env[var] = Interval(IntImm(0), self.leaf_ext[kk][name])
        self._range_env = (env, set(self.leaf_vars))
        return env

    def _provably_in(self, v: Expr, extent: Expr) -> bool:
        e = const_of(extent)
        if not isinstance(e, int):
            return False
        env = self.range_env()
        fast = self.forms.walk_interval(v, env)
        if fast is not None:  # interval(v, env) is (from_linear(terms, c), ext): const iff no terms
            terms, lo, ext = fast
            return not terms and lo >= 0 and lo + ext <= e
        r = interval(v, env)
        if r is None:
            return False
        lo, ext = const_of(r.lo), r.const_extent
        return isinstance(lo, int) and ext is not None and lo >= 0 and lo + ext <= e

    # -- buffers -----------------------------------------------------------
    def _assign_buffer(self, k: int):
        """A buffer for each output of stage ``k`` (a multi-output compute has several)."""
        for i in range(self.stages[k].op.num_outputs):
            self._assign_output_buffer(k, i)

    def _assign_output_buffer(self, k: int, i: int):
        st = self.stages[k]
        t = st.op.output(i)
        if self._tensor_info(t) is not None:
            self.buffers[tensor_key(t)] = self._tensor_info(t)
            return
        name = st.name if st.op.num_outputs == 1 else f"{st.name}.v{i}"
        if self.where[k] == "root":
            shape = tuple(simplify(as_expr(s)) for s in t.shape)
            strides = _row_major(shape, st.storage_align)
            buf = T.Buffer(self._unique(name), t.dtype, (_size(shape, strides),), "global")
            info = BufferInfo(buf, tuple(IntImm(0) for _ in shape), strides)
            self.allocs_root.append(info)
        else:
            region = self.regions[k]
            shape = tuple(r.extent for r in region)
            strides = _row_major(shape, st.storage_align)
            scope = "shared" if self.is_shared(k) else "local"
            buf = T.Buffer(self._unique(name), t.dtype, (_size(shape, strides),), scope)
            info = BufferInfo(buf, tuple(r.lo for r in region), strides)
            self.allocs_at.setdefault(k, []).append(info)
        self.buffers[tensor_key(t)] = info


def _add_extent(x: Interval, extent: Expr) -> Interval | None:
    """The values ``x + [0, extent)``."""
    e = const_of(extent)
    if x.const_extent is None or not isinstance(e, int) or e < 1:
        return None
    return Interval(x.lo, IntImm(x.const_extent + e - 1))


def _intersect(a: Interval | None, b: Interval | None, forms: LinearForms | None = None) -> Interval | None:
    """An interval holding ``a & b`` where both hold the same set (either when not comparable);
    ``forms``: the linear forms of the lowering, for the difference of the low ends."""
    if a is None or b is None:
        return b if a is None else a
    d = const_diff(b.lo, a.lo) if forms is None else forms.const_diff(b.lo, a.lo)
    ea, eb = a.const_extent, b.const_extent
    if d is None or ea is None or eb is None:
        return b if ea is None and eb is not None else a
    lo, hi = max(0, d), min(ea, d + eb)
    if hi <= lo:  # disjoint: no such point runs; keep a
        return a
    return Interval(canonical(a.lo + IntImm(lo)) if lo else a.lo, IntImm(hi - lo))


def _loads(e: Expr) -> list:
    return [n for n in walk(e) if isinstance(n, TensorLoad)]


def lower_state(state: State, args: list | None = None, name: str = "main") -> T.PrimFunc:
    """Lower ``state`` to a PrimFunc whose parameters are ``args`` (default: the DAG's tensors).

    Loops keep their kinds (parallel, vectorized, unrolled); the passes that rewrite them
    run later, once, in the driver (``scheduler_core.driver.build_module``).
    Raises LoweringError when a stage's placement or bounds cannot be lowered.
    """
    key = (id(state), None if args is None else tuple(id(a) for a in args), name)
    keep = (state,) if args is None else (state, *args)  # kept, so their ids are not reused
    return _LOWERED.get_or_make(key, lambda: _lower_state_uncached(state, args, name), keep=keep)


# States and PrimFuncs are immutable, so the search's validity check, feature
# extraction and build can share one lowering of the same State object.
_LOWERED: BoundedCache[tuple, T.PrimFunc] = BoundedCache(2048)


def is_lowered(state: State) -> bool:
    """Whether ``lower_state(state)`` (default args and name) is cached in this process."""
    return _LOWERED.get((id(state), None, "main"), keep=(state,)) is not None


def _lower_state_uncached(state: State, args, name: str) -> T.PrimFunc:
    args = list(args if args is not None else state.dag.tensors)
    for k, a in enumerate(args):
        if not isinstance(a, Tensor):
            raise LoweringError(f"args[{k}] is {type(a).__name__}, not a Tensor")
    plan = _Plan(state, args)
    body = StmtEmitter(plan).emit_all()
    return T.PrimFunc(name, tuple(plan.arg_buffers), tuple(plan.scalar_params), body)


__all__ = ["lower_state", "BufferInfo"]
