"""Multi-level tiling and follow tiling (Ansor's DoMultiLevelTiling / FollowTiling).

    stage (i, j, k) --"SSRSRS"--> i.0 j.0 i.1 j.1 k.0 i.2 j.2 k.1 i.3 j.3
    consumer (i, j) --follow level 2--> i.0 j.0 i.1 j.1 i.2 j.2   (FollowSplitStep)

Every spatial loop is split into as many pieces as the structure has "S"
levels, every reduction loop into as many as it has "R" levels, with unknown
lengths (``None``) that InitFillTileSize fills later; one ReorderStep then puts
the pieces in the structure's order.  Ansor, section 4.1, rule "multi-level
tiling"; ``src/auto_scheduler/search_policy/utils.cc``.
"""

from __future__ import annotations

from scheduler_core.base.errors import ScheduleError, check
from scheduler_core.schedule.transform_step import (
    AnnotationStep,
    FollowSplitStep,
    ReorderStep,
    SplitStep,
)


def _reorder_by_names(state, stage_id: int, names: list):
    st = state.stages[stage_id]
    return ReorderStep(stage_id, tuple(st.iter_index(n) for n in names)).apply(state)


def do_multi_level_tiling(state, stage_id: int, structure: str) -> tuple:
    """Tile stage ``stage_id`` of ``state`` with ``structure`` (e.g. ``"SSRSRS"``).

    Returns ``(new_state, spatial_split_step_ids)``: the indices in
    ``new_state.transform_steps`` of the SplitSteps of the spatial loops, in loop
    order (what FollowTiling follows).  Raises ScheduleError for a structure
    with letters other than S/R, a stage with scan loops, or a level kind the
    stage has loops of but the structure lacks.
    """
    structure = structure.upper()
    check(set(structure) <= {"S", "R"} and structure, f"invalid tiling structure {structure!r}")
    n_space, n_reduce = structure.count("S"), structure.count("R")
    space_levels: list = [[] for _ in range(n_space)]
    reduce_levels: list = [[] for _ in range(n_reduce)]
    split_ids: list = []
    for it in state.stages[stage_id].iters:
        check(it.kind in ("spatial", "reduce"), f"cannot tile the {it.kind} loop {it.name}")
        n = n_space if it.kind == "spatial" else n_reduce
        levels = space_levels if it.kind == "spatial" else reduce_levels
        check(n >= 1, f"structure {structure!r} has no level for the {it.kind} loop {it.name}")
        if n == 1:
            levels[0].append(it.name)
            continue
        k = state.stages[stage_id].iter_index(it.name)
        state = SplitStep(stage_id, k, it.const_extent, (None,) * (n - 1), True).apply(state)
        pieces = [x.name for x in state.stages[stage_id].iters[k:k + n]]
        for level, name in zip(levels, pieces):
            level.append(name)
        if it.kind == "spatial":
            split_ids.append(len(state.transform_steps) - 1)
    order, s_ct, r_ct = [], 0, 0
    for c in structure:
        if c == "S":
            order += space_levels[s_ct]
            s_ct += 1
        else:
            order += reduce_levels[r_ct]
            r_ct += 1
    return _reorder_by_names(state, stage_id, order), split_ids


def follow_tiling(state, stage_id: int, split_step_ids: list, n_split: int):
    """Tile the spatial loops of stage ``stage_id`` like the splits ``split_step_ids``,
    cut after level ``n_split`` (1 to 3): each loop becomes ``n_split + 1`` pieces by a
    FollowSplitStep, then the pieces are ordered level by level.  Annotations move as
    in Ansor (unroll/vectorize to the innermost piece, parallel to the outermost).

    Raises ScheduleError when the stage has a non-spatial loop or a loop count that
    differs from ``len(split_step_ids)``.
    """
    check(1 <= n_split <= 3, f"follow tiling supports 1 to 3 levels, got {n_split}")
    st = state.stages[stage_id]
    check(all(it.kind == "spatial" for it in st.iters),
          f"follow tiling of {st.name} needs spatial loops only")
    check(len(st.iters) == len(split_step_ids),
          f"{st.name} has {len(st.iters)} loops but {len(split_step_ids)} splits to follow")
    levels: list = [[] for _ in range(n_split + 1)]
    for it, src in zip(st.iters, split_step_ids):
        k = state.stages[stage_id].iter_index(it.name)
        state = FollowSplitStep(stage_id, k, src, n_split).apply(state)
        pieces = [x.name for x in state.stages[stage_id].iters[k:k + n_split + 1]]
        if it.annotation in ("unroll", "vectorize"):
            state = AnnotationStep(stage_id, k + n_split, it.annotation).apply(state)
        elif it.annotation == "parallel":
            state = AnnotationStep(stage_id, k, it.annotation).apply(state)
        for level, name in zip(levels, pieces):
            level.append(name)
    return _reorder_by_names(state, stage_id, [n for level in levels for n in level])


__all__ = ["do_multi_level_tiling", "follow_tiling", "ScheduleError"]
