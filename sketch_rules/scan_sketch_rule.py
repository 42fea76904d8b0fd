"""A sketch rule for the update stages of scans (``te.scan``, seed 001).

    s_update(t, i) --RuleScanUpdate--> t, i.0 (parallel), i.1      sketch 1
                                   --> t, i.0, i.1                 sketch 2

Ansor has no scan rule (its sketch rules skip ScanOps).  A scan's update stage
runs inside the scan's serial time loop, one time step at a time, so only its
other ("non-scan") axes can be tiled, parallelized and vectorized.  This rule
splits the innermost non-scan axis into an outer and an inner piece (length
left unknown for InitFillTileSize; InitVectorization vectorizes the inner
piece when it is short enough) and gives two sketches: the outermost non-scan
loop marked parallel (one parallel region per time step), and all serial (for
short rows, where a parallel launch per step costs more than it saves).
"""

from __future__ import annotations

from scheduler_core.base.errors import ScheduleError
from scheduler_core.schedule.transform_step import AnnotationStep, SplitStep

from .sketch_rule import ConditionKind, SketchRule
from .state_queries import derives_from, is_tiled, scan_update_ids


def non_scan_iter_ids(stage) -> list:
    """Indices of the spatial loops of a scan body stage that do not come from its time
    axis (the op's first axis)."""
    time = stage.root[0].var.name if stage.root else None
    return [k for k, it in enumerate(stage.iters)
            if it.kind == "spatial" and (time is None or not derives_from(it.name, time))]


class RuleScanUpdate(SketchRule):
    """Split the innermost non-scan axis of a scan's update stage; parallel or serial outer."""

    name = "RuleScanUpdate"

    def meet_condition(self, policy, state, stage_id):
        st = state.stages[stage_id]
        if (st.op_type != "compute" or st.compute_at == "inlined" or is_tiled(st)
                or stage_id not in scan_update_ids(state) or not non_scan_iter_ids(st)):
            return ConditionKind.SKIP
        return ConditionKind.APPLY_AND_SKIP_REST

    def apply(self, policy, state, stage_id):
        st = state.stages[stage_id]
        ids = non_scan_iter_ids(st)
        inner = ids[-1]
        try:
            split = SplitStep(stage_id, inner, st.iters[inner].const_extent, (None,), True).apply(state)
        except ScheduleError:
            return [(state, stage_id - 1)]
        out = []
        try:
            out.append((AnnotationStep(stage_id, ids[0], "parallel").apply(split), stage_id - 1))
        except ScheduleError:
            pass
        out.append((split, stage_id - 1))
        return out


__all__ = ["RuleScanUpdate", "non_scan_iter_ids"]
