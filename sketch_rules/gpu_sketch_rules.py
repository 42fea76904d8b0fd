"""Ansor's GPU sketch rules, and the GPU rule order.

    RuleAddCacheRead -> RuleSpecialComputeLocationGPU -> RuleAlwaysInline
      -> RuleSimplifyComputeWithConstTensor -> RuleCrossThreadReduction -> RuleAddCacheWrite
      -> RuleMultiLevelTilingWithFusion -> RuleMultiLevelTiling -> RuleSkipStage

The order is TVM's ``SketchPolicy`` for CUDA (``sketch_policy.cc``); the rules follow
``sketch_policy_rules.cc`` (Ansor, OSDI'20, section 4.1 and its GPU notes: shared-memory
cache stages for the data-reuse operators' inputs, cross-thread reduction instead of
rfactor).  The CPU rules of ``cpu_sketch_rules`` serve both targets where TVM's do:
on a GPU RuleAlwaysInline inlines every non-output element-wise stage, RuleAddCacheWrite
and RuleMultiLevelTilingWithFusion skip the rest, fusion is at level 3 of "SSSRRSRS".

Departures from TVM: RuleSpecialComputeLocationGPU applies only when the consumer
already has an unrolled loop (TVM aborts otherwise); RuleAddCacheRead leaves a consumer
without reduction loops alone (TVM aborts there); a consumer of a cross-thread reduction that cannot be followed
(a reduction of its own, or several splits) makes the reduction use its own warp split
instead of aborting; scans keep no rule of their own on a GPU.
"""

from __future__ import annotations

from scheduler_core.base.errors import ScheduleError
from scheduler_core.schedule.dataflow_step import CacheReadStep
from scheduler_core.schedule.transform_step import (
    AnnotationStep,
    ComputeAtStep,
    FollowSplitStep,
    FuseStep,
    SplitStep,
)

from .const_tensor_rule import RuleSimplifyComputeWithConstTensor
from .cpu_sketch_rules import (
    RuleAddCacheWrite,
    RuleAlwaysInline,
    RuleMultiLevelTiling,
    RuleMultiLevelTilingWithFusion,
    RuleSkipStage,
)
from .gpu_params import gpu_limits
from .sketch_rule import ConditionKind, SketchRule
from .state_queries import (
    analyzer_of,
    cumulative_lengths,
    get_consumers,
    get_single_consumer_id,
    has_reduce_iter,
    is_output_stage,
    needs_multi_level_tiling,
    scan_body_ids,
    stage_of_op,
)
from .step_history import has_cache_write_stage, stage_id_after

SIMPLIFY_CONST_TENSOR_INDICES = "auto_scheduler_simplify_const_tensor_indices"


# -- queries --------------------------------------------------------------------
def has_cross_thread_reduction(state, stage_id: int) -> bool:
    """Whether the stage, or a stage computed at one of its loops, reduces across threads:
    a reduction loop bound to ``threadIdx.x`` (Ansor's HasCrossThreadReduction)."""
    def reduces_across(k: int) -> bool:
        return any(it.kind == "reduce" and it.annotation == "threadIdx.x"
                   for it in state.stages[k].iters)

    if reduces_across(stage_id):
        return True
    return any(reduces_across(k) for k in state.attached_to(stage_id))


def get_direct_producers(state, stage_id: int) -> list:
    """Stage ids whose outputs the stage's op reads directly (Ansor's GetDirectProducers)."""
    op = state.stages[stage_id].op
    return sorted(stage_of_op(state, p) for p in analyzer_of(state).get_direct_producers(op))


def get_producers(state, stage_id: int) -> list:
    """Stage ids the stage reads, looking through inlined stages (Ansor's GetProducers)."""
    op = state.stages[stage_id].op
    return sorted(stage_of_op(state, p) for p in analyzer_of(state).get_producers(state, op))


def last_reduce_iter_in_outermost_reduce_tile(stage) -> int | None:
    """The index of the last loop of the outermost reduction tile: the n-th reduction
    loop for an op with n reduction axes (Ansor's GetLastReduceIteratorInOutermostReduceTile);
    the last reduction loop when there are fewer; None without reduction loops."""
    n = len(getattr(stage.op, "reduce_axis", ()) or ())
    last = None
    seen = 0
    for k, it in enumerate(stage.iters):
        if it.kind == "reduce":
            seen += 1
            last = k
            if seen == n:
                return k
    return last


