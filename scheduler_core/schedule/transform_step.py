"""Transform steps that reshape loops: split, follow-split, fuse, reorder,
annotate, pragma, compute location and storage alignment.

Each step is a frozen dataclass with ``apply(state) -> State`` (raising
ScheduleError with a reason when illegal) and a compact record form
(``to_record()`` / ``step_from_record``) using Ansor's record names:
SP, FSP, FFSP, FU, RE, AN, PR, CA, CI, CR, CHR, CHW, RF, SA.  Iterators are
referred to by position in the stage, as in Ansor's records.  Steps that
change the dataflow (CI, CHR, CHW, RF) live in ``dataflow_step``.
"""

from __future__ import annotations

import functools
import operator
from dataclasses import dataclass

from scheduler_core.base.bounded_cache import BoundedCache
from scheduler_core.base.errors import LoweringError, ScheduleError, check
from scheduler_core.dag.tensor import PlaceholderOp
from scheduler_core.ir.expr import IntImm, as_expr
from scheduler_core.ir.simplify import simplify

from .iter_index import split_child_extents
from .loop_state import (
    ANNOTATION_CODE,
    ANNOTATIONS,
    FuseRel,
    Iterator,
    SplitRel,
    State,
    evolve,
    scan_body_stages,
)


def _prod(xs):
    return functools.reduce(operator.mul, xs, 1)


def _stage_iter(state: State, stage_id: int, iter_id: int):
    # An inlined stage keeps its loops, as in TVM's State: steps on them (or a stage
    # computed at one of them) take effect once a later compute_root brings it back;
    # lowering refuses a final state that still computes a stage at an inlined one.
    # (``if not ...: raise`` rather than ``check``: the messages are formatted only on
    # failure, and this runs for most steps of every replay.)
    if not 0 <= stage_id < len(state.stages):
        raise ScheduleError(f"stage index {stage_id} out of range")
    st = state.stages[stage_id]
    if isinstance(st.op, PlaceholderOp):  # st.op_type == "placeholder"
        raise ScheduleError(f"stage {st.name} is a placeholder and has no loops")
    if not 0 <= iter_id < len(st.iters):
        raise ScheduleError(f"stage {st.name} has no iterator #{iter_id}")
    return st, st.iters[iter_id]


# (extent value, extent dtype, lengths, inner_to_outer) -> split_child_extents of a split of a
# constant extent: a pure function of these (the pieces are new IntImms, never the parent's
# extent itself; Exprs are immutable, so states may share them).  Only exact ints and
# IntImms are cached, so that equal-but-different keys (True and 1) cannot meet.
_SPLIT_EXTENTS_MAX = 4096
_SPLIT_EXTENTS: BoundedCache[tuple, tuple] = BoundedCache(_SPLIT_EXTENTS_MAX)


def _split_extents(rel: SplitRel, extent) -> tuple:
    if type(extent) is IntImm and type(extent.value) is int and all(type(ln) is int for ln in rel.lengths):
        key = (extent.value, extent.dtype, rel.lengths, rel.inner_to_outer)
        out = _SPLIT_EXTENTS.get(key)
        if out is None:
            out = _SPLIT_EXTENTS.put(key, tuple(split_child_extents(rel, extent)))
        return out
    return tuple(split_child_extents(rel, extent))


