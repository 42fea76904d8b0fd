"""Bounded work: deterministic failures end the job with one line (no RQ retry), the queue
path fails fast when no measurement worker listens, and a cancel does not wait for a batch.

    tune_job on a task whose DAG cannot be tuned (symbolic shape) --> failed, one-line error,
        RQ job not retried (no traceback, no server path in the job hash)
    measure=queue with nobody on measure:<kind>:<cpu> --> failed within no_worker_s,
        naming the queue
"""

from __future__ import annotations

import time

import pytest
from rq import SimpleWorker
from rq.job import Job
from rq.serializers import JSONSerializer

from scheduler_core.dag.compute_dag import ComputeDAG
from scheduler_core.dag.task import Task
from scheduler_core.measure.data import MeasureInput
from scheduler_core.schedule.loop_state import State
from tests.workloads import matmul_add
from workers import measure_queue
from workers.jobs import one_line_error
from workers.measure_queue import NoMeasurementWorker, QueueRunner
from workers.queues import enqueue_tune, tune_queue
from workers.store import JobCancelled, RedisStore

pytestmark = pytest.mark.integration  # a real Redis and an in-process RQ worker

TUNING = {"num_measures_per_round": 2, "population": 16, "num_iters": 0, "seed": 0, "min_repeat_ms": 1}


def _work(conn) -> None:
    SimpleWorker([tune_queue(conn)], connection=conn, serializer=JSONSerializer).work(burst=True)


def test_one_line_error_is_short_and_single_line():
    err = ValueError("first line\n  File \"/srv/app/x.py\", line 3\n" + "x" * 1000)
    text = one_line_error(err)
    assert "\n" not in text and len(text) <= 300 and text.startswith("ValueError: first line")


def test_queue_measurement_without_a_worker_fails_fast_naming_the_queue(conn):
    store = RedisStore(conn)
    dag = ComputeDAG(matmul_add(8, 8, 8))
    task_id, _ = store.create_task(dag.to_json(), "llvm", {**TUNING, "measure": "queue"})
    runner = QueueRunner(conn, task_id, "llvm", timeout_s=5, no_worker_s=0.5, poll_s=0.05)
    inputs = [MeasureInput(Task.create(dag, "llvm"), State.from_dag(dag))]
    t0 = time.monotonic()
    with pytest.raises(NoMeasurementWorker, match="measure:llvm:"):
        runner.run(inputs, [None])
    assert time.monotonic() - t0 < 10


def test_cancel_is_honoured_while_waiting_for_a_batch(conn):
    store = RedisStore(conn)
    dag = ComputeDAG(matmul_add(8, 8, 8))
    task_id, _ = store.create_task(dag.to_json(), "llvm", TUNING)
    runner = QueueRunner(conn, task_id, "llvm", timeout_s=5, poll_s=0.05, cancelled=lambda: True, job_id="j1")
    with pytest.raises(JobCancelled):
        runner.run([MeasureInput(Task.create(dag, "llvm"), State.from_dag(dag))], [None])


def test_queue_job_without_listener_ends_failed_and_is_not_retried(conn, monkeypatch):
    monkeypatch.setattr(measure_queue, "NO_WORKER_GRACE_S", 0.5)
    store = RedisStore(conn)
    task_id, _ = store.create_task(ComputeDAG(matmul_add(8, 8, 8)).to_json(), "llvm",
                                   {**TUNING, "measure": "queue", "timeout_s": 1.0})
    job_id = store.create_job(task_id, 2)
    rq_job = enqueue_tune(conn, task_id, job_id, 2)  # Retry(max=2) by default
    _work(conn)  # NoMeasurementWorker after the no-listener grace period
    job = store.get_job(job_id)
    assert job.state == "failed" and "NoMeasurementWorker" in job.error and "measure:llvm:" in job.error
    assert "\n" not in job.error and "Traceback" not in job.error
    assert Job.fetch(rq_job.id, connection=conn, serializer=JSONSerializer).get_status() == "finished"


def test_a_job_that_rq_retries_waits_queued_and_never_shows_failed(conn, monkeypatch):
    """A failure that a re-run may not repeat (here a RuntimeError on the first run) puts the job
    back to queued with the error, and RQ's retry finishes it: no failed -> running -> failed."""
    from workers import jobs

    states: list = []
    set_state = RedisStore.set_job_state

    def spy(self, job_id, state, error=""):
        states.append((str(getattr(state, "value", state)), error))
        return set_state(self, job_id, state, error)
    monkeypatch.setattr(RedisStore, "set_job_state", spy)
    search = jobs.search_job
    calls = []

    def flaky(*args, **kw):
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("the worker lost its build directory")
        return search(*args, **kw)
    monkeypatch.setattr(jobs, "search_job", flaky)
    store = RedisStore(conn)
    task_id, _ = store.create_task(ComputeDAG(matmul_add(8, 8, 8)).to_json(), "llvm", TUNING)
    job_id = store.create_job(task_id, 2)
    enqueue_tune(conn, task_id, job_id, 2)  # Retry(max=2) by default
    _work(conn)
    assert [s for s, _ in states] == ["running", "queued", "running", "finished"], states
    assert "RuntimeError: the worker lost its build directory" in states[1][1]
    job = store.get_job(job_id)
    assert job.state == "finished" and job.error == "" and job.trials_done == 2


def test_a_chain_of_254_elementwise_ops_tunes(conn):
    """Under max_dag_ops, a chain of 254 element-wise ops once hit RecursionError (the search
    inlined all of them into one expression 500 levels deep) and RQ retried it three times; the
    inline rule now stops at MAX_INLINED_DEPTH, so the chain is computed in pieces and tunes."""
    from scheduler_core import te

    A = te.placeholder((16,), name="A")
    t = A
    for k in range(253):
        t = te.compute((16,), lambda i, t=t: t[i] + te.const(1.0, "float32"), name=f"C{k}")
    store = RedisStore(conn)
    task_id, _ = store.create_task(ComputeDAG([A, t]).to_json(), "llvm", TUNING)
    job_id = store.create_job(task_id, 2)
    enqueue_tune(conn, task_id, job_id, 2)
    _work(conn)
    job = store.get_job(job_id)
    assert job.state == "finished", job.error
    assert job.trials_done == 2 and job.best_cost_s is not None
