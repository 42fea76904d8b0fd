"""Regressions found by the random-schedule property tests (test_random_schedules).

Each test is the minimised schedule of one failure, written out by hand, with
what went wrong before the fix.  Stage numbers are given in each docstring.
"""

from __future__ import annotations

import numpy as np
import pytest

from scheduler_core.base.errors import LoweringError, ScheduleError
from scheduler_core.dag import reference
from scheduler_core.lowering.lower import lower_state
from scheduler_core.schedule.dataflow_step import CacheReadStep, CacheWriteStep, RfactorStep, replay_steps
from scheduler_core.schedule.loop_state import State
from scheduler_core.schedule.transform_step import AnnotationStep, ComputeAtStep, ReorderStep, SplitStep
from tests.scheduler_core.test_random_schedules import check_state, get_dag, random_inputs


def _builds_and_matches(name: str, steps: list) -> None:
    dag = get_dag(name)
    state = replay_steps(dag, steps)
    inputs = random_inputs(dag, np.random.default_rng(0))
    check_state(dag, state, inputs, reference.evaluate(dag, inputs))


def _rejected(name: str, steps: list, match: str) -> None:
    """All but the last step apply; the last raises ScheduleError matching ``match``."""
    state = replay_steps(get_dag(name), steps[:-1])
    with pytest.raises(ScheduleError, match=match):
        steps[-1].apply(state)


def _rejected_at_lowering(name: str, steps: list, match: str) -> None:
    """Every step applies (the steps, as TVM's, leave compute locations to the final
    state); lowering raises LoweringError matching ``match``."""
    state = replay_steps(get_dag(name), steps)
    with pytest.raises(LoweringError, match=match):
        lower_state(state)


# -- every reader stays inside the loop a stage is computed at (checked at lowering, as
# TVM's InferBound; these once failed deeper in lowering, then at the step) -----------
# softmax stages: 0 A, 1 row_max, 2 exp, 3 row_sum, 4 softmax

def test_compute_at_with_a_reader_outside_the_loop_is_rejected():
    """exp at softmax.j while row_sum (at root) reads exp: LoweringError at lowering before."""
    _rejected_at_lowering("softmax", [ComputeAtStep(2, 4, 1)], "row_sum reads it outside")


def test_compute_at_with_every_reader_inside_the_loop_builds():
    """The legal form: row_sum first moved into softmax.i, then exp too."""
    _builds_and_matches("softmax", [ComputeAtStep(3, 4, 0), ComputeAtStep(2, 4, 0)])


def test_reorder_that_moves_a_reader_out_of_a_producers_loop_is_rejected():
    """row_sum at softmax.j, exp at softmax.i (legal); swapping i and j leaves row_sum
    (now at the outer loop) reading exp computed in the inner one."""
    steps = [ComputeAtStep(3, 4, 1), ComputeAtStep(2, 4, 0)]
    _builds_and_matches("softmax", steps)
    _rejected_at_lowering("softmax", steps + [ReorderStep(4, (1, 0))], "row_sum reads it outside")


def test_compute_root_of_a_reader_is_rejected():
    """row_sum and exp at softmax.i; moving row_sum back to root leaves exp inside."""
    from scheduler_core.schedule.transform_step import ComputeRootStep
    _rejected_at_lowering("softmax", [ComputeAtStep(3, 4, 0), ComputeAtStep(2, 4, 0), ComputeRootStep(3)],
                          "row_sum reads it outside")


def test_cache_read_of_a_stage_computed_inside_its_reader_is_rejected():
    """rgb_to_yuv: rgb.local at yuv's fused loop, then cache_read of rgb.local for yuv put
    rgb.local.local at root reading it (LoweringError before).  Stages: 0 rgb, 1 yuv;
    after the first CHR: 0 rgb, 1 rgb.local, 2 yuv."""
    _rejected_at_lowering("rgb_to_yuv", [CacheReadStep(0, "local", (1,)), ComputeAtStep(1, 2, 0),
                                         CacheReadStep(1, "local", (2,))], "rgb.local.local reads it outside")


def test_cache_write_of_a_reader_inside_a_producers_loop_is_rejected():
    """softmax: row_sum and exp at softmax.i; cache_write of row_sum puts row_sum.local
    (the new reader of exp) at root (LoweringError before)."""
    _rejected_at_lowering("softmax", [ComputeAtStep(3, 4, 0), ComputeAtStep(2, 4, 0),
                                      CacheWriteStep(3, "local")], "row_sum.local reads it outside")


# -- scans (cumsum stages: 0 X, 1 s_init, 2 s_state, 3 s_update, 4 scan) --------------

def test_scan_with_non_divisible_time_split_stays_in_bounds():
    """The time axis (8 steps) split by 3 ran 9 steps and wrote a row past the output."""
    _builds_and_matches("cumsum_scan", [SplitStep(4, 0, 8, (3,), True)])


def test_scan_split_twice_non_divisible_with_cache_read_matches():
    _builds_and_matches("cumsum_scan", [SplitStep(4, 0, 8, (3,), True), SplitStep(4, 1, 3, (2,), True),
                                        CacheReadStep(0, "local", (3,))])


def test_compute_at_of_a_scan_update_is_rejected():
    """s_update at an outer time loop: BuildError 'variable scan.idx.1 is not bound' before."""
    _rejected("cumsum_scan", [SplitStep(4, 0, 8, (4,), True), ComputeAtStep(3, 4, 0)],
              "scan update")


def test_compute_at_a_scan_outer_time_loop_is_rejected():
    """A stage attached at an outer time loop would run before the inner steps it reads."""
    _rejected("cumsum_scan", [SplitStep(4, 0, 8, (4,), True), CacheReadStep(0, "local", (3,)),
                              ComputeAtStep(1, 5, 0)], "innermost time loop")


def test_compute_at_the_innermost_scan_loop_builds():
    _builds_and_matches("cumsum_scan", [SplitStep(4, 0, 8, (4,), True), CacheReadStep(0, "local", (3,)),
                                        ComputeAtStep(1, 5, 1)])


def test_reorder_of_scan_time_loops_is_rejected():
    """Swapping the split time loops ran the recurrence out of order (wrong numbers before)."""
    _rejected_at_lowering("cumsum_scan", [SplitStep(4, 0, 8, (2,), True), ReorderStep(4, (1, 0))],
                          "out of order")


@pytest.mark.parametrize("ann", ["parallel", "vectorize"])
def test_parallel_or_vectorized_scan_time_loop_is_rejected(ann):
    _rejected("cumsum_scan", [AnnotationStep(4, 0, ann)], "scan time loop")


# -- split extents (batch_matmul stages: 0 A, 1 B, 2 batch_matmul) ---------------------

def test_rfactor_after_an_oversized_nparts_split_matches():
    """k (6) split with nparts (4, 6): lowering tightens k.1 to 2 trips, but the iterator
    (and so rfactor's new axis) said 6, and rfactor summed some k twice (wrong numbers)."""
    steps = [SplitStep(2, 3, 6, (4, 6), False), RfactorStep(2, 4, 2)]
    _builds_and_matches("batch_matmul", steps)


def test_split_iterator_extents_are_the_lowered_trip_counts():
    state = SplitStep(2, 3, 6, (4, 6), False).apply(State.from_dag(get_dag("batch_matmul")))
    assert [it.const_extent for it in state.stages[2].iters[3:]] == [4, 2, 1]
    state = SplitStep(2, 3, 6, (4, 8), True).apply(State.from_dag(get_dag("batch_matmul")))
    assert [it.const_extent for it in state.stages[2].iters[3:]] == [1, 1, 6]