def split_step_ids_of(state, stage_id: int) -> list:
    """Indices in ``state.transform_steps`` of the SplitSteps made on the stage that has
    id ``stage_id`` now, in step order."""
    steps = state.transform_steps
    return [k for k, s in enumerate(steps)
            if isinstance(s, SplitStep) and stage_id_after(steps, k, s.stage_id) == stage_id]


def spatial_split_step_ids(state, stage_id: int) -> list:
    """The SplitSteps of the stage's spatial axes, in step order: all its splits but the
    last one per reduction axis (multi-level tiling splits the spatial axes first;
    Ansor's GetSpatialSplitStepIds / GetSplitStepIds)."""
    ids = split_step_ids_of(state, stage_id)
    n_reduce = len(getattr(state.stages[stage_id].op, "reduce_axis", ()) or ())
    return ids[:len(ids) - n_reduce] if n_reduce else ids


def fuse_all_reduction_iters(state, stage_id: int):
    """``(state, fused loop index)``: the stage's reduction loops fused into one
    (Ansor's FuseAllReductionIterators; a single reduction loop is left as it is)."""
    red = [k for k, it in enumerate(state.stages[stage_id].iters) if it.kind == "reduce"]
    if len(red) > 1:
        state = FuseStep(stage_id, tuple(red)).apply(state)
    return state, red[0]


# -- rules --------------------------------------------------------------------------
class RuleAddCacheRead(SketchRule):
    """Read an input of a data-reuse (multi-level-tiled) stage through a ``.shared`` cache
    stage computed at the consumer's last loop of the outermost reduction tile.  The new
    stage comes right after this one; the rule then visits this stage again."""

    name = "RuleAddCacheRead"

    def meet_condition(self, policy, state, stage_id):
        st = state.stages[stage_id]
        if st.op_type == "scan" or st.compute_at == "inlined" or stage_id in scan_body_ids(state):
            return ConditionKind.SKIP
        consumers = get_consumers(state, stage_id)
        if len(consumers) != 1:
            return ConditionKind.SKIP
        target = consumers[0]
        if (not needs_multi_level_tiling(state, target)
                or has_cross_thread_reduction(state, target)
                or stage_id not in get_direct_producers(state, target)
                or last_reduce_iter_in_outermost_reduce_tile(state.stages[target]) is None):
            return ConditionKind.SKIP
        return ConditionKind.APPLY_AND_SKIP_REST

    def apply(self, policy, state, stage_id):
        target = get_consumers(state, stage_id)[0]
        try:
            s = CacheReadStep(stage_id, "shared", (target,)).apply(state)
            target += 1 if target > stage_id else 0
            pos = last_reduce_iter_in_outermost_reduce_tile(s.stages[target])
            s = ComputeAtStep(stage_id + 1, target, pos).apply(s)
        except ScheduleError:
            return [(state, stage_id - 1)]
        return [(s, stage_id)]


class RuleSpecialComputeLocationGPU(SketchRule):
    """Compute a stage right outside the first unrolled loop of its single consumer, when
    that consumer asks for constant-tensor index simplification (winograd's transforms) and
    the stage is one a GPU would always inline (TVM's ShouldAlwaysBeInlined: not an output,
    no reduction loop); the consumer was unrolled by RuleSimplifyComputeWithConstTensor."""

    name = "RuleSpecialComputeLocationGPU"

    @staticmethod
    def _location(state, stage_id):
        if not get_producers(state, stage_id):
            return None
        consumers = get_consumers(state, stage_id)
        if len(consumers) != 1:
            return None
        tst = state.stages[consumers[0]]
        if SIMPLIFY_CONST_TENSOR_INDICES not in (getattr(tst.op, "attrs", None) or {}):
            return None
        for k, it in enumerate(tst.iters):
            if it.annotation == "unroll":
                return (consumers[0], k - 1) if k > 0 else None
        return None

    def meet_condition(self, policy, state, stage_id):
        st = state.stages[stage_id]
        if st.op_type != "compute" or st.compute_at == "inlined":
            return ConditionKind.SKIP
        # TVM's ShouldAlwaysBeInlined on a GPU: not an output, no reduction loop
        if is_output_stage(state, stage_id) or has_reduce_iter(st):
            return ConditionKind.SKIP
        return (ConditionKind.APPLY_AND_SKIP_REST if self._location(state, stage_id) is not None
                else ConditionKind.SKIP)

    def apply(self, policy, state, stage_id):
        target, iter_id = self._location(state, stage_id)
        try:
            return [(ComputeAtStep(stage_id, target, iter_id).apply(state), stage_id - 1)]
        except ScheduleError:
            return [(state, stage_id - 1)]


