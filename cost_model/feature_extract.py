"""Per-store features of one lowered loop program (Ansor section 5.2, feature.cc).

    PrimFunc (lower_state(...)) --PerStoreExtractor--> {stored buffer: FeatureSet}
                                              --rows()--> list of raw feature rows

Reading guide: the extractor walks the loop program once, keeping the stack of
enclosing loops (and the parallel / vectorized / unrolled ones), the product of
their extents and the current ``auto_unroll_max_step``.  At every ``Store`` it
computes the five groups of TVM's ``PerStoreFeatureExtractor``:

1. computation: float/int op counts of the stored value (times the number of
   times the store runs), vectorize/unroll/parallel loop counts, lengths,
   products and positions, GPU binding lengths;
2. buffer access: for every buffer the store reads or writes, the access type,
   bytes, unique bytes, cache lines, unique lines, reuse type/distance/count and
   stride (index analysis in ``index_form``);
3. the arithmetic-intensity curve (FLOPs / bytes as loops are added, sampled at
   10 points);
4. allocation (size and the loops around the allocation);
5. outer scope (number of loops, product of extents, auto_unroll_max_step);

and a sixth that TVM does not have (``EXTRA_NAMES``, ``PerStoreExtractor._extra``): the
innermost loop's strides, the register tile under the innermost reduction loop, the
unrolled statements, and a capacity-only cache-traffic estimate at three cache sizes.

As in TVM, features are kept per *stored buffer*: the counts of several stores
to one buffer (a reduction's init and update) add up, the other features come
from the last store.  Rows are raw (not log-scaled); ``feature.py`` packs them.
"""

from __future__ import annotations

from scheduler_core.base.bounded_cache import BoundedCache
from scheduler_core.base.gpu_spec import GPU_LOOP_KINDS
from scheduler_core.ir import tir as T
from scheduler_core.ir.expr import (
    BinaryOp,
    BufferLoad,
    Call,
    CheckedIndex,
    CmpOp,
    FloatImm,
    IntImm,
    LogicalOp,
    Not,
    Select,
    Var,
    is_float,
)
from scheduler_core.ir.expr_functor import children
from scheduler_core.ir.simplify import const_value

from .index_form import level_counts, shared_form

ARITH_INTENSITY_CURVE_SAMPLE_N = 10

# Access types and reuse types, TVM's enums.
ACC_READ, ACC_WRITE, ACC_READWRITE = 0, 1, 2
REUSE_LOOP_MULTIPLE_READ, REUSE_SERIAL_MULTIPLE_READWRITE, REUSE_NONE = 0, 1, 2

# Annotation positions (TVM's AnnotationPosType).
POS_NONE, POS_INNER_SPATIAL, POS_MIDDLE_SPATIAL, POS_OUTER_SPATIAL = 0, 1, 2, 3
POS_INNER_REDUCE, POS_MIDDLE_REDUCE, POS_OUTER_REDUCE, POS_MIXED = 4, 5, 6, 7

# Group-1 op counters, in FEATURE_NAMES order.
OP_COUNTERS = ("float_mad", "float_addsub", "float_mul", "float_divmod", "float_cmp",
               "float_mathfunc", "float_otherfunc", "int_mad", "int_addsub", "int_mul",
               "int_divmod", "int_cmp", "int_mathfunc", "int_otherfunc", "bool_op", "select_op")
_OP_SLOT = {"add": 1, "sub": 1, "mul": 2, "div": 3, "floordiv": 3, "floormod": 3,
            "min": 4, "max": 4, "pow": 5}
GPU_KINDS = GPU_LOOP_KINDS  # blockIdx.x/y/z, threadIdx.x/y/z, vthread: the feature slots' order

# Group 6 (not in TVM): the register, unrolling and cache-capacity view of one store.
# Capacities of the cache-traffic estimate, bytes: about an L1d, an L2 and an L3 slice.
TRAFFIC_CAPACITIES = (32 << 10, 1 << 20, 32 << 20)
EXTRA_NAMES = ("inner_len", "inner_store_stride", "inner_reads_contiguous", "inner_reads_broadcast",
               "inner_reads_strided", "reduce_inner_len", "accumulators", "accumulator_bytes",
               "unrolled_steps", "inner_footprint_bytes",
               "traffic_32K", "traffic_1M", "traffic_32M")