def split_iterator(state: State, stage_id: int, iter_id: int, lengths: tuple,
                   inner_to_outer: bool) -> State:
    """Split iterator ``iter_id`` into ``len(lengths) + 1`` iterators (Ansor's DoSplitCommon)."""
    st, it = _stage_iter(state, stage_id, iter_id)
    check(len(lengths) >= 1, "split needs at least one length")
    for ln in lengths:
        if not (ln is None or (isinstance(ln, int) and ln >= 1)):
            raise ScheduleError(f"split lengths must be positive integers, got {lengths}")
    names = tuple(f"{it.name}.{k}" for k in range(len(lengths) + 1))
    rel = SplitRel(it.name, names, tuple(lengths), inner_to_outer)
    if it.extent is not None and None not in lengths:
        # The trip counts lowering uses (tightened to the parent's extent).
        extents = _split_extents(rel, it.extent)
    elif inner_to_outer:
        extents = (None,) + tuple(None if ln is None else IntImm(ln) for ln in lengths)
    else:
        extents = tuple(None if ln is None else IntImm(ln) for ln in lengths) + (None,)
    if not set(names).isdisjoint([i.name for i in st.iters]):
        raise ScheduleError(f"split of {it.name} would reuse iterator names")
    new_iters = tuple(map(Iterator, names, extents, (it.kind,) * len(names)))
    iters = st.iters[:iter_id] + new_iters + st.iters[iter_id + 1:]
    st = evolve(st, iters=iters, relations=st.relations + (rel,))
    # Pragmas on the split iterator move to the outermost piece.
    if st.pragmas and any(name == it.name for name, _ in st.pragmas):
        prag = st.pragma_dict()
        prag[names[0]] = prag.pop(it.name)
        st = evolve(st, pragmas=tuple((k, tuple(v.items())) for k, v in prag.items()))
    state = state.with_stage(stage_id, st)
    return state.retarget_attach(stage_id, (it.name,), names[-1])


@dataclass(frozen=True)
class SplitStep:
    """SP: split iterator ``iter_id`` of ``stage_id``.

    lengths: inner_to_outer=True -> trip counts of the inner pieces, outermost
    first (``split(x, factor=f)`` is ``lengths=(f,)``); False -> trip counts of
    the outer pieces (``split(x, nparts=p)``).  extent: the iterator's extent
    when the step was made (kept for records, as Ansor does).
    """

    stage_id: int
    iter_id: int
    extent: int | None
    lengths: tuple
    inner_to_outer: bool = True

    def apply(self, state: State) -> State:
        return split_iterator(state, self.stage_id, self.iter_id, tuple(self.lengths),
                              self.inner_to_outer).with_step(self)

    def to_record(self) -> list:
        return ["SP", self.stage_id, self.iter_id, self.extent, list(self.lengths),
                int(self.inner_to_outer)]


def _src_split(state: State, src_step_id: int) -> SplitStep:
    check(0 <= src_step_id < len(state.transform_steps), f"no step #{src_step_id} to follow")
    src = state.transform_steps[src_step_id]
    check(isinstance(src, SplitStep), f"step #{src_step_id} is not a split")
    return src


@dataclass(frozen=True)
class FollowSplitStep:
    """FSP: split like an earlier SplitStep ``src_step_id`` into ``n_split`` pieces.

    The first ``n_split - 1`` lengths are copied; the last is the product of the
    rest (Ansor's FollowSplitStep::ExtractSplitLengths).
    """

    stage_id: int
    iter_id: int
    src_step_id: int
    n_split: int

    def lengths(self, state: State) -> tuple:
        src = _src_split(state, self.src_step_id)
        check(1 <= self.n_split <= len(src.lengths) + 1, "n_split does not fit the followed split")
        out = list(src.lengths[: self.n_split - 1])
        tail = src.lengths[self.n_split - 1:]
        out.append(None if any(t is None for t in tail) else _prod(tail))
        return tuple(out)

    def apply(self, state: State) -> State:
        return split_iterator(state, self.stage_id, self.iter_id, self.lengths(state),
                              True).with_step(self)

    def to_record(self) -> list:
        return ["FSP", self.stage_id, self.iter_id, self.src_step_id, self.n_split]


@dataclass(frozen=True)
class FollowFusedSplitStep:
    """FFSP: split by the product of level ``level`` of several earlier splits.

    factor_or_nparts: True -> the product is the inner factor, else nparts.
    """

    stage_id: int
    iter_id: int
    src_step_ids: tuple
    level: int
    factor_or_nparts: bool

    def length(self, state: State) -> int | None:
        out = 1
        for sid in self.src_step_ids:
            src = _src_split(state, sid)
            check(0 <= self.level < len(src.lengths), "level out of range of the followed split")
            if src.lengths[self.level] is None:
                return None
            out *= src.lengths[self.level]
        return out

    def apply(self, state: State) -> State:
        return split_iterator(state, self.stage_id, self.iter_id, (self.length(state),),
                              self.factor_or_nparts).with_step(self)

    def to_record(self) -> list:
        return ["FFSP", self.stage_id, self.iter_id, list(self.src_step_ids), self.level,
                int(self.factor_or_nparts)]


