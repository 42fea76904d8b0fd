"""ProgramMeasurer measures a round in chunks: callbacks after each chunk (progress moves as
measurements finish) and a callback that raises (a cancelled job) ends the batch there, with
the measured chunks recorded and the rest never built."""

from __future__ import annotations

import pytest

from scheduler_core.dag.compute_dag import ComputeDAG
from scheduler_core.dag.task import Task
from scheduler_core.measure.data import MeasureInput
from scheduler_core.measure.local_builder import LocalBuilder
from scheduler_core.measure.local_runner import LocalRunner
from scheduler_core.schedule.loop_state import State
from scheduler_core.search.program_measurer import ProgramMeasurer
from tests.workloads import matmul_add


class Stop(Exception):
    pass


def test_a_round_is_measured_in_chunks_and_a_stop_keeps_what_was_measured():
    dag = ComputeDAG(matmul_add(8, 8, 8))
    task = Task.create(dag, "llvm")
    inputs = [MeasureInput(task, State.from_dag(dag)) for _ in range(10)]
    seen: list[int] = []

    def record(policy, ins, results):
        assert len(ins) == len(results)
        seen.append(len(results))

    with LocalBuilder(timeout_s=30, n_parallel=2) as builder, LocalRunner(timeout_s=30, min_repeat_ms=0) as runner:
        measurer = ProgramMeasurer(builder, runner, callbacks=[record], verbose=0, check_best=False)
        assert measurer.chunk == 4  # twice the parallel builds, at least 4
        results = measurer.measure(task, None, inputs)
        assert len(results) == 10 and seen == [4, 4, 2] and measurer.ct == 10

        def stop_after_first(policy, ins, results):
            raise Stop

        seen.clear()
        stopping = ProgramMeasurer(builder, runner, callbacks=[record, stop_after_first], verbose=0,
                                   check_best=False)
        with pytest.raises(Stop):
            stopping.measure(task, None, inputs)
        assert seen == [4] and stopping.ct == 4