class FeatureSet:
    """Ansor's FeatureSet of one stored buffer (raw values, not log-scaled).

    ops: the 16 OP_COUNTERS, each the count per run times the store's trip count.
    vec/unroll/parallel: [num loops, product of lengths, innermost length, position].
    gpu: [is_gpu, blockIdx.x/y/z, threadIdx.x/y/z, vthread lengths] (1 when unbound, on a CPU
    too, as TVM's extractor, whose lengths start at 1);
    is_gpu is 1 for every store of a program for a GPU target, and for a store inside a
    loop bound to a GPU axis.
    access: per buffer (acc_type, bytes, unique_bytes, lines, unique_lines,
    reuse_type, reuse_dis_iter, reuse_dis_bytes, reuse_ct, stride); bytes in
    bytes, lines in cache lines, reuse distances in iterations / bytes.
    curve: arithmetic intensity (FLOP / byte) at 10 points.
    alloc: [size bytes, size elements * outer product, outer product, inner product].
    outer: [product of outer loop extents, number of loops, auto_unroll_max_step].
    extra: the EXTRA_NAMES values (see ``PerStoreExtractor._extra``).
    """

    __slots__ = ("ops", "vec", "unroll", "parallel", "gpu", "access", "curve", "alloc", "outer", "extra")

    def __init__(self):
        self.ops = [0.0] * len(OP_COUNTERS)
        self.vec = [0.0, 0.0, 0.0, POS_NONE]
        self.unroll = [0.0, 0.0, 0.0, POS_NONE]
        self.parallel = [0.0, 0.0, 0.0, POS_NONE]
        self.gpu = [0.0] * 8
        self.access: list = []
        self.curve = [0.0] * ARITH_INTENSITY_CURVE_SAMPLE_N
        self.alloc = [0.0] * 4
        self.outer = [0.0] * 3
        self.extra = [0.0] * len(EXTRA_NAMES)


def count_ops(value) -> list:
    """The 16 op counters of one evaluation of ``value`` (load indices included).

    A float add/sub whose operand is a float mul also counts one MAD (TVM leaves
    MAD at 0; counting it lets the model see fused multiply-adds).
    """
    return _scan_value(value)[0]


def _scan_value(value) -> tuple:
    """``(count_ops(value), [BufferLoad nodes of value in pre-order])``: one walk for both
    (the same pre-order as ``expr_functor.walk``; node classes have no subclasses, so
    ``type(n) is C`` is ``isinstance(n, C)``)."""
    c = [0.0] * len(OP_COUNTERS)
    loads = []
    stack = [value]
    pop, push = stack.pop, stack.append
    while stack:
        n = pop()
        t = type(n)
        if t is BinaryOp:
            a, b = n.a, n.b
            off = 0 if is_float(a.dtype) else 7
            c[off + _OP_SLOT[n.op]] += 1
            if off == 0 and n.op in ("add", "sub") and (
                    (type(a) is BinaryOp and a.op == "mul")
                    or (type(b) is BinaryOp and b.op == "mul")):
                c[0] += 1
            push(b)
            push(a)
            continue
        if t is BufferLoad:
            loads.append(n)
            push(n.index)
            continue
        if t is CmpOp:
            c[4 if is_float(n.a.dtype) else 11] += 1
        elif t is LogicalOp or t is Not:
            c[14] += 1
        elif t is Select:
            c[15] += 1
        elif t is Call:
            c[5 if is_float(n.dtype) else 12] += 1
        elif t is CheckedIndex:  # an unsigned compare and a select, as an int comparison
            c[11] += 1
        elif t is IntImm or t is FloatImm or t is Var:
            continue
        stack.extend(reversed(children(n)))
    return c, loads


# _strides and level_counts of one buffer's forms under one loop stack: (ids of the forms,
# loop extents) -> (strides, touched, contiguous).  shared_form hands the same AffineForm
# objects to indices of the same shape in every state, so a store recurs with the same forms
# and extents across the states of a search.  The entry keeps the forms (so the ids stay
# theirs); forms are never mutated, so the values (pure functions of the forms and the
# extents) stay valid.  Callers only read them.
_LEVEL_COUNTS: BoundedCache = BoundedCache(8192)


def _strides(forms: list) -> dict:
    """Depth -> ``index_form.coefficient(forms, depth)`` for every depth the forms use (the
    smallest |coefficient| of the terms holding that loop: a loop-variable term holds its own
    depth, a compound term the depths of its variables)."""
    out: dict = {}
    for f in forms:
        for t in f.terms:
            c = abs(t.coef)
            for d in t.depths:
                old = out.get(d)
                if old is None or c < old:
                    out[d] = c
    return out