@dataclass(frozen=True)
class FuseStep:
    """FU: fuse consecutive iterators ``iter_ids`` (outer to inner) into one."""

    stage_id: int
    iter_ids: tuple

    def apply(self, state: State) -> State:
        check(len(self.iter_ids) >= 1, "fuse needs at least one iterator")
        st, _ = _stage_iter(state, self.stage_id, self.iter_ids[0])
        ids = list(self.iter_ids)
        if ids != list(range(ids[0], ids[0] + len(ids))):
            raise ScheduleError(f"fuse needs consecutive iterators in order, got {ids}")
        if not ids[-1] < len(st.iters):
            raise ScheduleError(f"stage {st.name} has no iterator #{ids[-1]}")
        its = [st.iters[k] for k in ids]
        kinds = {it.kind for it in its}
        if len(kinds) != 1:
            raise ScheduleError(f"cannot fuse spatial with reduce iterators in {st.name}")
        if len(its) == 1:
            return state.with_step(self)
        name = "@".join(it.name for it in its) + "@"
        ext = None if any(it.extent is None for it in its) else simplify(
            functools.reduce(operator.mul, [as_expr(it.extent) for it in its]))
        ann = {it.annotation for it in its}
        fused = Iterator(name, ext, its[0].kind, "none" if len(ann) > 1 else its[0].annotation)
        iters = st.iters[: ids[0]] + (fused,) + st.iters[ids[-1] + 1:]
        rel = FuseRel(tuple(it.name for it in its), name)
        prag = st.pragma_dict()
        merged = {}
        for it in its:
            merged.update(prag.pop(it.name, {}))
        if merged:
            prag[name] = merged
        st = evolve(st, iters=iters, relations=st.relations + (rel,),
                     pragmas=tuple((k, tuple(v.items())) for k, v in prag.items()))
        state = state.with_stage(self.stage_id, st)
        return state.retarget_attach(self.stage_id, tuple(it.name for it in its), name).with_step(self)

    def to_record(self) -> list:
        return ["FU", self.stage_id, list(self.iter_ids)]


@dataclass(frozen=True)
class ReorderStep:
    """RE: put the stage's iterators in the order ``after_ids`` (a permutation).

    Raises ScheduleError for a bad stage id or an ``after_ids`` that is not a
    permutation.  As TVM's ReorderStep, it does not look at compute locations or at
    the order of a scan's time loops: a later step may still fix those, so lowering
    checks the final state (:func:`check_compute_locations`, TVM's InferBound).
    """

    stage_id: int
    after_ids: tuple

    def apply(self, state: State) -> State:
        st = state[self.stage_id]  # State.stage_index raises ScheduleError out of range
        if sorted(self.after_ids) != list(range(len(st.iters))):
            raise ScheduleError(f"reorder of {st.name} needs a permutation of 0..{len(st.iters) - 1}, "
                                f"got {list(self.after_ids)}")
        iters = tuple(st.iters[k] for k in self.after_ids)
        return state.with_stage(self.stage_id, evolve(st, iters=iters)).with_step(self)

    def to_record(self) -> list:
        return ["RE", self.stage_id, list(self.after_ids)]


