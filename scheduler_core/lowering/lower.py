"""Lowering: State -> loop program (``tir.PrimFunc``).

    State --plan (attach tree, regions, buffers)--> loop nests --passes--> PrimFunc

Reading guide:
1. ``_Plan`` decides, for every stage, where it is computed (root, inlined,
   attached at an iterator of another stage, or inside a scan's time loop),
   the region of its output it must compute (bound inference, consumers
   first: TVM's InferBound), and the buffer that holds it (a function
   argument, a scan's output, a root scratch buffer, or a local buffer sized
   by the region and allocated at the attach point).
2. ``_Emitter`` builds each stage's loop nest over its leaf iterators, with
   the stages attached at each loop placed at the start of that loop's body,
   reductions split into an init nest and an update nest, and ``likely``
   guards for non-divisible splits and over-approximated regions.
3. The unroll and vectorize passes then rewrite annotated loops.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from scheduler_core.base.errors import LoweringError
from scheduler_core.dag.tensor import ScanOp, Tensor
from scheduler_core.ir import tir as T
from scheduler_core.ir.bound import (
    Interval,
    canonical,
    const_diff,
    interval,
    simplify_divmod,
    union,
)
from scheduler_core.ir.expr import (
    BufferLoad,
    Expr,
    FloatImm,
    IntImm,
    Reduce,
    TensorLoad,
    Var,
    as_expr,
    binary,
)
from scheduler_core.ir.expr_functor import reduce_identity, substitute, transform, walk
from scheduler_core.ir.simplify import const_value, simplify
from scheduler_core.schedule.iter_index import leaf_extents, root_values_with_guards
from scheduler_core.schedule.loop_state import State, scan_body_stages
from scheduler_core.schedule.transform_step import check_compute_locations

_KIND = {"none": "serial", "unroll": "unrolled", "vectorize": "vectorized", "parallel": "parallel"}
_COMBINE = {"sum": lambda a, b: a + b, "prod": lambda a, b: a * b,
            "max": lambda a, b: binary("max", a, b), "min": lambda a, b: binary("min", a, b)}


def _key(t: Tensor) -> tuple:
    return (id(t.op), t.value_index)


def _cv(e):
    """``const_value(e)`` with the common constant cases answered without simplifying."""
    if isinstance(e, (IntImm, FloatImm)):
        return e.value
    if isinstance(e, (int, float)):
        return e
    return const_value(e)


@dataclass
class BufferInfo:
    """Where a tensor lives: ``buffer`` holds the region starting at ``offsets``."""

    buffer: T.Buffer
    offsets: tuple  # per dim, Expr (0 for whole tensors)
    strides: tuple  # per dim, Expr

    def flat_index(self, indices) -> Expr:
        out: Expr = IntImm(0)
        for i, o, s in zip(indices, self.offsets, self.strides):
            term = as_expr(i) if _cv(o) == 0 else as_expr(i) - o
            out = out + (term if _cv(s) == 1 else term * s)
        return canonical(simplify(out))


def _row_major(shape, align=()) -> tuple:
    strides: list[Expr] = [IntImm(1)] * len(shape)
    acc: Expr = IntImm(1)
    aligned = {a: (f, o) for a, f, o in align}
    for d in range(len(shape) - 1, -1, -1):
        if d in aligned:
            f, o = aligned[d]
            c = _cv(acc)
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
                    self.alias[_key(t)] = (k, i)

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
            self.buffers[_key(t)] = info
            for s in t.shape:
                for v in _vars_of(s):
                    if id(v) not in seen_vars:
                        seen_vars.add(id(v))
                        self.scalar_params.append(v)
            # The stage computing an argument writes it directly (origin op match).
            for st in self.stages:
                if st.origin_op is t.op and st.op is not t.op:
                    self.buffers[_key(st.op.output(t.value_index))] = info
        self.used_names = names
        for key, (scan_k, i) in self.alias.items():
            scan_out = self.stages[scan_k].op.output(i)
            info = self._tensor_info(scan_out)
            if info is None:
                raise LoweringError(f"the scan {self.stages[scan_k].name} output {i} is not an argument")
            self.buffers[key] = info

    def _tensor_info(self, t: Tensor):
        if _key(t) in self.buffers:
            return self.buffers[_key(t)]
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
            loads = [n for b in self.bodies_of(c) for n in _loads(b) if n.tensor.op is op]
            if not loads:
                continue
            if c not in inside:
                raise LoweringError(
                    f"{self.stages[k].name} is computed inside {self.stages[tgt].name}.{it_name} "
                    f"but {self.stages[c].name} reads it outside that loop")
            sub = self._root_sub(c)
            ranges = self._root_ranges(c, env)
            for ld in loads:
                for d, idx in enumerate(ld.indices):
                    # Two supersets of the reads: the index over the relaxed loops, and the
                    # index over the consumer's root axes kept inside its region by its
                    # guards (TVM's PassUpDomain: a non-divisible split of a consumer
                    # axis still covers only that axis's range).  Their intersection is too.
                    reads[d].append(_intersect(interval(substitute(idx, sub), env),
                                               interval(idx, {**env, **ranges})))
        full = self.full_region(k)
        region = []
        for d, rs in enumerate(reads):
            u = union(rs) if rs else None
            if u is None or u.const_extent is None and _cv(full[d].extent) is not None:
                u = full[d]
            fe = _cv(full[d].extent)
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
            lo = None if r is None else interval(r.lo, env)
            within = None if lo is None or r is None else _add_extent(lo, r.extent)
            out[iv.var] = _intersect(interval(self.root_vals[c][iv.var.name], env), within)
            if out[iv.var] is None:
                del out[iv.var]
        return out

    def _root_sub(self, c: int) -> dict:
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
        values = {name: (IntImm(0) if _cv(ext[name]) == 1 else var)
                  for name, var in self.leaf_vars[k].items()}
        vals, guards = root_values_with_guards(st, values, root_ext)
        out = {}
        for iv, r in zip(spatial, region):
            out[iv.var.name] = canonical(r.lo + vals[iv.var.name])
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
        env = {}
        for kk, vars_ in self.leaf_vars.items():
            for name, var in vars_.items():
                env[var] = Interval(IntImm(0), self.leaf_ext[kk][name])
        self._range_env = (env, dict(self.leaf_vars))
        return env

    def _provably_in(self, v: Expr, extent: Expr) -> bool:
        r = interval(v, self.range_env())
        if r is None:
            return False
        lo, ext, e = _cv(r.lo), r.const_extent, _cv(extent)
        return isinstance(lo, int) and ext is not None and isinstance(e, int) and lo >= 0 and lo + ext <= e

    # -- buffers -----------------------------------------------------------
    def _assign_buffer(self, k: int):
        """A buffer for each output of stage ``k`` (a multi-output compute has several)."""
        for i in range(self.stages[k].op.num_outputs):
            self._assign_output_buffer(k, i)

    def _assign_output_buffer(self, k: int, i: int):
        st = self.stages[k]
        t = st.op.output(i)
        if self._tensor_info(t) is not None:
            self.buffers[_key(t)] = self._tensor_info(t)
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
        self.buffers[_key(t)] = info


def _add_extent(x: Interval, extent: Expr) -> Interval | None:
    """The values ``x + [0, extent)``."""
    e = _cv(extent)
    if x.const_extent is None or not isinstance(e, int) or e < 1:
        return None
    return Interval(x.lo, IntImm(x.const_extent + e - 1))


def _intersect(a: Interval | None, b: Interval | None) -> Interval | None:
    """An interval holding ``a & b`` where both hold the same set (either when not comparable)."""
    if a is None or b is None:
        return b if a is None else a
    d = const_diff(b.lo, a.lo)
    ea, eb = a.const_extent, b.const_extent
    if d is None or ea is None or eb is None:
        return b if ea is None and eb is not None else a
    lo, hi = max(0, d), min(ea, d + eb)
    if hi <= lo:  # disjoint: no such point runs; keep a
        return a
    return Interval(canonical(a.lo + IntImm(lo)) if lo else a.lo, IntImm(hi - lo))


def _vars_of(e) -> list:
    return [n for n in walk(as_expr(e)) if isinstance(n, Var)]


def _loads(e: Expr) -> list:
    return [n for n in walk(e) if isinstance(n, TensorLoad)]


class _Emitter:
    """Builds loop nests from a plan."""

    def __init__(self, plan: _Plan):
        self.p = plan

    def lower_expr(self, e: Expr, k: int) -> Expr:
        """Stage ``k``'s expression with root vars bound and tensor reads as buffer loads."""
        p = self.p
        e = substitute(e, p._root_sub(k))

        def fn(n):
            if isinstance(n, TensorLoad):
                info = p.buffers.get(_key(n.tensor))
                if info is None:
                    raise LoweringError(f"no buffer for tensor {n.tensor.name}; is it an argument?")
                idx = tuple(self.lower_expr_plain(i) for i in n.indices)
                return BufferLoad(info.buffer, self.tidy(info.flat_index(idx)), n.dtype)
            return None
        return self.tidy(simplify(transform(e, fn)))

    def tidy(self, e: Expr) -> Expr:
        """Drop floordiv/floormod that the loop bounds make trivial (``floordiv(j0*16 + j1, 16)``)."""
        return simplify_divmod(e, self.p.range_env())

    def lower_expr_plain(self, e: Expr) -> Expr:
        p = self.p

        def fn(n):
            if isinstance(n, TensorLoad):
                info = p.buffers[_key(n.tensor)]
                idx = tuple(self.lower_expr_plain(i) for i in n.indices)
                return BufferLoad(info.buffer, info.flat_index(idx), n.dtype)
            return None
        return transform(e, fn)

    def _loop(self, k: int, it, body: T.Stmt) -> T.Stmt:
        p = self.p
        st = p.stages[k]
        prag = st.pragma_dict().get(it.name, {})
        ann = {"auto_unroll_max_step": prag["auto_unroll_max_step"]} if "auto_unroll_max_step" in prag else {}
        kind = _KIND.get(it.annotation, it.annotation)
        var, ext = p.leaf_vars[k][it.name], p.leaf_ext[k][it.name]
        if _cv(ext) == 1 and not ann and kind in ("serial", "unrolled", "vectorized", "parallel"):
            return body  # a loop of one trip is its body (its variable was bound to 0)
        return T.For(var, IntImm(0), ext, kind, body, ann)

    def _attached(self, k: int, it_name: str, inner: T.Stmt) -> T.Stmt:
        """``inner`` preceded by the stages attached at ``k.it_name``, with their buffers."""
        kids = self.p.children.get((k, it_name), [])
        if not kids:
            return inner
        out = inner
        for c in reversed(kids):
            out = T.seq(self.emit(c), out)
            for info in reversed(self.p.allocs_at.get(c, [])):
                out = T.Allocate(info.buffer, out)
        return out

    def _nest(self, k: int, iters, innermost: T.Stmt, with_attached: bool = True) -> T.Stmt:
        body = innermost
        for it in reversed(iters):
            if with_attached:
                body = self._attached(k, it.name, body)
            body = self._loop(k, it, body)
        return body

    def _guarded(self, conds: list, s: T.Stmt) -> T.Stmt:
        conds = [c for c in conds if not (isinstance(c, IntImm) and c.value)]
        if not conds:
            return s
        cond = conds[0]
        for c in conds[1:]:
            cond = cond & c
        return T.IfThenElse(simplify(cond), s, None, likely=True)

    def emit(self, k: int) -> T.Stmt:
        p = self.p
        st = p.stages[k]
        if p.where[k] == "scan":
            # The stages of one time step run in the innermost time loop, guarded
            # against the extra steps of a non-divisible split of the time axis.
            last = st.iters[-1]
            step = self._guarded(p.guards[k], self._attached(k, last.name, T.SeqStmt(())))
            return self._nest(k, st.iters[:-1], self._loop(k, last, step))
        spatial = [iv for iv in st.root if iv.kind != "reduce"]
        idx = [p.root_vals[k][iv.var.name] for iv in spatial]
        # One (buffer, flat index, body) per output: a multi-output compute stores each
        # output in the same loop nest (TVM's MakeComputeStmt: one Provide per output).
        outs = []
        for i in range(st.op.num_outputs):
            info = p.buffers[_key(st.op.output(i))]
            outs.append((info, self.tidy(info.flat_index(idx)), p.body_of(k, i)))
        guards = [simplify(substitute(g, {})) for g in p.guards[k]]
        if not isinstance(outs[0][2], Reduce):
            stores = [T.Store(info.buffer, flat, self.lower_expr(body, k)) for info, flat, body in outs]
            return self._nest(k, st.iters, self._guarded(guards, T.seq(*stores)))
        return self._emit_reduce(k, st, outs, guards)

    def _emit_reduce(self, k, st, outs: list, guards) -> T.Stmt:
        """The init nest and the update nest of a reduction stage; ``outs``: (BufferInfo,
        flat index, Reduce body) per output, the Reduces sharing axes, combiner and condition."""
        p = self.p
        red_vars = {p.leaf_vars[k][it.name] for it in st.iters if it.kind == "reduce"}
        first_body: Reduce = outs[0][2]
        upd_conds = list(guards)
        if first_body.condition is not None:
            upd_conds.append(self.lower_expr(first_body.condition, k))
        updates, inits = [], []
        for info, flat, body in outs:
            cur = BufferLoad(info.buffer, flat, body.dtype)
            src = self.lower_expr(body.source, k)
            updates.append(T.Store(info.buffer, flat, _COMBINE[body.combiner](cur, src)))
            inits.append(T.Store(info.buffer, flat, reduce_identity(body.combiner, body.dtype)))
        update = self._guarded(upd_conds, T.seq(*updates))
        first = next(i for i, it in enumerate(st.iters) if it.kind == "reduce")
        outer, rest = st.iters[:first], st.iters[first:]
        init_iters = [it for it in rest if it.kind != "reduce"]
        init_guards = [g for g in guards if not (_vars_of(g) and set(map(id, _vars_of(g))) & set(map(id, red_vars)))]
        init = self._guarded(init_guards, T.seq(*inits))
        init_nest = self._nest(k, init_iters, init, with_attached=False)
        main = self._nest(k, rest, update)
        inner = T.seq(init_nest, main)
        return self._nest(k, outer, inner)

    def emit_all(self) -> T.Stmt:
        p = self.p
        parts = [self.emit(k) for k in range(p.n) if p.where[k] in ("root", "scan")]
        body = T.seq(*parts) if parts else T.SeqStmt(())
        for info in reversed(p.allocs_root):
            body = T.Allocate(info.buffer, body)
        return body