def _loop_extent(f: T.For) -> int:
    v = const_value(f.extent) if not isinstance(f.extent, IntImm) else f.extent.value
    return int(v) if isinstance(v, int) and v > 0 else 1


def _elem_bytes(dtype: str) -> int:
    return T.dtype_bytes(dtype)


class PerStoreExtractor:
    """Walks a loop program and fills a FeatureSet per stored buffer.

    Parameters
    ----------
    cache_line_bytes : int, the cache line size in bytes (64 on x86)
    is_gpu : bool, the program is for a GPU target (TVM's ``is_gpu``: the feature is 1
        for all its stores, bound or not)
    """

    def __init__(self, cache_line_bytes: int = 64, is_gpu: bool = False):
        self.line = cache_line_bytes
        self.is_gpu = bool(is_gpu)
        self.features: dict = {}       # Buffer -> FeatureSet, in first-store order
        self.loops: list = []          # enclosing For nodes, outermost first
        self.extents: list = []        # their constant trip counts
        self.var_depth: dict = {}      # loop Var -> depth
        self.vec_depths: list = []
        self.unroll_depths: list = []
        self.parallel_depths: list = []
        self.gpu = [1.0 if self.is_gpu else 0.0] + [1.0] * 7  # TVM: an unbound axis has length 1
        self.outer_prod = 1.0
        self.auto_unroll = 0
        self.auto_unroll_depth = -1    # depth of the loop carrying the innermost auto_unroll pragma
        # For -> {Buffer: [(acc_type, touched elements, element bytes)]} (TVM's for_touch_regions)
        self.touch: dict = {}
        # For -> [sum of touched elements * element bytes, sum of element bytes] over all its
        # touch entries (integers, kept up to date with ``touch``: _reuse's distances in bytes)
        self.touch_totals: dict = {}
        self._footprint: list = []  # the current store's cache-line footprint per loop level

    # -- traversal -----------------------------------------------------------
    def visit(self, s: T.Stmt) -> None:
        if isinstance(s, T.For):
            self._visit_for(s)
        elif isinstance(s, T.Store):
            self._visit_store(s)
        elif isinstance(s, T.SeqStmt):
            for c in s.seq:
                self.visit(c)
        elif isinstance(s, T.IfThenElse):
            # Both branches count, as in TVM (conditions are not modelled).
            self.visit(s.then_case)
            if s.else_case is not None:
                self.visit(s.else_case)
        elif isinstance(s, T.Allocate):
            self.visit(s.body)
            self._alloc_features(s.buffer)
        elif isinstance(s, T.LetStmt):
            self.visit(s.body)

    def _visit_for(self, f: T.For) -> None:
        ext = _loop_extent(f)
        depth = len(self.loops)
        kind = f.kind
        stack = {"vectorized": self.vec_depths, "unrolled": self.unroll_depths,
                 "parallel": self.parallel_depths}.get(kind)
        if stack is not None:
            stack.append(depth)
        saved_gpu = None
        if kind in GPU_KINDS:
            saved_gpu = list(self.gpu)
            slot = 1 + GPU_KINDS.index(kind)
            self.gpu[0] = 1.0
            self.gpu[slot] = ext * self.gpu[slot] if kind == "vthread" else float(ext)
        saved_unroll = self.auto_unroll, self.auto_unroll_depth
        if "auto_unroll_max_step" in f.annotations:
            self.auto_unroll = int(f.annotations["auto_unroll_max_step"])
            self.auto_unroll_depth = depth
        self.loops.append(f)
        self.extents.append(ext)
        self.var_depth[f.loop_var] = depth
        self.outer_prod *= ext
        self.visit(f.body)
        self.outer_prod /= ext
        del self.var_depth[f.loop_var]
        self.extents.pop()
        self.loops.pop()
        self.auto_unroll, self.auto_unroll_depth = saved_unroll
        if saved_gpu is not None:
            self.gpu = saved_gpu
        if stack is not None:
            stack.pop()

    # -- one store -------------------------------------------------------------
    def _visit_store(self, s: T.Store) -> None:
        buf = s.buffer
        fea = self.features.get(buf)
        if fea is None:
            fea = self.features[buf] = FeatureSet()
        ops, loads = _scan_value(s.value)
        for k, v in enumerate(ops):
            fea.ops[k] += self.outer_prod * v
        accesses = self._accesses(s, loads)
        fea.vec = self._annotation(self.vec_depths, accesses, buf)
        fea.unroll = self._annotation(self.unroll_depths, accesses, buf)
        fea.parallel = self._annotation(self.parallel_depths, accesses, buf)
        fea.gpu = list(self.gpu)
        float_ops = sum(ops[:7])
        ops_list, bytes_list = self._touch_regions(accesses, float_ops)
        fea.access = [self._access_feature(b, acc) for b, acc in accesses.items()]
        fea.curve = _intensity_curve(float_ops, ops_list, bytes_list)
        fea.outer = [self.outer_prod, float(len(self.loops)), float(self.auto_unroll)]
        fea.extra = self._extra(buf, accesses)

    def _accesses(self, s: T.Store, loads: list) -> dict:
        """Buffer -> [acc_type, [AffineForm...], element bytes, strides, touched, contiguous]
        for one store (``loads``: the BufferLoads of its value, in walk order).

        strides: depth of each loop the buffer's indices use -> ``coefficient(forms, depth)``
        (so its keys are the depths used); touched / contiguous: ``touched_elements`` /
        ``contiguous_elements`` of the forms at every loop level 0 .. n
        (``index_form.level_counts``, one pass for the touch regions, the access features
        and the extras).  All three are shared with other stores: read them only."""
        vd = self.var_depth
        out = {s.buffer: [ACC_WRITE, [shared_form(s.index, vd)], _elem_bytes(s.buffer.dtype)]}
        for n in loads:
            acc = out.get(n.buffer)
            if acc is None:
                out[n.buffer] = [ACC_READ, [shared_form(n.index, vd)], _elem_bytes(n.buffer.dtype)]
            elif acc[0] == ACC_WRITE:
                acc[0] = ACC_READWRITE  # an update reads what it writes: same index (TVM)
            elif acc[0] == ACC_READ:
                acc[1].append(shared_form(n.index, vd))
        extents = tuple(self.extents)
        for acc in out.values():
            forms = acc[1]
            key = (tuple(map(id, forms)), extents)
            counts = _LEVEL_COUNTS.get(key, keep=forms)
            if counts is None:
                counts = _LEVEL_COUNTS.put(key, (_strides(forms),) + level_counts(forms, extents),
                                           keep=forms)
            acc.extend(counts)
        return out

    def _touch_regions(self, accesses: dict, float_ops: float) -> tuple:
        """Record the elements each loop touches; return the intensity-curve inputs."""
        ops_list, bytes_list = [], []
        cur = float(float_ops)
        line = self.line
        # bytes of the cache lines the loops from depth i inwards touch (i = 0..n), for _extra
        self._footprint = [float(line * len(accesses))] * (len(self.loops) + 1)
        touch, totals = self.touch, self.touch_totals
        for i in range(len(self.loops) - 1, -1, -1):
            loop = self.loops[i]
            regions = touch.get(loop)
            if regions is None:
                regions = touch[loop] = {}
                totals[loop] = [0, 0]
            mem, ebs, line_bytes = 0, 0, 0.0
            for b, (acc_type, _, eb, _, touched, contiguous) in accesses.items():
                n = touched[i]
                entries = regions.get(b)
                if entries is None:
                    regions[b] = [(acc_type, n, eb)]
                else:
                    entries.append((acc_type, n, eb))
                mem += n * eb
                ebs += eb
                run = min(contiguous[i] * eb, line)
                line_bytes += max(1.0, n * eb / run) * line
            total = totals[loop]
            total[0] += mem
            total[1] += ebs
            self._footprint[i] = line_bytes
            bytes_list.append(float(mem))
            cur *= self.extents[i]
            ops_list.append(cur)
        return ops_list, bytes_list

    def _access_feature(self, buf, acc) -> tuple:
        acc_type, forms, eb, strides, touched, contiguous = acc
        n_loops = len(self.loops)
        bytes_ = self.outer_prod * eb
        if n_loops == 0:
            unique_bytes, stride, lines, unique_lines = float(eb), 0, 1.0, 1.0
        else:
            unique_bytes = float(touched[0] * eb)
            stride, reduce_ratio, i = 0, 1, n_loops - 1
            while i >= 0:
                stride = strides.get(i, 0)
                if stride:
                    break
                reduce_ratio *= self.extents[i]
                i -= 1
            lines = max(1.0, self.outer_prod / reduce_ratio * min(1.0, stride * eb / self.line))
            stride = stride if i == n_loops - 1 else 0
            n_cont = contiguous[0] * eb
            unique_lines = max(1.0, unique_bytes / min(n_cont, self.line))
        reuse = self._reuse(buf, strides)
        return (acc_type, bytes_, unique_bytes, lines, unique_lines) + reuse + (float(stride),)

    def _extra(self, store_buf, accesses: dict) -> list:
        """The EXTRA_NAMES values of one store (raw, not log-scaled).

        The Ansor features describe each buffer access on its own; these describe what
        the innermost loops make of the store, which is where tiled CPU schedules differ
        (the register tile of Ansor's multi-level tiling, section 4.1, and the cache
        levels above it):

        - inner_len: the innermost loop's extent; inner_store_stride: the stored buffer's
          stride (elements) along it; inner_reads_contiguous / _broadcast / _strided: how
          many read buffers it walks with stride 1 / 0 / more (a vectorized loop turns
          them into vector loads / broadcasts / gathers);
        - reduce_inner_len: the extent of the innermost reduction loop (a loop that indexes
          reads but not the stored buffer); accumulators: the elements of the stored buffer
          touched by the loops inside it (the partial sums kept live across it, in registers
          when few), accumulator_bytes: the same in bytes; both 0 for a store without a
          reduction loop;
        - unrolled_steps: copies of the store in the unrolled innermost nest (loops of kind
          "unrolled", and serial loops under an ``auto_unroll_max_step`` pragma while the
          product stays within it, as ``scheduler_core.passes.unroll``; a vectorized loop
          counts once);
        - inner_footprint_bytes: the bytes of the cache lines the innermost loop touches over
          all the store's buffers (a buffer walked with a stride of a line or more costs a
          whole line per element);
        - traffic_32K / _1M / _32M: bytes moved into a cache of that capacity: the line
          footprint of the largest loop nest whose footprint fits, times the trip count of
          the loops around it (a capacity-only cache model of the store's own accesses).
        """
        n = len(self.loops)
        out = [0.0] * len(EXTRA_NAMES)
        if n == 0:
            return out
        inner = n - 1
        out[0] = float(self.extents[inner])
        store = accesses[store_buf]
        out[1] = float(store[3].get(inner, 0))
        for b, (_, _, _, strides, _, _) in accesses.items():
            if b is store_buf:
                continue
            c = strides.get(inner, 0)
            out[2 + (0 if c == 1 else 1 if c == 0 else 2)] += 1.0
        read_depths: set = set()
        for b, acc in accesses.items():
            if b is not store_buf:
                read_depths.update(acc[3])
        reduce = [d for d in read_depths if d not in store[3]]
        if reduce:
            r = max(reduce)
            out[5] = float(self.extents[r])
            acc_elems = store[4][r + 1]
            out[6] = float(acc_elems)
            out[7] = float(acc_elems * store[2])
        steps, depth = 1, 0
        for i in range(inner, -1, -1):
            loop, ext = self.loops[i], self.extents[i]
            if loop.kind == "vectorized":
                continue
            if loop.kind == "unrolled" or (
                    loop.kind == "serial" and i > self.auto_unroll_depth >= 0
                    and steps * ext <= self.auto_unroll and depth < 8):
                steps *= ext
                depth += 1
                continue
            break
        out[8] = float(steps)
        footprint = self._footprint  # set by _touch_regions for this store
        out[9] = footprint[inner]
        for k, cap in enumerate(TRAFFIC_CAPACITIES):
            i = next((i for i in range(n + 1) if footprint[i] <= cap), n)
            trips = 1.0
            for e in self.extents[:i]:
                trips *= e
            out[10 + k] = footprint[i] * trips
        return out

    def _reuse(self, buf, depths) -> tuple:
        """(reuse type, distance in iterations, distance in bytes, reuse count): TVM's ComputeReuse."""
        dis_iter, dis_bytes = 1.0, -1.0
        for i in range(len(self.loops) - 1, -1, -1):
            loop = self.loops[i]
            total_bytes, total_eb = self.touch_totals[loop]  # sums over self.touch[loop]
            ext = self.extents[i]
            if i in depths:
                dis_iter *= ext
                dis_bytes = float(total_bytes)
            else:
                if dis_bytes < 0:
                    dis_bytes = float(total_eb)
                return (REUSE_LOOP_MULTIPLE_READ, dis_iter, dis_bytes, float(ext))
            entries = self.touch[loop][buf]
            if len(entries) > 1:
                d_iter = float(min(n for _, n, _ in entries))
                d_bytes = float(total_bytes)
                return (REUSE_SERIAL_MULTIPLE_READWRITE, d_iter / ext, d_bytes / ext,
                        float(len(entries) - 1))
        return (REUSE_NONE, 0.0, 0.0, 0.0)

    def _annotation(self, depths: list, accesses: dict, store_buf) -> list:
        """[number, product of lengths, innermost length, position] of one loop kind."""
        if not depths:
            return [0.0, 0.0, 0.0, POS_NONE]
        prod = 1.0
        for d in depths:
            prod *= self.extents[d]
        inner = depths[-1]
        return [float(len(depths)), prod, float(self.extents[inner]),
                self._position(inner, accesses, store_buf)]

    def _position(self, depth: int, accesses: dict, store_buf) -> int:
        """Where the loop at ``depth`` sits: inner/middle/outer spatial or reduce (TVM's
        GetAnnotationPosEncoding, read off the flat indices: spatial loops index the
        stored buffer, ordered by their stride in it; reduce loops only index reads)."""
        store_forms = accesses[store_buf][1][:1]
        spatial = accesses[store_buf][3]  # its one form's strides
        if depth in spatial:
            if sum(1 for t in store_forms[0].terms if depth in t.depths) > 1:
                return POS_MIXED  # a fused loop that indexes several dimensions
            c = spatial[depth]
            others = [v for d, v in spatial.items() if d != depth]
            if not others or c < min(others):
                return POS_INNER_SPATIAL
            if c > max(others):
                return POS_OUTER_SPATIAL
            return POS_MIDDLE_SPATIAL if c != min(others) else POS_MIXED
        read_depths: set = set()
        for b, acc in accesses.items():
            if b is not store_buf:
                read_depths.update(acc[3])
        reduce = sorted(d for d in read_depths if d not in spatial)
        if depth not in reduce:
            return POS_OUTER_SPATIAL  # a loop of a consumer this stage is attached under
        if depth == reduce[-1]:
            return POS_INNER_REDUCE
        return POS_OUTER_REDUCE if depth == reduce[0] else POS_MIDDLE_REDUCE

    def _alloc_features(self, buf) -> None:
        fea = self.features.get(buf)
        if fea is None:
            return
        elems = 1.0
        for d in buf.shape:
            v = const_value(d)
            elems *= v if isinstance(v, (int, float)) else 1
        fea.alloc = [elems * _elem_bytes(buf.dtype), elems * self.outer_prod, self.outer_prod,
                     fea.outer[0] / self.outer_prod]


