"""State, Stage and Iterator: Ansor's representation of a schedule.

    ComputeDAG --init_state--> State --step.apply--> State ... --lower--> PrimFunc

A ``State`` is an immutable value: each transform step returns a new State
(copy-on-write of the tuples it changes), so branching a search is cheap.  The
history of steps is kept in ``State.transform_steps``; replaying them on the
DAG's initial state rebuilds the State, and that replay is the only way from
a record to a program (Ansor, section 4 and ``loop_state.h``).

Reading guide: ``Iterator`` is one loop of a stage; ``SplitRel``/``FuseRel``
remember how leaf iterators derive from the op's root axes (needed to compute
index expressions when lowering); ``Stage`` is one operation with its loop
structure, compute location and pragmas; ``State`` is the list of stages plus
the step history.  Queries come first in each class, mutations (which return
new values) after.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from scheduler_core.base.bounded_cache import BoundedCache
from scheduler_core.base.errors import ScheduleError, check
from scheduler_core.base.frozen import evolve, fast_init
from scheduler_core.dag.compute_dag import register_init_state
from scheduler_core.dag.tensor import ComputeOp, PlaceholderOp, ScanOp
from scheduler_core.ir.expr import Expr, IntImm, IterVar, as_expr, expr_str
from scheduler_core.ir.simplify import const_value, simplify

# The annotations, in the order of TVM's IteratorAnnotation (auto_scheduler/loop_state.h):
# ``ANNOTATIONS[code]`` is the annotation of record code ``code`` (kNone=0, kUnroll=1,
# kVectorize=2, kParallel=3, kVThread=4, kBlockX=5, kThreadX=6, kBlockY=7, kThreadY=8,
# kBlockZ=9, kThreadZ=10; TVM's kTensorize=11 has no counterpart here).
ANNOTATIONS = (
    "none", "unroll", "vectorize", "parallel", "vthread",
    "blockIdx.x", "threadIdx.x", "blockIdx.y", "threadIdx.y", "blockIdx.z", "threadIdx.z",
)
# The record code of each annotation ("AN" steps): TVM's IteratorAnnotation value.
ANNOTATION_CODE = {name: k for k, name in enumerate(ANNOTATIONS)}


# The classes below are built in the hundreds of thousands per search round (every step of
# every replay makes a new State and Stage): ``fast_init`` gives them expr.py's cheaper
# ``__init__`` (same signature and defaults, the fields stored straight into ``__dict__``).
@fast_init
@dataclass(frozen=True)
class Iterator:
    """One loop of a stage.

    name: unique within the stage (``i``, ``i.0``, ``i.0@j.0@``).
    extent: the trip count over the stage's full domain (an Expr; ``None``
    while a split length is still unknown, as in Ansor's sketches).
    kind: ``"spatial"``, ``"reduce"`` or ``"scan"``.
    annotation: one of ANNOTATIONS.
    """

    name: str
    extent: Any
    kind: str = "spatial"
    annotation: str = "none"

    @property
    def const_extent(self) -> int | None:
        v = None if self.extent is None else const_value(self.extent)
        return v if isinstance(v, int) else None


@fast_init
@dataclass(frozen=True)
class SplitRel:
    """``parent`` was split into ``children`` (outer to inner).

    lengths: the trip counts given by the step (``inner_to_outer``: those of
    children[1:], else those of children[:-1]); the remaining child takes the
    ceil-division of the parent's extent.
    """

    parent: str
    children: tuple
    lengths: tuple
    inner_to_outer: bool


@fast_init
@dataclass(frozen=True)
class FuseRel:
    """``children`` (outer to inner) were fused into ``fused``."""

    children: tuple
    fused: str


@fast_init
@dataclass(frozen=True)
class Stage:
    """One operation and its loop structure.

    root: names of the op's root axes (spatial then reduce), as IterVars.
    compute_at: ``"root"``, ``"inlined"`` or ``"iter"`` (then ``attach`` is
    ``(target stage index, target iterator name)``).
    origin_op: the op of the original DAG whose result this stage stores
    (``None`` for stages added by cache_read/cache_write/rfactor).
    pragmas: iterator name -> {"auto_unroll_max_step": int}.
    storage_align: ((axis index, factor, offset), ...).
    """

    op: Any
    iters: tuple
    root: tuple
    relations: tuple = ()
    compute_at: str = "root"
    attach: tuple | None = None
    origin_op: Any = None
    pragmas: tuple = ()
    storage_align: tuple = ()

    # -- queries -----------------------------------------------------------
    @property
    def op_type(self) -> str:
        if isinstance(self.op, PlaceholderOp):
            return "placeholder"
        if isinstance(self.op, ScanOp):
            return "scan"
        return "compute"

    @property
    def name(self) -> str:
        return self.op.name

    def iter_index(self, name: str) -> int:
        for k, it in enumerate(self.iters):
            if it.name == name:
                return k
        raise ScheduleError(f"stage {self.name} has no iterator {name!r}")

    def iterator(self, name: str) -> Iterator:
        return self.iters[self.iter_index(name)]

    def pragma_dict(self) -> dict:
        return {name: dict(items) for name, items in self.pragmas}

    def is_transformed(self) -> bool:
        return bool(self.relations) or tuple(i.name for i in self.iters) != tuple(
            iv.var.name for iv in self.root
        )


def root_iters_of(op) -> tuple:
    """The root IterVars of ``op``: spatial axes then reduce axes (scan: its time axis)."""
    if isinstance(op, ComputeOp):
        return tuple(op.axis) + tuple(op.reduce_axis)
    if isinstance(op, ScanOp):
        return (op.scan_axis,)
    return ()


def make_stage(op, origin_op=None) -> Stage:
    """A fresh stage for ``op`` with one loop per root axis in order."""
    roots = root_iters_of(op)
    iters = tuple(
        Iterator(iv.var.name, simplify(as_expr(iv.dom_extent)),
                 "reduce" if iv.kind == "reduce" else ("scan" if iv.kind == "scan" else "spatial"))
        for iv in roots
    )
    return Stage(op, iters, roots, origin_op=origin_op if origin_op is not None else op)


@fast_init
@dataclass(frozen=True)
class State:
    """A schedule: stages in topological order plus the transform-step history.

    dag: the ComputeDAG this state schedules (its ``tensors`` are the function
    arguments).  stages: one per op, possibly more after cache/rfactor steps.
    transform_steps: the steps that built this state from ``State.from_dag(dag)``.
    """

    dag: Any
    stages: tuple
    transform_steps: tuple = ()

    @staticmethod
    def from_dag(dag) -> State:
        # A new State each call; its stages (immutable) come from a cache keyed by the DAG's
        # identity and kept with its ``ops`` tuple: every replay starts here.
        stages = _INITIAL_STAGES.get(id(dag), keep=(dag, dag.ops))
        if stages is None:
            stages = _INITIAL_STAGES.put(id(dag), tuple(make_stage(op) for op in dag.ops), keep=(dag, dag.ops))
        return State(dag, stages)

    # -- queries -----------------------------------------------------------
    def stage_index(self, key) -> int:
        """Index of the stage for ``key``: an index, op, tensor, or stage name."""
        if isinstance(key, int):
            check(0 <= key < len(self.stages), f"stage index {key} out of range")
            return key
        op = getattr(key, "op", key)
        for k, st in enumerate(self.stages):
            if st.op is op:
                return k
        for k, st in enumerate(self.stages):
            if st.origin_op is op:
                return k
        if isinstance(key, str):
            for k, st in enumerate(self.stages):
                if st.name == key:
                    return k
        raise ScheduleError(f"no stage for {key!r}")

    def __getitem__(self, key) -> Stage:
        return self.stages[self.stage_index(key)]

    def attached_to(self, stage_id: int) -> list:
        """Indices of stages attached at some iterator of stage ``stage_id``."""
        return [k for k, st in enumerate(self.stages)
                if st.compute_at == "iter" and st.attach[0] == stage_id]

    def consumers(self, stage_id: int) -> list:
        """Indices of non-placeholder stages whose op reads the output(s) of ``stage_id``."""
        key = id(self.stages[stage_id].op)
        return [k for k, ids in enumerate(_stage_reads(self.stages)) if key in ids]

    def __str__(self) -> str:
        return state_str(self)

    # -- mutations (return new states) ---------------------------------------
    # (built with the constructor or :func:`evolve`, not ``dataclasses.replace``: the search
    # makes hundreds of thousands of these per round and ``replace`` costs several times more)
    def with_stage(self, stage_id: int, stage: Stage) -> State:
        stages = self.stages
        return State(self.dag, stages[:stage_id] + (stage,) + stages[stage_id + 1:], self.transform_steps)

    def with_step(self, step) -> State:
        return State(self.dag, self.stages, self.transform_steps + (step,))

    def insert_stage(self, pos: int, stage: Stage) -> State:
        """Insert ``stage`` at ``pos``, renumbering attach targets at or after it."""
        stages = []
        for st in self.stages:
            if st.compute_at == "iter" and st.attach[0] >= pos:
                st = evolve(st, attach=(st.attach[0] + 1, st.attach[1]))
            stages.append(st)
        stages.insert(pos, stage)
        return State(self.dag, tuple(stages), self.transform_steps)

    def retarget_attach(self, stage_id: int, old_names: tuple, new_name: str) -> State:
        """Stages attached at ``stage_id``'s iterators ``old_names`` move to ``new_name``."""
        stages = None
        for k, st in enumerate(self.stages):
            if st.compute_at == "iter" and st.attach[0] == stage_id and st.attach[1] in old_names:
                if stages is None:
                    stages = list(self.stages)
                stages[k] = evolve(st, attach=(stage_id, new_name))
        # nothing attached there: the same stages, in a new State as before
        return State(self.dag, self.stages if stages is None else tuple(stages), self.transform_steps)