@dataclass(frozen=True)
class AnnotationStep:
    """AN: mark an iterator unroll / vectorize / parallel / vthread / bound to a GPU axis."""

    stage_id: int
    iter_id: int
    annotation: str

    def apply(self, state: State) -> State:
        st, it = _stage_iter(state, self.stage_id, self.iter_id)
        if self.annotation not in ANNOTATIONS:
            raise ScheduleError(f"unknown annotation {self.annotation!r}")
        if self.annotation in ("parallel", "vectorize") or self.annotation.startswith(("block", "thread")):
            if not (it.kind != "reduce" or self.annotation == "vectorize" or self.annotation.startswith("thread")):
                raise ScheduleError(f"cannot {self.annotation} the reduction iterator {it.name} of {st.name}")
            if self.annotation == "parallel" and it.kind == "reduce":
                raise ScheduleError(f"cannot parallelize reduction iterator {it.name}")
            if it.kind == "scan":
                raise ScheduleError(f"cannot {self.annotation} the scan time loop {it.name}: "
                                    "each step reads the previous one")
        iters = list(st.iters)
        iters[self.iter_id] = evolve(it, annotation=self.annotation)
        return state.with_stage(self.stage_id, evolve(st, iters=tuple(iters))).with_step(self)

    def to_record(self) -> list:
        return ["AN", self.stage_id, self.iter_id, ANNOTATION_CODE[self.annotation]]


@dataclass(frozen=True)
class PragmaStep:
    """PR: a pragma on an iterator, e.g. ``"auto_unroll_max_step$16"`` (Ansor's encoding)."""

    stage_id: int
    iter_id: int
    pragma_type: str

    def parsed(self) -> tuple:
        key, _, val = self.pragma_type.partition("$")
        if key == "auto_unroll_max_step":
            check(val.isdigit(), f"auto_unroll_max_step needs an integer, got {val!r}")
            return key, int(val)
        if key == "unroll_explicit":
            return key, val not in ("0", "False", "false")
        raise ScheduleError(f"unknown pragma {key!r}")

    def apply(self, state: State) -> State:
        st, it = _stage_iter(state, self.stage_id, self.iter_id)
        key, val = self.parsed()
        prag = st.pragma_dict()
        prag.setdefault(it.name, {})[key] = val
        st = evolve(st, pragmas=tuple((k, tuple(v.items())) for k, v in prag.items()))
        return state.with_stage(self.stage_id, st).with_step(self)

    def to_record(self) -> list:
        return ["PR", self.stage_id, self.iter_id, self.pragma_type]


def _reaches(state: State, src: int, dst: int) -> bool:
    """True if stage ``dst`` (transitively) reads stage ``src``."""
    frontier, seen = [src], set()
    while frontier:
        cur = frontier.pop()
        for c in state.consumers(cur):
            if c == dst:
                return True
            if c not in seen:
                seen.add(c)
                frontier.append(c)
    return False


def effective_readers(state: State, stage_id: int) -> set:
    """Non-inlined stages that read ``stage_id``, directly or through inlined stages.

    A scan does not count: it reads its init/update stages by aliasing their
    buffers, not at any loop.
    """
    out, seen, frontier = set(), set(), [stage_id]
    while frontier:
        for c in state.consumers(frontier.pop()):
            if c in seen or state.stages[c].op_type == "scan":
                continue
            seen.add(c)
            if state.stages[c].compute_at == "inlined":
                frontier.append(c)
            else:
                out.add(c)
    return out


def attach_points(state: State) -> dict:
    """Stage id -> (target stage id, iterator name) for every stage computed at a loop:
    those moved by compute_at, and a scan's body left at root, which runs in the
    scan's innermost time loop (as lowering places it)."""
    out = {}
    scans = scan_body_stages(state)
    for k, st in enumerate(state.stages):
        if st.compute_at == "iter":
            out[k] = tuple(st.attach)
        elif st.compute_at == "root" and k in scans:
            out[k] = (scans[k], state.stages[scans[k]].iters[-1].name)
    return out


def attach_scope(state: State, target_stage_id: int, iter_name: str) -> set:
    """Stages computed inside loop ``iter_name`` of ``target_stage_id`` (the target included):
    those attached at that loop or an inner one, and everything attached inside them."""
    children: dict = {}
    for k, at in attach_points(state).items():
        children.setdefault(at, []).append(k)
    tgt = state.stages[target_stage_id]
    pos = tgt.iter_index(iter_name)
    inside = {target_stage_id}
    frontier = [(target_stage_id, it.name) for it in tgt.iters[pos:]]
    while frontier:
        for c in children.get(frontier.pop(), []):
            if c not in inside:
                inside.add(c)
                frontier.extend((c, it.name) for it in state.stages[c].iters)
    return inside


