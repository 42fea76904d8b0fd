"""A job taken off its queue by a worker that died before its work-horse marked it started.

RQ's worker registers the job as started (StartedJobRegistry) in its main process, then forks
the work-horse, which sets the job's status to *started*.  A worker killed between the two
leaves the job with status *queued* on no queue; RQ's registry cleanup retries only jobs whose
status is *started*, so nothing would ever run it again.  These tests reproduce that state by
hand (exactly the Redis writes RQ makes before the fork) and check that the batch's search and
the supervisor's recovery both put the job back.
"""

from __future__ import annotations

import threading
import time

import pytest
from rq import Queue
from rq.executions import Execution
from rq.job import Job
from rq.registry import StartedJobRegistry
from rq.serializers import JSONSerializer

import scheduler_core as sc
from scheduler_core.measure.data import MeasureErrorNo, MeasureInput
from scheduler_core.schedule.loop_state import State
from tests.workloads import matmul_add
from workers.measure_queue import QueueBuilder, QueueRunner
from workers.processes import recover_interrupted_jobs, start_worker_process, stop_worker_processes
from workers.queues import measure_queue_name
from workers.store import RedisStore

pytestmark = pytest.mark.integration  # real Redis / RQ worker processes


def _started(conn, name: str) -> StartedJobRegistry:
    return StartedJobRegistry(name, connection=conn, serializer=JSONSerializer)


def _take_like_a_dying_worker(conn, queue: Queue, job_id: str) -> None:
    """What RQ's worker writes before forking its work-horse: the job moves from the queue to
    the intermediate queue and into the started registry, under a worker that no longer exists."""
    assert conn.lrem(queue.key, 0, job_id) == 1
    conn.rpush(queue.intermediate_queue_key, job_id)
    job = Job.fetch(job_id, connection=conn, serializer=JSONSerializer)
    with conn.pipeline() as pipe:
        Execution.create(job, 60, pipeline=pipe, worker_name="gone-worker")
        pipe.execute()
    assert job.get_status(refresh=True) == "queued"
    assert job_id in _started(conn, queue.name).get_job_ids(cleanup=False)


def _wait_for_job(queue: Queue, timeout_s: float = 30.0) -> str:
    t0 = time.time()
    while time.time() - t0 < timeout_s:
        ids = queue.get_job_ids()
        if ids:
            return ids[0]
        time.sleep(0.02)
    raise AssertionError(f"no job appeared on {queue.name}")


def test_rq_cleanup_alone_loses_such_a_job(conn):
    """The state the fix exists for: after RQ's own cleanup the job is on no queue and in no
    registry, yet its status still says queued."""
    queue = Queue("lost-demo", connection=conn, serializer=JSONSerializer)
    job = queue.enqueue("builtins.len", args=([1, 2],))
    _take_like_a_dying_worker(conn, queue, job.id)
    registry = _started(conn, queue.name)
    registry.cleanup(timestamp=time.time() + 10**7)
    assert job.get_status(refresh=True) == "queued"
    assert job.id not in queue.get_job_ids()
    assert job.id not in registry.get_job_ids(cleanup=False)


def test_queue_runner_requeues_a_batch_its_worker_lost(conn):
    store = RedisStore(conn)
    dag = sc.ComputeDAG(matmul_add(16, 16, 16))
    task_id, _ = store.create_task(dag.to_json(), "llvm", {})
    task = store.load_task(store.get_task(task_id))
    inputs = [MeasureInput(task, State.from_dag(dag))]
    runner = QueueRunner(conn, task_id, "llvm", wait_s=120, poll_s=0.05, lost_s=1.0, no_worker_s=120)
    queue = Queue(measure_queue_name("llvm"), connection=conn, serializer=JSONSerializer)
    results: list = []
    thread = threading.Thread(target=lambda: results.extend(runner.run(inputs, QueueBuilder().build(inputs))))
    thread.start()
    worker = None
    try:
        job_id = _wait_for_job(queue)
        _take_like_a_dying_worker(conn, queue, job_id)
        _started(conn, queue.name).cleanup(timestamp=time.time() + 10**7)
        worker = start_worker_process(conn, (queue.name,), burst=False)
        thread.join(timeout=90)
        assert not thread.is_alive(), "the lost batch was never measured"
    finally:
        if worker is not None:
            stop_worker_processes([worker])
        thread.join(timeout=5)
    assert len(results) == 1
    assert results[0].error_no == MeasureErrorNo.NO_ERROR, results[0].error_msg
    assert 0 < results[0].costs[0] < 1.0


def test_recover_interrupted_jobs_finds_a_job_the_horse_never_started(conn):
    queue = Queue("tune", connection=conn, serializer=JSONSerializer)
    job = queue.enqueue("builtins.len", args=([1, 2],))
    other = queue.enqueue("builtins.len", args=([3],))
    _take_like_a_dying_worker(conn, queue, job.id)
    assert recover_interrupted_jobs(conn, ("tune",)) == [job.id]
    assert queue.get_job_ids() == [job.id, other.id]  # back at the front
    assert job.id not in _started(conn, "tune").get_job_ids(cleanup=False)
    assert conn.lrange(queue.intermediate_queue_key, 0, -1) == []
    assert recover_interrupted_jobs(conn, ("tune",)) == []  # a job on its queue is left alone
