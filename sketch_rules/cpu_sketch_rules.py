"""Ansor's CPU sketch generation rules, in Ansor's order.

    RuleAlwaysInline -> [RuleSimplifyComputeWithConstTensor] -> RuleAddRfactor
      -> RuleAddCacheWrite -> RuleMultiLevelTilingWithFusion -> RuleMultiLevelTiling
      -> RuleSkipStage

(the bracketed rule, for Winograd's constant-tensor stages, lives in
``const_tensor_rule``; ``sketch_generation.default_sketch_rules`` holds the order).

Each follows ``src/auto_scheduler/search_policy/sketch_policy_rules.cc`` of TVM
(Ansor, OSDI'20, section 4.1, Table 1: "always inline", "multi-level tiling",
"multi-level tiling with fusion", "add cache stage", "reduction factorization",
"skip").  Departures: rules leave scan bodies alone (the scan rule of
``scan_sketch_rule`` handles them), and a step the compiler refuses drops that
branch instead of aborting.
"""

from __future__ import annotations

from scheduler_core.base.errors import ScheduleError
from scheduler_core.schedule.dataflow_step import (
    CacheWriteStep,
    ComputeInlineStep,
    RfactorStep,
)
from scheduler_core.schedule.transform_step import (
    ComputeAtStep,
    FuseStep,
    ReorderStep,
    SplitStep,
)

from .sketch_rule import ConditionKind, SketchRule
from .state_queries import (
    has_reduce_iter,
    is_output_stage,
    is_strictly_inlineable,
    is_tiled,
    needs_multi_level_tiling,
    needs_rfactor,
    scan_body_ids,
    scan_init_ids,
    scan_update_ids,
    single_elementwise_consumer,
)
from .step_history import has_cache_write_stage
from .tiling import do_multi_level_tiling, follow_tiling


def tiling_structure(policy) -> str:
    """The multi-level tiling structure for the policy's target ("SSRSRS" on CPU)."""
    p = policy.params
    return (p.gpu_multi_level_tiling_structure if policy.task.target.is_gpu
            else p.cpu_multi_level_tiling_structure)


def _is_compute(state, stage_id: int) -> bool:
    st = state.stages[stage_id]
    return st.op_type == "compute" and st.compute_at != "inlined"


def _tileable(state, stage_id: int) -> bool:
    """A compute stage outside any scan body that needs multi-level tiling."""
    return (_is_compute(state, stage_id) and stage_id not in scan_body_ids(state)
            and needs_multi_level_tiling(state, stage_id))


class RuleSkipStage(SketchRule):
    """Leave the stage as it is and go on with the previous one (always the last rule)."""

    name = "RuleSkipStage"

    def meet_condition(self, policy, state, stage_id):
        return ConditionKind.APPLY

    def apply(self, policy, state, stage_id):
        return [(state, stage_id - 1)]


class RuleAlwaysInline(SketchRule):
    """Inline a strictly inlineable stage (element-wise, simple reads, no branch, no
    expensive intrinsic), never an output, a reduction, a multi-output op or a scan's
    init/update.  On a
    GPU every such stage is inlined, strictly inlineable or not (Ansor: a kernel per
    element-wise stage costs more than recomputing it)."""

    name = "RuleAlwaysInline"

    def meet_condition(self, policy, state, stage_id):
        st = state.stages[stage_id]
        if (not _is_compute(state, stage_id) or is_output_stage(state, stage_id)
                or has_reduce_iter(st) or state.attached_to(stage_id) or st.op.num_outputs > 1):
            return ConditionKind.SKIP  # (a multi-output op cannot be inlined, as in TVM)
        if stage_id in scan_init_ids(state) or stage_id in scan_update_ids(state):
            return ConditionKind.SKIP
        return (ConditionKind.APPLY_AND_SKIP_REST
                if policy.task.target.is_gpu or is_strictly_inlineable(state, stage_id)
                else ConditionKind.SKIP)

    def apply(self, policy, state, stage_id):
        try:
            return [(ComputeInlineStep(stage_id).apply(state), stage_id - 1)]
        except ScheduleError:
            return [(state, stage_id - 1)]