# id(op) -> the ids of the ops whose outputs ``op`` reads (``op.input_tensors()`` walks its
# body on every call; ``consumers`` asks it of every stage, many times per replayed step).
# An op is immutable, and the entry keeps it (so its id is not reused while the entry
# lives); the ops it reads are kept alive by it.
_INPUT_OPS_MAX = 4096
_INPUT_OPS: BoundedCache[int, frozenset] = BoundedCache(_INPUT_OPS_MAX)


def _input_op_ids(op) -> frozenset:
    ids = _INPUT_OPS.get(id(op), keep=(op,))
    if ids is None:
        ids = _INPUT_OPS.put(id(op), frozenset(id(t.op) for t in op.input_tensors()), keep=(op,))
    return ids


# id(stages tuple) -> ``_input_op_ids`` of each stage's op: one lookup per ``consumers`` call
# instead of one per stage (a compute_at step and the compute-location check ask it of the
# same stages many times).  The tuple is immutable and kept by the entry.
_STAGE_READS_MAX = 256
_STAGE_READS: BoundedCache[int, tuple] = BoundedCache(_STAGE_READS_MAX)


def _stage_reads(stages: tuple) -> tuple:
    reads = _STAGE_READS.get(id(stages), keep=(stages,))
    if reads is None:
        reads = _STAGE_READS.put(id(stages), tuple(_input_op_ids(st.op) for st in stages), keep=(stages,))
    return reads