def check_compute_locations(state: State) -> State:
    """Raise LoweringError unless every compute location of the final ``state`` can be lowered.

    The steps do not check where stages end up: TVM's ComputeAtStep and ComputeRootStep
    only move the stage (the stages attached to it stay attached to its iterators), so a
    step sequence may pass through states that cannot be lowered and mend them later
    (compute_at of a producer before its cache stage reader is placed, compute_root of a
    stage while another is attached at its loops).  Lowering checks the state it gets,
    as TVM's InferBound does (``compute_dag.cc`` InferBound, ``te/schedule/bound.cc``),
    and refuses, naming the stage, the loop and why:

    - a stage computed at a loop of an inlined stage (that loop never runs);
    - compute locations that form a cycle;
    - a scan whose time loops (pieces of its split time axis) were reordered out of
      order: each time step reads the previous one;
    - a stage computed at loop ``T.x`` and read by a (non-inlined) stage outside that
      loop: it computes only what the readers in one iteration of ``T.x`` need (TVM's
      "cannot find the producer along the loop nest specified by compute_at").

    Returns ``state``.  Raises LoweringError.  A State is immutable, so a state that passed
    is remembered (by identity, the last ``_CHECKED_MAX`` of them) and not checked again: the
    search checks a mutant when it replays it and lowering checks it once more.
    """
    if _CHECKED.get(id(state), keep=(state,)) is None:
        _check_compute_locations(state)
        _CHECKED.put(id(state), True, keep=(state,))  # the state is kept so its id is not reused
    return state


_CHECKED_MAX = 8192
_CHECKED: BoundedCache[int, bool] = BoundedCache(_CHECKED_MAX)


def _check_compute_locations(state: State) -> None:
    for k, st in enumerate(state.stages):
        if st.compute_at != "iter":
            continue
        tgt_id, it_name = st.attach
        tgt = state.stages[tgt_id]
        where = f"{st.name} is computed at {tgt.name}.{it_name}"
        check(tgt.compute_at != "inlined", f"{where} but {tgt.name} is inlined, so that loop never "
              f"runs (compute_root {tgt.name} or move {st.name})", LoweringError)
        check(any(it.name == it_name for it in tgt.iters),
              f"{where} but {tgt.name} has no loop {it_name}", LoweringError)
        chain, cur = [k], tgt_id
        while state.stages[cur].compute_at == "iter" and cur not in chain:
            chain.append(cur)
            cur = state.stages[cur].attach[0]
        if cur in chain:
            cycle = chain[chain.index(cur):] + [cur]
            raise LoweringError("compute locations form a cycle: " + ", ".join(
                f"{state.stages[a].name} at {state.stages[b].name}.{state.stages[a].attach[1]}"
                for a, b in zip(cycle, cycle[1:])))
    for st in state.stages:
        check(st.op_type != "scan" or _time_loops_in_order(st),
              f"the time loops of scan {st.name} run out of order "
              f"({', '.join(it.name for it in st.iters if it.kind == 'scan')}): "
              "each time step reads the previous one", LoweringError)
    for k, (tgt, it_name) in attach_points(state).items():
        st = state.stages[k]
        scope = attach_scope(state, tgt, it_name)
        for r in sorted(effective_readers(state, k) - scope):
            raise LoweringError(
                f"{st.name} is computed at {state.stages[tgt].name}.{it_name} but "
                f"{state.stages[r].name} reads it outside that loop")


def _time_loops_in_order(st) -> bool:
    """Whether the scan stage ``st`` runs its time loops outer to inner in time order: the
    order its splits and fuses made them in, with no reorder (or fuse) swapping them."""
    order = [iv.var.name for iv in st.root]
    for rel in st.relations:
        if isinstance(rel, SplitRel):
            pos = order.index(rel.parent)
            order[pos:pos + 1] = list(rel.children)
        else:
            pos = order.index(rel.children[0])
            if order[pos:pos + len(rel.children)] != list(rel.children):
                return False
            order[pos:pos + len(rel.children)] = [rel.fused]
    time = [it.name for it in st.iters if it.kind == "scan"]
    return time == [n for n in order if n in time]


