"""RedisRecordSink over several tasks: the one sink of task jobs and model jobs (a real Redis).

    two tasks, weights 2 and 1 --batches of each--> records per workload, trials_done:<task_id>,
    the job's best = 2 x best(task 0) + 1 x best(task 1) once both have one (None before)
"""

from __future__ import annotations

import pytest

from scheduler_core.dag.compute_dag import ComputeDAG
from scheduler_core.dag.task import Task
from scheduler_core.measure.data import MeasureErrorNo as E
from scheduler_core.measure.data import MeasureInput, MeasureResult
from scheduler_core.schedule.loop_state import State
from scheduler_core.schedule.schedule_api import Schedule
from tests.workloads import matmul_add
from workers.record_sink import RedisRecordSink
from workers.store import RedisStore

pytestmark = pytest.mark.integration


def _input(task: Task, factor: int) -> MeasureInput:
    out = task.compute_dag.tensors[-1]
    s = Schedule.from_state(State.from_dag(task.compute_dag))
    s[out].split(s[out].op.axis[0], factor=factor)
    return MeasureInput(task, s.state)


def _result(cost_s: float, error_no: int = 0) -> MeasureResult:
    return MeasureResult((cost_s,), int(error_no), "", 0.1, 1.7e9)


def test_a_model_job_sink_counts_each_task_and_weights_the_best(conn):
    store = RedisStore(conn)
    dags = [ComputeDAG(matmul_add(16, 16, 16)), ComputeDAG(matmul_add(8, 8, 8))]
    ids = [store.create_task(d, "llvm")[0] for d in dags]
    tasks = [Task.create(d, "llvm") for d in dags]
    job_id = store.create_job(ids[0], 6)
    sink = RedisRecordSink(store, tasks, job_id, weights=(2, 1),
                           task_ids={str(t.workload_key): i for t, i in zip(tasks, ids)})
    sink(None, [_input(tasks[0], f) for f in (2, 4)], [_result(3e-3), _result(1e-3)])
    job = store.get_job(job_id)
    assert job is not None and job.best_cost_s is None  # task 1 has no measurement yet
    assert job.trials_done == 2 and store.task_progress(job_id, ids) == {ids[0]: 2, ids[1]: 0}
    sink(None, [_input(tasks[1], f) for f in (2, 4, 8)], [_result(5e-4), _result(9.0, E.RUN_TIMEOUT), _result(4e-4)])
    job = store.get_job(job_id)
    assert job is not None and job.best_cost_s == pytest.approx(2 * 1e-3 + 4e-4)
    flop = 2 * dags[0].flop_ct + dags[1].flop_ct
    assert job.best_gflops == pytest.approx(flop / (2 * 1e-3 + 4e-4) / 1e9)
    assert job.trials_done == 5 and job.errors == {"RUN_TIMEOUT": 1} and job.task_trials == {ids[0]: 2, ids[1]: 3}
    assert [store.count_records(str(t.workload_key), "llvm") for t in tasks] == [2, 3]
    assert sink.weighted_best() == pytest.approx(2.4e-3)
