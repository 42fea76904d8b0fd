"""Where a stage may be computed (Ansor's GetComputeLocationCandidates).

    (state, stage_id) --> [(target stage id, iterator index), ...]

The candidates are loops of the stage's single consumer (or of the stage all
its consumers are computed at): its outer spatial loops, not going past the
first reduction loop of an untiled consumer, nor into a tiled consumer's inner
spatial tile after a reduction tile, nor past a loop where another stage is
already attached; loops of extent 1 are skipped.  When the consumer is itself
computed at a stage X, X's outer spatial loops are candidates too.  Scans are
never targets: the stages a scan reads are written through its buffers, not
inside its time loop.  ``src/auto_scheduler/search_policy/utils.cc``.
"""

from __future__ import annotations

from .state_queries import attached_stages, get_single_consumer_id


def get_compute_location_candidates(state, stage_id: int) -> list:
    """``[(target_stage_id, iter_id), ...]`` where stage ``stage_id`` may be computed at."""
    target = get_single_consumer_id(state, stage_id)
    if target < 0 or state.stages[target].op_type != "compute":
        return []
    attach = attached_stages(state)
    tst = state.stages[target]
    target_at_other = tst.compute_at == "iter"
    target_tiled = len(tst.iters) != len(tst.root)
    out: list = []
    visited_reduce = False
    for i, it in enumerate(tst.iters):
        if it.kind == "reduce":
            visited_reduce = True
            if not target_tiled:
                break
        elif it.kind == "spatial" and visited_reduce:
            break
        if it.annotation == "unroll":
            break
        if it.const_extent == 1:
            continue
        if target_at_other and it.kind == "spatial" and it.name.endswith(".0"):
            continue  # the outermost tile of an attached stage has length 1
        out.append((target, i))
        if (target, i) in attach:
            break
    if target_at_other:
        tt = tst.attach[0]
        for i, it in enumerate(state.stages[tt].iters):
            if it.kind == "reduce" or (tt, i) in attach or it.annotation == "unroll":
                break
            if it.const_extent == 1:
                continue
            out.append((tt, i))
    return out


__all__ = ["get_compute_location_candidates"]