def _is_scan_update(state: State, stage_id: int) -> bool:
    op = state.stages[stage_id].op
    return any(st.op_type == "scan" and any(t.op is op for t in st.op.update) for st in state.stages)


@dataclass(frozen=True)
class ComputeAtStep:
    """CA: compute ``stage_id`` inside loop ``target_iter_id`` of ``target_stage_id``.

    Raises ScheduleError for what no later step can mend: a bad stage or iterator id, a
    stage that is not a compute stage, the stage itself as target, a scan update (te's
    compute_at refuses those too), a loop of a scan other than its innermost time loop,
    a target that does not read the stage (directly or through other stages).  Like
    TVM's ComputeAtStep it does not check the rest of the compute locations (the
    stage's readers inside that loop, an inlined target, the stages attached to this
    one): later steps may still place them, so lowering checks the final state
    (:func:`check_compute_locations`, TVM's InferBound).
    """

    stage_id: int
    target_stage_id: int
    target_iter_id: int

    def apply(self, state: State) -> State:
        st = state[self.stage_id]  # State.stage_index raises ScheduleError out of range
        if st.op_type != "compute":
            raise ScheduleError(f"only compute stages can be moved; {st.name} is a {st.op_type}")
        tgt, it = _stage_iter(state, self.target_stage_id, self.target_iter_id)
        check(self.stage_id != self.target_stage_id, "a stage cannot be computed at itself")
        if _is_scan_update(state, self.stage_id):
            raise ScheduleError(f"{st.name} is a scan update: it is computed in the scan's innermost time loop")
        if not (tgt.op_type != "scan" or self.target_iter_id == len(tgt.iters) - 1):
            raise ScheduleError(f"a stage computed at the scan {tgt.name} must be at its innermost time loop")
        if not _reaches(state, self.stage_id, self.target_stage_id):
            raise ScheduleError(f"{st.name} is not read (directly or through other stages) by {tgt.name}")
        st = evolve(st, compute_at="iter", attach=(self.target_stage_id, it.name))
        return state.with_stage(self.stage_id, st).with_step(self)

    def to_record(self) -> list:
        return ["CA", self.stage_id, self.target_stage_id, self.target_iter_id]


@dataclass(frozen=True)
class ComputeRootStep:
    """CR: compute ``stage_id`` at the root of the function (an inlined stage too).

    As TVM's ComputeRootStep it only moves the stage: stages computed at its loops
    stay attached to them, and no compute location is checked here (a later step may
    still place the stages that read it), lowering checks the final state
    (:func:`check_compute_locations`, TVM's InferBound).  Raises ScheduleError for a
    bad stage id or a stage that is not a compute stage.
    """

    stage_id: int

    def apply(self, state: State) -> State:
        st = state[self.stage_id]  # State.stage_index raises ScheduleError out of range
        check(st.op_type == "compute", f"{st.name} is not a compute stage")
        return state.with_stage(self.stage_id, evolve(st, compute_at="root", attach=None)).with_step(self)

    def to_record(self) -> list:
        return ["CR", self.stage_id]


@dataclass(frozen=True)
class StorageAlignStep:
    """SA: pad the stride of ``iter_id``'s axis so ``stride % factor == offset``."""

    stage_id: int
    iter_id: int
    factor: int
    offset: int

    def apply(self, state: State) -> State:
        st, it = _stage_iter(state, self.stage_id, self.iter_id)
        names = [iv.var.name for iv in st.root]
        check(it.name in names, f"storage_align needs a root axis; {it.name} is not one")
        check(self.factor >= 1 and 0 <= self.offset < self.factor, "storage_align needs 0 <= offset < factor")
        axis = names.index(it.name)
        st = evolve(st, storage_align=st.storage_align + ((axis, self.factor, self.offset),))
        return state.with_stage(self.stage_id, st).with_step(self)

    def to_record(self) -> list:
        return ["SA", self.stage_id, self.iter_id, self.factor, self.offset]
