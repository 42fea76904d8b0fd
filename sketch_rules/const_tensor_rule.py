"""Ansor's sketch rule for stages that compute with constant tensors (Winograd).

    data_pack(eps, nu, p, ci; r_a, r_b)                      attrs: [eps, nu, r_a, r_b]
      --RuleSimplifyComputeWithConstTensor-->
    p.0 ci.0 | p.1 ci.1 | eps nu r_a r_b (all unrolled)       one sketch, no other rule

TVM's ``RuleSimplifyComputeWithConstTensor`` (``sketch_policy_rules.cc``).  A compute
op whose ``attrs["auto_scheduler_simplify_const_tensor_indices"]`` names its loops
that index constant tensors (Winograd's transform matrices A, B, G, made by
``te.const_matrix``) is a "fake reduction": unrolled, those loops turn every read of a
constant matrix into a literal the simplifier folds.  The rule unrolls the named loops
and moves them innermost, and splits each other (spatial) loop into ``TILE_LEVEL = 2``
pieces with unknown length (InitFillTileSize fills it), ordered level by level: an
"SS" tiling of the real data axes around the unrolled transform.  It applies and skips
the rest, so such a stage gets no rfactor, cache-write or multi-level-tiling variant
(the access analysis already says it needs no multi-level tiling:
``access_analysis.SIMPLIFY_CONST_TENSOR_INDICES``).  In TVM's CPU order it comes right
after RuleAlwaysInline.

Departures from TVM, where TVM aborts (CHECK): the rule does not apply to a stage whose
attr is not a list of loop names, that has a reduction loop the attr does not name, that
is already tiled, or that lies in a scan body (the other rules then handle it); a step
the compiler refuses leaves the stage as it is.
"""

from __future__ import annotations

from scheduler_core.base.errors import ScheduleError
from scheduler_core.dag.access_analysis import SIMPLIFY_CONST_TENSOR_INDICES
from scheduler_core.schedule.transform_step import AnnotationStep, ReorderStep, SplitStep

from .sketch_rule import ConditionKind, SketchRule
from .state_queries import is_tiled, scan_body_ids

TILE_LEVEL = 2  # TVM: "Currently set to 2"


def const_tensor_indices(state, stage_id: int) -> frozenset | None:
    """The loop names stage ``stage_id``'s op lists under
    ``auto_scheduler_simplify_const_tensor_indices``, or None when the rule does not
    apply: no such attr, a value that is not a list of strings, an inlined, tiled or
    non-compute stage, a stage of a scan body, or a reduction loop not listed."""
    st = state.stages[stage_id]
    if st.op_type != "compute" or st.compute_at == "inlined" or is_tiled(st):
        return None
    names = (getattr(st.op, "attrs", None) or {}).get(SIMPLIFY_CONST_TENSOR_INDICES)
    if not isinstance(names, (list, tuple)) or not all(isinstance(n, str) for n in names):
        return None
    listed = frozenset(names)
    if any(it.kind != "spatial" and it.name not in listed for it in st.iters):
        return None
    if stage_id in scan_body_ids(state):
        return None
    return listed


class RuleSimplifyComputeWithConstTensor(SketchRule):
    """Unroll a stage's constant-tensor loops innermost and tile the others in two levels
    (TVM's RuleSimplifyComputeWithConstTensor); applies and skips the other rules."""

    name = "RuleSimplifyComputeWithConstTensor"

    def meet_condition(self, policy, state, stage_id):
        return (ConditionKind.APPLY_AND_SKIP_REST
                if const_tensor_indices(state, stage_id) is not None else ConditionKind.SKIP)

    def apply(self, policy, state, stage_id):
        listed = const_tensor_indices(state, stage_id)
        if listed is None:
            return [(state, stage_id - 1)]
        try:
            return [(unroll_and_tile(state, stage_id, listed, TILE_LEVEL), stage_id - 1)]
        except ScheduleError:
            return [(state, stage_id - 1)]


def unroll_and_tile(state, stage_id: int, unrolled_names, tile_level: int = TILE_LEVEL):
    """Stage ``stage_id`` of ``state`` with its loops named in ``unrolled_names`` unrolled
    and every other loop split into ``tile_level`` pieces (unknown lengths), then reordered:
    level 0 of the split loops, level 1, ..., then the unrolled loops in their order.

    Steps, as TVM records them: per loop in order an AN (unroll) or an SP, then one RE.
    Raises ScheduleError when a loop to split is not spatial or a step is refused.
    """
    levels: list = [[] for _ in range(tile_level)]
    unrolled: list = []
    for name in [it.name for it in state.stages[stage_id].iters]:
        st = state.stages[stage_id]
        k = st.iter_index(name)
        it = st.iters[k]
        if name in unrolled_names:
            state = AnnotationStep(stage_id, k, "unroll").apply(state)
            unrolled.append(name)
            continue
        if it.kind != "spatial":
            raise ScheduleError(f"{st.name}: loop {name} is not spatial and not a constant-tensor loop")
        if tile_level == 1:
            levels[0].append(name)
            continue
        state = SplitStep(stage_id, k, it.const_extent, (None,) * (tile_level - 1), True).apply(state)
        pieces = state.stages[stage_id].iters[k:k + tile_level]
        for level, piece in zip(levels, pieces):
            level.append(piece.name)
    order = [n for level in levels for n in level] + unrolled
    st = state.stages[stage_id]
    return ReorderStep(stage_id, tuple(st.iter_index(n) for n in order)).apply(state)


__all__ = ["RuleSimplifyComputeWithConstTensor", "const_tensor_indices", "unroll_and_tile",
           "TILE_LEVEL"]
