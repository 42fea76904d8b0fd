"""Property: transform steps survive their JSON record form.

    step --to_record--> list --json.dumps--> text --json.loads--> list --step_from_record--> step'
    step' == step;  replay_steps(dag, records) gives the same State text and lowered program

Random schedules from
``random_schedule`` cover SP, RE, FU, AN, PR, CA, CI, CR, CHR, CHW and RF;
hand-written schedules add FSP, FFSP and SA, which the generator does not make.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler_core import te
from scheduler_core.base.errors import ScheduleError
from scheduler_core.dag.compute_dag import ComputeDAG
from scheduler_core.lowering.lower import lower_state
from scheduler_core.schedule.dataflow_step import (
    CacheReadStep,
    CacheWriteStep,
    ComputeInlineStep,
    RfactorStep,
    replay_steps,
    step_from_record,
)
from scheduler_core.schedule.loop_state import State
from scheduler_core.schedule.transform_step import (
    AnnotationStep,
    ComputeAtStep,
    ComputeRootStep,
    FollowFusedSplitStep,
    FollowSplitStep,
    FuseStep,
    PragmaStep,
    ReorderStep,
    SplitStep,
    StorageAlignStep,
)
from tests import workloads as W
from tests.scheduler_core.random_schedule import random_schedule
from tests.scheduler_core.test_random_schedules import DAGS, EXTRA_DAGS, get_dag


def _json_round_trip(step):
    text = json.dumps(step.to_record())
    rec = json.loads(text)
    back = step_from_record(rec)
    assert back == step, (step, back)
    assert json.dumps(back.to_record()) == text
    return rec


def check_round_trip(dag: ComputeDAG, state) -> None:
    """Every step of ``state`` round-trips; replaying the records rebuilds the same program."""
    records = [_json_round_trip(s) for s in state.transform_steps]
    # The whole log line's worth of steps, as one JSON text.
    records = json.loads(json.dumps(records))
    replayed = replay_steps(dag, records)
    assert tuple(replayed.transform_steps) == tuple(state.transform_steps)
    assert str(replayed) == str(state)
    assert str(lower_state(replayed, list(dag.tensors))) == str(lower_state(state, list(dag.tensors)))


@pytest.mark.parametrize("name", sorted(DAGS) + sorted(EXTRA_DAGS))
@settings(max_examples=8, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2 ** 32 - 1), n_steps=st.integers(1, 15))
def test_random_schedule_records_round_trip(name, seed, n_steps):
    dag = get_dag(name)
    state = random_schedule(State.from_dag(dag), np.random.default_rng(seed), n_steps)
    check_round_trip(dag, state)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(DAGS) + sorted(EXTRA_DAGS))
@settings(max_examples=100, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2 ** 32 - 1), n_steps=st.integers(1, 30))
def test_random_schedule_records_round_trip_slow(name, seed, n_steps):
    dag = get_dag(name)
    state = random_schedule(State.from_dag(dag), np.random.default_rng(seed), n_steps)
    check_round_trip(dag, state)


def test_follow_split_and_storage_align_round_trip():
    """FSP, FFSP and SA (steps the generator does not make) on matmul+bias+ReLU.

    Stages: 0 A, 1 B, 2 matmul, 3 bias, 4 relu.
    """
    dag = ComputeDAG(W.matmul_bias_relu(16, 24, 8))
    steps = [
        StorageAlignStep(2, 0, 8, 1),               # #0: matmul rows padded to 8k+1
        SplitStep(2, 0, 16, (2, 4), True),          # #1: matmul i -> i.0 i.1 i.2
        SplitStep(2, 3, 24, (3, 4), True),          # #2: matmul j -> j.0 j.1 j.2
        FollowSplitStep(4, 0, 1, 2),                # relu i like #1, 2 pieces
        FollowFusedSplitStep(4, 2, (2,), 0, True),  # relu j by level 0 of #2
        ComputeAtStep(2, 4, 1),
    ]
    state = State.from_dag(dag)
    for s in steps:
        state = s.apply(state)
    check_round_trip(dag, state)


@pytest.mark.parametrize("step", [
    SplitStep(2, 0, 1024, (4, 8), True),
    SplitStep(2, 1, None, (None,), False),
    FollowSplitStep(3, 0, 0, 2),
    FollowFusedSplitStep(3, 1, (0, 1), 1, False),
    FuseStep(2, (0, 1, 2)),
    ReorderStep(2, (2, 0, 1)),
    AnnotationStep(2, 0, "parallel"),
    AnnotationStep(2, 3, "vectorize"),
    AnnotationStep(2, 1, "threadIdx.x"),
    PragmaStep(2, 0, "auto_unroll_max_step$16"),
    ComputeAtStep(2, 4, 1),
    ComputeRootStep(2),
    StorageAlignStep(2, 0, 16, 1),
    ComputeInlineStep(3),
    CacheReadStep(0, "shared", (2, 5)),
    CacheWriteStep(2, "local"),
    RfactorStep(2, 2, 1),
])
def test_every_step_kind_round_trips(step):
    _json_round_trip(step)


def test_records_are_ansor_style():
    """Records are JSON lists headed by Ansor's step names."""
    assert SplitStep(2, 0, 1024, (4, 8), True).to_record() == ["SP", 2, 0, 1024, [4, 8], 1]
    assert AnnotationStep(2, 0, "parallel").to_record() == ["AN", 2, 0, 3]
    assert CacheWriteStep(2, "local").to_record() == ["CHW", 2, "local"]


@pytest.mark.parametrize("rec", [[], ["XX", 1], ["SP", 2], ["AN", 0, 0, 99], ["FU", 0, 5], ["CA", "a", 1, 0]])
def test_malformed_records_raise_schedule_error(rec):
    with pytest.raises(ScheduleError):
        step_from_record(rec)


def test_replay_on_a_rebuilt_dag_gives_the_same_program():
    """Records replayed on a DAG built again (the resume path) lower to the same program."""
    state = random_schedule(State.from_dag(get_dag("conv2d_nchw")), np.random.default_rng(3), 12)
    records = json.loads(json.dumps([s.to_record() for s in state.transform_steps]))
    fresh = ComputeDAG(DAGS["conv2d_nchw"]())
    again = replay_steps(fresh, records)
    assert str(lower_state(again, list(fresh.tensors))) == str(
        lower_state(state, list(get_dag("conv2d_nchw").tensors)))


def test_symbolic_extent_split_round_trips():
    """A split of a symbolic loop records ``extent`` as null."""
    n = te.var("n")
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] * 2.0, name="B")
    dag = ComputeDAG([A, B])
    state = SplitStep(1, 0, None, (8,), True).apply(State.from_dag(dag))
    assert state.transform_steps[0].to_record() == ["SP", 1, 0, None, [8], 1]
    check_round_trip(dag, state)