# id(dag) -> the stages of ``State.from_dag(dag)`` (kept with the dag and its ops tuple).
_INITIAL_STAGES_MAX = 64
_INITIAL_STAGES: BoundedCache[int, tuple] = BoundedCache(_INITIAL_STAGES_MAX)


def scan_body_stages(state: State) -> dict:
    """Stage id -> id of the scan whose time loop computes it.

    A scan's body is its update stages and every compute stage that reads the
    scan's state (directly or through other such stages): one time step of
    them runs in the scan's innermost time loop (unless attached deeper).
    """
    out = {}
    for k, st in enumerate(state.stages):
        if not isinstance(st.op, ScanOp):
            continue
        states = {id(t.op) for t in st.op.state_placeholder}
        reads_state: set = set()
        for j, s2 in enumerate(state.stages[:k]):
            ins = {id(t.op) for t in s2.op.input_tensors()}
            if ins & states or any(id(state.stages[r].op) in ins for r in reads_state):
                reads_state.add(j)
        for j in reads_state:
            if state.stages[j].op_type == "compute":
                out[j] = k
        for t in st.op.update:
            for j, s2 in enumerate(state.stages):
                if s2.op is t.op:
                    out[j] = k
    return out


def const_int(e: Any, what: str) -> int:
    v = const_value(e)
    if not isinstance(v, int):
        raise ScheduleError(f"{what} must be a constant integer, got {e}")
    return v


def extent_of(e: Any) -> Expr:
    return simplify(as_expr(e))


__all__ = ["Iterator", "SplitRel", "FuseRel", "Stage", "State", "make_stage", "root_iters_of",
           "ANNOTATIONS", "ANNOTATION_CODE", "IntImm", "IterVar", "field"]


def state_str(state) -> str:
    """One block per stage: its loops (name, extent, annotation) and compute location."""
    lines = []
    placeholders = [st.name for st in state.stages if st.op_type == "placeholder"]
    if placeholders:
        lines.append("Placeholder: " + ", ".join(placeholders))
    for st in state.stages:
        if st.op_type == "placeholder":
            continue
        where = st.compute_at
        if where == "iter":
            where = f"compute_at {state.stages[st.attach[0]].name}.{st.attach[1]}"
        lines.append(f"{st.name} ({st.op_type}, {where})")
        prag = st.pragma_dict()
        for it in st.iters:
            ext = "?" if it.extent is None else expr_str(it.extent)
            ann = "" if it.annotation == "none" else f" {it.annotation}"
            extra = "".join(f" {k}={v}" for k, v in prag.get(it.name, {}).items())
            lines.append(f"  for {it.name} (0,{ext}){ann}{extra}")
    return "\n".join(lines)


register_init_state(State.from_dag)