def lower_state(state: State, args: list | None = None, name: str = "main") -> T.PrimFunc:
    """Lower ``state`` to a PrimFunc whose parameters are ``args`` (default: the DAG's tensors).

    Loops keep their kinds (parallel, vectorized, unrolled); the passes that rewrite them
    run later, once, in the driver (``scheduler_core.driver.build_module``).
    Raises LoweringError when a stage's placement or bounds cannot be lowered.
    """
    key = (id(state), None if args is None else tuple(id(a) for a in args), name)
    hit = _LOWER_CACHE.get(key)
    if hit is not None and hit[0] is state:
        _LOWER_CACHE.move_to_end(key)
        return hit[1]
    func = _lower_state_uncached(state, args, name)
    _LOWER_CACHE[key] = (state, func)  # the state is kept so its id is not reused
    if len(_LOWER_CACHE) > 2048:
        _LOWER_CACHE.popitem(last=False)
    return func


# States and PrimFuncs are immutable, so the search's validity check, feature
# extraction and build can share one lowering of the same State object.
_LOWER_CACHE: OrderedDict = OrderedDict()


def _lower_state_uncached(state: State, args, name: str) -> T.PrimFunc:
    args = list(args if args is not None else state.dag.tensors)
    for k, a in enumerate(args):
        if not isinstance(a, Tensor):
            raise LoweringError(f"args[{k}] is {type(a).__name__}, not a Tensor")
    plan = _Plan(state, args)
    body = _Emitter(plan).emit_all()
    return T.PrimFunc(name, tuple(plan.arg_buffers), tuple(plan.scalar_params), body)


__all__ = ["lower_state", "BufferInfo"]