class RuleAddRfactor(SketchRule):
    """Factorize a long reduction: fuse the reduce loops, split by 1, rfactor either
    piece (the inner one moved innermost in the ``.rf`` stage, for vectorization).
    Gives two sketches; the split length is left unknown in the final sketches."""

    name = "RuleAddRfactor"

    def meet_condition(self, policy, state, stage_id):
        if (not _is_compute(state, stage_id) or stage_id in scan_body_ids(state)
                or state.stages[stage_id].op.num_outputs > 1):  # RfactorStep takes one output
            return ConditionKind.SKIP
        return (ConditionKind.APPLY if needs_rfactor(policy.task, state, stage_id)
                and not has_cache_write_stage(state, stage_id) else ConditionKind.SKIP)

    def apply(self, policy, state, stage_id):
        st = state.stages[stage_id]
        space = [k for k, it in enumerate(st.iters) if it.kind == "spatial"]
        red = [k for k, it in enumerate(st.iters) if it.kind == "reduce"]
        try:
            if len(red) > 1:
                state = FuseStep(stage_id, tuple(red)).apply(state)
            fused = red[0]
            extent = state.stages[stage_id].iters[fused].const_extent
            base = SplitStep(stage_id, fused, extent, (1,), True).apply(state)
        except ScheduleError:
            return []
        out = []
        for piece in (fused, fused + 1):
            try:
                s = RfactorStep(stage_id, piece, len(space)).apply(base)
                if piece == fused + 1:
                    n = len(s.stages[stage_id].iters)
                    order = [i for i in range(n) if i != len(space)] + [len(space)]
                    s = ReorderStep(stage_id, tuple(order)).apply(s)
            except ScheduleError:
                continue
            out.append((s, stage_id - 1))
        return out


class RuleAddCacheWrite(SketchRule):
    """Add a ``.local`` cache stage to a multi-level-tiled stage that has no element-wise
    consumer to fuse into; the tiled computation then fuses into the copy-out stage."""

    name = "RuleAddCacheWrite"

    def meet_condition(self, policy, state, stage_id):
        if not _tileable(state, stage_id) or single_elementwise_consumer(state, stage_id) is not None:
            return ConditionKind.SKIP
        return ConditionKind.APPLY_AND_SKIP_REST if policy.task.target.is_gpu else ConditionKind.APPLY

    def apply(self, policy, state, stage_id):
        try:
            return [(CacheWriteStep(stage_id, "local").apply(state), stage_id)]
        except ScheduleError:
            return []


class RuleMultiLevelTilingWithFusion(SketchRule):
    """Tile the stage with the tiling structure and fuse it into its element-wise
    consumer: the consumer follows the spatial splits up to level 1 or 2 (one
    sketch each) and the stage is computed at the consumer's last loop of that level."""

    name = "RuleMultiLevelTilingWithFusion"

    def meet_condition(self, policy, state, stage_id):
        if not _tileable(state, stage_id) or is_tiled(state.stages[stage_id]):
            return ConditionKind.SKIP
        target = single_elementwise_consumer(state, stage_id)
        if target is None or is_tiled(state.stages[target]) or target in scan_body_ids(state):
            return ConditionKind.SKIP
        if has_cache_write_stage(state, stage_id) or policy.task.target.is_gpu:
            return ConditionKind.APPLY_AND_SKIP_REST
        return ConditionKind.APPLY

    def apply(self, policy, state, stage_id):
        target = single_elementwise_consumer(state, stage_id)
        structure = tiling_structure(policy)
        try:
            base, split_ids = do_multi_level_tiling(state, stage_id, structure)
        except ScheduleError:
            return []
        levels = (3,) if policy.task.target.is_gpu else (1, 2)
        out = []
        for level in levels:
            if structure[level - 1].upper() != "S":
                continue
            try:
                s = follow_tiling(base, target, split_ids, level)
                iter_id = level * len(split_ids) - 1
                s = ComputeAtStep(stage_id, target, iter_id).apply(s)
            except ScheduleError:
                continue
            out.append((s, stage_id - 1))
        return out


class RuleMultiLevelTiling(SketchRule):
    """Tile a stage with data reuse with the tiling structure ("SSRSRS" on CPU)."""

    name = "RuleMultiLevelTiling"

    def meet_condition(self, policy, state, stage_id):
        if not _tileable(state, stage_id) or is_tiled(state.stages[stage_id]):
            return ConditionKind.SKIP
        return ConditionKind.APPLY_AND_SKIP_REST

    def apply(self, policy, state, stage_id):
        try:
            s, _ = do_multi_level_tiling(state, stage_id, tiling_structure(policy))
        except ScheduleError:
            return [(state, stage_id - 1)]
        return [(s, stage_id - 1)]


__all__ = ["RuleAlwaysInline", "RuleAddRfactor", "RuleAddCacheWrite",
           "RuleMultiLevelTilingWithFusion", "RuleMultiLevelTiling", "RuleSkipStage",
           "tiling_structure"]
