"""Queries and edits on a state's transform-step history.

    State.transform_steps --edit one step--> steps --replay_steps(dag, steps)--> State

Stage ids in a step refer to the stages as they were when the step ran;
cache_read, cache_write and rfactor insert a stage and shift the ids after it.
:func:`stage_id_after` / :func:`stage_id_before` translate ids across those
steps (Ansor's GetTargetStageIDInState and the stage_id bookkeeping of
HasCacheWriteStage).  Mutations edit the history and replay it, as Ansor's
MutateComputeLocation and MutateParallel do; :func:`replay_or_none` is that
replay with an illegal result turned into ``None``.
"""

from __future__ import annotations

from scheduler_core.base.errors import LoweringError, ScheduleError
from scheduler_core.schedule.dataflow_step import (
    CacheReadStep,
    CacheWriteStep,
    RfactorStep,
    replay_steps,
)
from scheduler_core.schedule.transform_step import check_compute_locations

STAGE_INSERTING_STEPS = (CacheReadStep, CacheWriteStep, RfactorStep)


def inserted_position(step) -> int | None:
    """The index at which ``step`` inserts a stage (ids at or after it shift by one), or None.

    cache_write and rfactor insert the new stage at ``stage_id`` (the original
    moves to ``stage_id + 1``); cache_read inserts it at ``stage_id + 1``.
    """
    if isinstance(step, (CacheWriteStep, RfactorStep)):
        return step.stage_id
    if isinstance(step, CacheReadStep):
        return step.stage_id + 1
    return None


def stage_id_after(steps, step_index: int, stage_id: int) -> int:
    """The id, after all of ``steps``, of the stage that had ``stage_id`` right after
    ``steps[step_index]`` ran (Ansor's GetTargetStageIDInState)."""
    for step in steps[step_index + 1:]:
        pos = inserted_position(step)
        if pos is not None and stage_id >= pos:
            stage_id += 1
    return stage_id


def _id_before_step(step, stage_id: int) -> int | None:
    """The id, before ``step`` ran, of the stage that has ``stage_id`` right after it;
    None when ``step`` created that stage."""
    pos = inserted_position(step)
    if pos is None or stage_id < pos:
        return stage_id
    if stage_id == pos:
        return None
    return stage_id - 1


def stage_id_before(steps, step_index: int, stage_id: int) -> int | None:
    """The id, right after ``steps[step_index]`` ran, of the stage that has ``stage_id``
    after all of ``steps``; None when a later step created that stage."""
    for step in reversed(steps[step_index + 1:]):
        before = _id_before_step(step, stage_id)
        if before is None:
            return None
        stage_id = before
    return stage_id


def _made_by(state, stage_id: int, kind) -> bool:
    for step in reversed(state.transform_steps):
        if isinstance(step, kind) and step.stage_id == stage_id:
            return True
        before = _id_before_step(step, stage_id)
        if before is None:
            return False
        stage_id = before
    return False


def has_cache_write_stage(state, stage_id: int) -> bool:
    """Whether stage ``stage_id`` is the ``.local`` stage a cache_write made (Ansor's
    HasCacheWriteStage: the cache-write step ran on the id this stage has now)."""
    return _made_by(state, stage_id, CacheWriteStep)


def has_rfactor_stage(state, stage_id: int) -> bool:
    """Whether stage ``stage_id`` is the ``.rf`` stage an rfactor made (Ansor's HasRfactorStage)."""
    return _made_by(state, stage_id, RfactorStep)


def replay_or_none(state, steps):
    """``replay_steps(state.dag, steps)``, or None when some step is illegal or the
    replayed state has compute locations lowering refuses (``check_compute_locations``:
    the steps leave those to the final state, and TVM's search drops a state its
    InferBound refuses)."""
    try:
        return check_compute_locations(replay_steps(state.dag, steps))
    except (ScheduleError, LoweringError):
        return None


def step_key(state) -> str:
    """A string that identifies ``state`` by its step records (for de-duplication)."""
    return repr([s.to_record() for s in state.transform_steps])


__all__ = ["STAGE_INSERTING_STEPS", "inserted_position", "stage_id_after", "stage_id_before",
           "has_cache_write_stage", "has_rfactor_stage", "replay_or_none", "step_key"]