class RuleCrossThreadReduction(SketchRule):
    """Reduce across the threads of a warp instead of factorizing (Ansor's GPU answer to
    rfactor): fuse the reduction loops, split them so the inner piece is bound to
    ``threadIdx.x``.  When the stage has one consumer it shares outer loops with and that
    consumer does not need multi-level tiling, the consumer's last loop is split by the
    warp size and bound to ``threadIdx.x`` too, the reduction follows that split and is
    computed at the consumer's last common outer loop (one kernel).  Otherwise the split
    length is the warp size.  Applies (and lets the later rules apply too) to a data-reuse
    stage whose spatial loops are shorter than its reduction, and to any other reduction
    longer than a warp."""

    name = "RuleCrossThreadReduction"

    def meet_condition(self, policy, state, stage_id):
        st = state.stages[stage_id]
        if (st.op_type != "compute" or st.compute_at == "inlined" or not has_reduce_iter(st)
                or stage_id in scan_body_ids(state) or has_cache_write_stage(state, stage_id)):
            return ConditionKind.SKIP
        if st.op.num_outputs > 1:  # the GPU lowering's allreduce takes one output only
            return ConditionKind.SKIP
        space, red = cumulative_lengths(st)
        if needs_multi_level_tiling(state, stage_id):
            return ConditionKind.APPLY if space < red else ConditionKind.SKIP
        if red > 1:
            return ConditionKind.APPLY if red > gpu_limits(policy.task).warp_size else ConditionKind.SKIP
        return ConditionKind.SKIP

    def apply(self, policy, state, stage_id):
        warp = gpu_limits(policy.task).warp_size
        try:
            s, fused = fuse_all_reduction_iters(state, stage_id)
        except ScheduleError:
            return []
        fusible = self._fusible_target(state, s, stage_id)
        if fusible is not None:
            out = self._fuse_into(s, stage_id, fused, fusible, warp)
            if out is not None:
                return [(out, stage_id - 1)]
        try:
            ext = s.stages[stage_id].iters[fused].const_extent
            s = SplitStep(stage_id, fused, ext, (warp,), True).apply(s)
            s = AnnotationStep(stage_id, fused + 1, "threadIdx.x").apply(s)
        except ScheduleError:
            return []
        return [(s, stage_id - 1)]

    @staticmethod
    def _fusible_target(state, s, stage_id):
        """``(target stage id, number of common outer loops)`` or None."""
        target = get_single_consumer_id(s, stage_id)
        if target < 0:
            return None
        an = analyzer_of(s)
        common = an.num_common_outer_iterators(s.stages[stage_id].op, s.stages[target].op)
        if common <= 0 or needs_multi_level_tiling(state, target):
            return None
        return target, common

    @staticmethod
    def _fuse_into(s, stage_id, fused, fusible, warp):
        """The state with the reduction computed inside its consumer, or None."""
        target, common = fusible
        try:
            split_ids = split_step_ids_of(s, target)
            if not split_ids:
                tst = s.stages[target]
                if has_reduce_iter(tst) or not tst.iters:
                    return None
                last = len(tst.iters) - 1
                s = SplitStep(target, last, tst.iters[last].const_extent, (warp,), True).apply(s)
                s = AnnotationStep(target, last + 1, "threadIdx.x").apply(s)
                split_ids = [len(s.transform_steps) - 2]
            if len(split_ids) != 1 or common > len(s.stages[target].iters):
                return None
            s = FollowSplitStep(stage_id, fused, split_ids[0], 1).apply(s)
            s = AnnotationStep(stage_id, fused + 1, "threadIdx.x").apply(s)
            return ComputeAtStep(stage_id, target, common - 1).apply(s)
        except ScheduleError:
            return None


def gpu_sketch_rules() -> list:
    """Ansor's GPU (CUDA) rules in TVM's order."""
    return [RuleAddCacheRead(), RuleSpecialComputeLocationGPU(), RuleAlwaysInline(),
            RuleSimplifyComputeWithConstTensor(), RuleCrossThreadReduction(), RuleAddCacheWrite(),
            RuleMultiLevelTilingWithFusion(), RuleMultiLevelTiling(), RuleSkipStage()]


__all__ = ["RuleAddCacheRead", "RuleSpecialComputeLocationGPU", "RuleCrossThreadReduction",
           "gpu_sketch_rules", "has_cross_thread_reduction", "get_direct_producers",
           "get_producers", "last_reduce_iter_in_outermost_reduce_tile", "split_step_ids_of",
           "spatial_split_step_ids", "fuse_all_reduction_iters",
           "SIMPLIFY_CONST_TENSOR_INDICES"]