def _intensity_curve(float_ops: float, ops_list: list, bytes_list: list) -> list:
    """TVM's ExtractArithmeticIntensityFeature: FLOP/byte, piecewise linear in FLOPs, 10 samples."""
    n = ARITH_INTENSITY_CURVE_SAMPLE_N
    if float_ops <= 0 or not ops_list:
        return [0.0] * n
    out, pt = [], 0
    for i in range(n):
        target = ops_list[-1] * (i + 1) / n
        while ops_list[pt] < target - 1e-4:
            pt += 1
        cur = ops_list[pt] / max(bytes_list[pt], 1.0)
        if pt == 0:
            out.append(cur)
        else:
            prev = ops_list[pt - 1] / max(bytes_list[pt - 1], 1.0)
            slope = (cur - prev) / (ops_list[pt] - ops_list[pt - 1])
            out.append(prev + slope * (target - ops_list[pt - 1]))
    return out


def extract_feature_sets(func: T.PrimFunc, cache_line_bytes: int = 64, is_gpu: bool = False) -> list:
    """The FeatureSets of ``func``'s stored buffers, in first-store order.

    Parameters
    ----------
    func : PrimFunc from ``lower_state`` (before the passes), so loop kinds are visible
    cache_line_bytes : int, bytes per cache line
    """
    ex = PerStoreExtractor(cache_line_bytes, is_gpu)
    ex.visit(func.body)
    return list(ex.features.values())


__all__ = ["FeatureSet", "PerStoreExtractor", "extract_feature_sets", "count_ops",
           "ARITH_INTENSITY_CURVE_SAMPLE_N", "OP_COUNTERS", "EXTRA_NAMES", "TRAFFIC_CAPACITIES"]
