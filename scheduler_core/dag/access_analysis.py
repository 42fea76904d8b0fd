"""Static access analysis of a ComputeDAG (Ansor's ``AccessAnalyzer``).

    ComputeDAG.ops --analyze--> AccessAnalyzer --queried by--> sketch rules

For every op it records which tensors it reads and at which index tuples
(``read_from``), who reads it (``read_by``), and four flags the sketch rules of
Ansor (Zheng et al., OSDI'20, section 4.1) branch on: *simple access*,
*strictly inlineable*, *needs multi-level tiling* and *output*.  The logic
follows ``src/auto_scheduler/compute_dag.cc`` of TVM; where this file departs
from it the docstring says so.

Reading guide: module-level helpers classify one access (``access_pattern``);
``analyze`` builds the frozen ``AccessAnalyzer``; its methods are pure queries.
Ops are keyed by identity (operations hash by identity).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from scheduler_core.ir.expr import BinaryOp, Call, Expr, IntImm, Select, TensorLoad, Var
from scheduler_core.ir.expr_functor import structural_equal, walk
from scheduler_core.ir.intrinsics import EXPENSIVE_CALLS, EXPENSIVE_OPERATORS
from scheduler_core.ir.simplify import const_value

from .tensor import ComputeOp, PlaceholderOp, ScanOp, Tensor

# Ansor's ``SearchPolicyKey::simplify_const_tensor_indices``: an op with this attr
# is a "fake reduction" over constant tensors and is never multi-level tiled.
SIMPLIFY_CONST_TENSOR_INDICES = "auto_scheduler_simplify_const_tensor_indices"


@dataclass(frozen=True)
class AccessPattern:
    """How one index tuple of a read relates to the reading op's spatial axes.

    axis_missing: some spatial axis of the reader does not appear.
    axis_duplicated: some spatial axis appears in more than one index.
    same_order: the axes that appear do so in the reader's axis order.
    """

    axis_missing: bool
    axis_duplicated: bool
    same_order: bool

    @property
    def is_elementwise(self) -> bool:
        """Every axis exactly once, in order (Ansor's ElementWiseMatch condition)."""
        return not self.axis_missing and not self.axis_duplicated and self.same_order


def is_const_shift_of(var: Var, index: Expr) -> bool:
    """True when ``index`` is ``var``, ``var + c``, ``var - c`` or ``c + var`` (c an int
    constant), Ansor's ``IsConstShiftEqual``."""
    if index is var:
        return True
    if isinstance(index, BinaryOp) and index.op in ("add", "sub"):
        if index.a is var and isinstance(index.b, IntImm):
            return True
        if index.op == "add" and index.b is var and isinstance(index.a, IntImm):
            return True
    return False


def access_pattern(op: Any, indices: tuple) -> AccessPattern | None:
    """Classify one read ``T[indices]`` made by ``op`` (Ansor's ``IsSimpleAccess``).

    Each index must be an integer constant or a constant shift of one of the
    op's *spatial* axis variables (reduce axes do not count); an axis of extent 1
    that no index names counts as present (every index of it is 0).  Returns ``None``
    when some index is anything else (``i + j``, ``k``, ``i*2``, a gather), or
    when ``op`` is not a ComputeOp.
    """
    if not isinstance(op, ComputeOp):
        return None
    counts = [0] * len(op.axis)
    order: list[int] = []
    for index in indices:
        if isinstance(index, IntImm):
            continue
        for k, iv in enumerate(op.axis):
            if is_const_shift_of(iv.var, index):
                counts[k] += 1
                order.append(k)
                break
        else:
            return None
    # An axis of extent 1 read at a constant index (a frontend's ``x[0, i, j]`` for
    # ``x[b, i, j]`` with one batch row) reads the same element: it is not missing.
    single = [const_value(iv.dom_extent) == 1 and const_value(iv.dom_min) == 0 for iv in op.axis]
    return AccessPattern(
        axis_missing=any(c == 0 and not one for c, one in zip(counts, single)),
        axis_duplicated=any(c > 1 for c in counts),
        same_order=all(a <= b for a, b in zip(order, order[1:])),
    )


def has_expensive_op(e: Expr) -> bool:
    """Whether ``e`` calls an intrinsic of the expensive cost class (ir/intrinsics.py: the
    transcendental ones, ``sqrt`` and ``pow``), too costly to recompute at every use (Ansor
    checks only ``exp``; the others cost as much)."""
    return any((isinstance(n, Call) and n.name in EXPENSIVE_CALLS)
               or (isinstance(n, BinaryOp) and n.op in EXPENSIVE_OPERATORS) for n in walk(e))


def has_branch(e: Expr) -> bool:
    """Whether ``e`` contains an ``if_then_else`` (Ansor's ``has_branch``)."""
    return any(isinstance(n, Select) for n in walk(e))


def read_accesses(op: Any) -> dict:
    """``{Tensor: [index tuple, ...]}`` read by ``op`` in first-use order.

    A ComputeOp contributes every ``TensorLoad`` of its body (gathers included,
    pre-order).  A ScanOp reads its init and update tensors whole: they map to
    empty lists.  Placeholders read nothing.
    """
    out: dict = {}
    if isinstance(op, ComputeOp):
        for n in (n for b in op.bodies for n in walk(b)):
            if isinstance(n, TensorLoad):
                out.setdefault(n.tensor, []).append(tuple(n.indices))
    elif isinstance(op, ScanOp):
        for t in tuple(op.init) + tuple(op.update):
            out.setdefault(t, [])
    return out


def shapes_equal(a: tuple, b: tuple) -> bool:
    """Equal ranks and each extent equal (constants by value, else structurally)."""
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        cx, cy = const_value(x), const_value(y)
        if cx is not None or cy is not None:
            if cx != cy:
                return False
        elif not structural_equal(x, y):
            return False
    return True


def _num_common(consumer: Any, producer: Any, accesses: list) -> int:
    """Leading output dims where ``consumer`` reads ``producer`` at its own axis
    (up to a constant shift) and both have the same extent."""
    if not isinstance(consumer, ComputeOp) or isinstance(producer, ScanOp) or not accesses:
        return 0
    out_shape = consumer.output_shape(0)
    prod_shape = producer.output_shape(0)
    n = 0
    while n < min(len(out_shape), len(prod_shape)):
        if not shapes_equal((out_shape[n],), (prod_shape[n],)):
            break
        if not all(is_const_shift_of(consumer.axis[n].var, acc[n]) for acc in accesses):
            break
        n += 1
    return n


def _needs_multi_level_tiling(op: ComputeOp, reads: dict) -> bool:
    """Ansor's rule: count, over the inputs, those that miss some spatial axis of
    extent > 1 (each input counts once); tile when two inputs miss an axis, or one
    does and the op reduces.  Symbolic extents count as > 1."""
    if SIMPLIFY_CONST_TENSOR_INDICES in op.attrs:
        return False
    by_producer: dict[int, set] = {}  # Ansor groups the reads by producer op
    for t, accesses in reads.items():
        used = by_producer.setdefault(id(t.op), set())
        used.update(id(n) for acc in accesses for idx in acc for n in walk(idx) if isinstance(n, Var))
    n_missing = 0
    for used in by_producer.values():
        for iv in op.axis:
            extent = const_value(iv.dom_extent)
            if (extent is None or extent > 1) and id(iv.var) not in used:
                n_missing += 1
                break
        if n_missing >= 2 or (n_missing >= 1 and op.reduce_axis):
            return True
    return False


def _is_strictly_inlineable(op: Any, reads: dict, is_output: bool) -> bool:
    """Ansor's rule plus "not an output, no reduction" (the sketch rule's extra test); a
    compute with several outputs is never inlined (TVM's ScheduleOps: "can only inline
    compute op with 1 output")."""
    if not isinstance(op, ComputeOp) or op.reduce_axis or is_output or op.num_outputs > 1:
        return False
    if not reads:
        return True  # a constant tensor
    for accesses in reads.values():
        for acc in accesses:
            pat = access_pattern(op, acc)
            if pat is None or not pat.same_order or pat.axis_duplicated:
                return False  # not simple, or a transpose
    return not has_expensive_op(op.body) and not has_branch(op.body)


@dataclass(frozen=True, eq=False)
class AccessAnalyzer:
    """Read relations and per-op flags of a ComputeDAG; build with :func:`analyze`.

    ops: the DAG's ops in topological order.  reads_from / reads_by: op ->
    {Tensor or op: [index tuples]}.  flags: op -> {"simple", "inlineable",
    "mlt", "output", "injective"}.  common: (id(producer), id(consumer)) -> number of
    common outer iterators.
    """

    ops: tuple
    reads_from: dict
    reads_by: dict
    flags: dict
    common: dict

    def __repr__(self) -> str:
        return f"AccessAnalyzer({', '.join(op.name for op in self.ops)})"

    # -- per-op flags ------------------------------------------------------
    def is_simple_access(self, op: Any) -> bool:
        """Every read of ``op`` is a constant or a constant shift of a spatial axis
        (a permutation or subset of the axes is allowed; ``i + j`` or a reduce axis
        is not).  Placeholders are simple; scans are not.  Ansor: IsSimpleAccess."""
        return self._flag(op, "simple")

    def is_strictly_inlineable(self, op: Any) -> bool:
        """A non-output ComputeOp with no reduction whose reads are simple, in axis
        order and without duplicates, with no branch and no expensive intrinsic
        (``exp``, ``log``, ``tanh``..., ``pow``) and one output.  A compute that reads nothing is
        inlineable.  Ansor: IsStrictlyInlineable and not IsOutput."""
        return self._flag(op, "inlineable")

    def needs_multi_level_tiling(self, op: Any) -> bool:
        """Ansor's NeedsMultiLevelTiling: data reuse exists because two inputs each
        miss a spatial axis, or one does and the op reduces (matmul, conv2d)."""
        return self._flag(op, "mlt")

    def is_output(self, op: Any) -> bool:
        """``op`` produces a DAG output or is read by no other op (placeholders never)."""
        return self._flag(op, "output")

    def is_injective(self, op: Any) -> bool:
        """A ComputeOp without a reduction: each output element is computed from input
        elements through index maps (TVM's ``kInjective`` pattern: elementwise,
        broadcast, transpose, padding, reshape)."""
        return self._flag(op, "injective")

    # -- relations ---------------------------------------------------------
    def read_from(self, op: Any) -> dict:
        """``{Tensor: [index tuple, ...]}`` that ``op`` reads (a copy)."""
        return {t: list(v) for t, v in self._lookup(self.reads_from, op).items()}

    def read_by(self, op: Any) -> dict:
        """``{consumer op: [index tuple, ...]}`` reading any output of ``op``, consumers
        in DAG order (a copy)."""
        return {c: list(v) for c, v in self._lookup(self.reads_by, op).items()}

    def get_direct_producers(self, op: Any) -> list:
        """Ops whose outputs ``op`` reads, in DAG order."""
        return self._in_order({id(t.op) for t in self._lookup(self.reads_from, op)})

    def get_producers(self, state_or_ops: Any, op: Any) -> list:
        """Producers of ``op``, looking through ops that are inlined in ``state_or_ops``
        (a State whose stages have ``compute_at == "inlined"``, an iterable of
        inlined ops, or ``None``), in DAG order.  Ansor: GetProducers."""
        inlined = _inlined_ids(state_or_ops)
        return self._collect(op, inlined, lambda o: [t.op for t in self._lookup(self.reads_from, o)])

    def get_consumers(self, state_or_ops: Any, op: Any) -> list:
        """Consumers of ``op``, looking through inlined ops as :meth:`get_producers`
        does, in DAG order.  Ansor: GetConsumers."""
        inlined = _inlined_ids(state_or_ops)
        return self._collect(op, inlined, lambda o: list(self._lookup(self.reads_by, o)))

    def elementwise_match(self, op: Any, target_op: Any) -> bool:
        """Whether ``op`` reaches ``target_op`` through a chain where each op has one
        consumer, the same output shape, and is read by it at exactly its axes in
        order (Ansor's ElementWiseMatch; used for fusing into outputs)."""
        cur = op
        while cur is not target_op:
            consumers = self._lookup(self.reads_by, cur)
            if len(consumers) != 1:
                return False
            (nxt, reads), = consumers.items()
            if not isinstance(cur, ComputeOp) or not isinstance(nxt, ComputeOp):
                return False
            if not shapes_equal(cur.output_shape(0), nxt.output_shape(0)):
                return False
            for acc in reads:
                pat = access_pattern(nxt, acc)
                if pat is None or not pat.is_elementwise:
                    return False
            cur = nxt
        return True

    def single_elementwise_consumer(self, state_or_ops: Any, op: Any) -> Any:
        """The one consumer ``op`` can be fused into as an output stage, or ``None``:
        ``op`` has exactly one consumer (looking through inlined ops), reaches it by
        :meth:`elementwise_match`, they do not both reduce, and the consumer is not a
        shared-memory cache-read stage (``*.shared``: a GPU stage is never fused into the
        fetch of its own output).  Ansor's HasSingleElementwiseMatchedConsumer (used by the
        cache-write and fusion rules)."""
        consumers = self.get_consumers(state_or_ops, op)
        if len(consumers) != 1 or not self.elementwise_match(op, consumers[0]):
            return None
        target = consumers[0]
        if str(getattr(target, "name", "")).endswith(".shared"):
            return None
        if all(isinstance(o, ComputeOp) and o.reduce_axis for o in (op, target)):
            return None
        return target

    def num_common_outer_iterators(self, op: Any, target_op: Any) -> int:
        """The number of outer loops ``op`` and ``target_op`` can share: the minimum,
        over every read path from ``op`` to ``target_op``, of the per-edge common
        leading axes; ``op``'s rank when they are the same op, 0 when unconnected.
        Ansor: GetNumCommonOuterIterator (here a dynamic program, not a recursion)."""
        self._lookup(self.reads_by, op)
        best: dict[int, int] = {id(op): len(op.output_shape(0))}
        start = self.ops.index(op)
        for cur in self.ops[start + 1:]:
            vals = [min(best[id(t.op)], self.common.get((id(t.op), id(cur)), 0))
                    for t in self._lookup(self.reads_from, cur) if id(t.op) in best]
            if vals:
                best[id(cur)] = min(vals)
        return best.get(id(target_op), 0)

    # -- internals ---------------------------------------------------------
    def _lookup(self, table: dict, op: Any):
        try:
            return table[op]
        except KeyError:
            raise KeyError(f"op {getattr(op, 'name', op)!r} is not in this ComputeDAG") from None

    def _flag(self, op: Any, name: str) -> bool:
        return self._lookup(self.flags, op)[name]

    def _in_order(self, ids: set) -> list:
        return [o for o in self.ops if id(o) in ids]

    def _collect(self, op: Any, inlined: set, step) -> list:
        found: set = set()
        seen: set = {id(op)}
        stack = [op]
        while stack:
            for nxt in step(stack.pop()):
                if id(nxt) in seen:
                    continue
                seen.add(id(nxt))
                if id(nxt) in inlined:
                    stack.append(nxt)
                else:
                    found.add(id(nxt))
        return self._in_order(found)


def _inlined_ids(state_or_ops: Any) -> set:
    if state_or_ops is None:
        return set()
    stages = getattr(state_or_ops, "stages", None)
    if stages is not None:
        return {id(st.op) for st in stages if str(getattr(st, "compute_at", "")) == "inlined"}
    return {id(o.op if isinstance(o, Tensor) else o) for o in state_or_ops}


def analyze(dag: Any) -> AccessAnalyzer:
    """Build the :class:`AccessAnalyzer` of ``dag`` (a ComputeDAG), Ansor's
    ``AccessAnalyzer(tensors)`` constructor.  Cost: one walk over every body."""
    ops = tuple(dag.ops)
    out_ids = {id(t.op) for t in dag.outputs}
    reads_from = {op: read_accesses(op) for op in ops}
    reads_by: dict = {op: {} for op in ops}
    common: dict = {}
    for op in ops:
        for t, accesses in reads_from[op].items():
            reads_by[t.op].setdefault(op, []).extend(accesses)
    for producer in ops:
        for consumer, accesses in reads_by[producer].items():
            common[(id(producer), id(consumer))] = _num_common(consumer, producer, accesses)
    flags = {op: _flags(op, reads_from[op], reads_by[op], id(op) in out_ids) for op in ops}
    return AccessAnalyzer(ops, reads_from, reads_by, flags, common)


def _flags(op: Any, reads: dict, readers: dict, in_outputs: bool) -> dict:
    if isinstance(op, PlaceholderOp):
        return {"simple": True, "inlineable": False, "mlt": False, "output": False,
                "injective": False}
    is_output = in_outputs or not readers
    simple = isinstance(op, ComputeOp) and all(
        access_pattern(op, acc) is not None for accs in reads.values() for acc in accs)
    return {
        "simple": simple,
        "inlineable": _is_strictly_inlineable(op, reads, is_output),
        "mlt": isinstance(op, ComputeOp) and _needs_multi_level_tiling(op, reads),
        "output": is_output,
        "injective": isinstance(op, ComputeOp) and not op.reduce_axis,
    }
