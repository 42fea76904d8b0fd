"""Measurement through a device queue: the search job sends each batch to
``measure:<kind>:<device model>`` and workers attached to that device build and
time it (docs/architecture.md, "Service").

    tune job --QueueBuilder (no-op)--> QueueRunner --enqueue measure_job(task_id, steps)-->
    measure worker (LocalBuilder + LocalRunner with the reference check) --> results JSON

Job arguments are ids and step records (JSON), never pickles.  A measurement job
is retried by RQ when its worker dies mid-batch, so the batch is re-run by
another worker rather than lost; if no result comes back within the wait limit
the batch is recorded as RUN_TIMEOUT errors and the search goes on.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from rq import Queue, Retry
from rq.job import Job
from rq.serializers import JSONSerializer

from scheduler_core.measure.data import (
    FAILED_COST_S,
    BuildResult,
    MeasureErrorNo,
    MeasureInput,
    MeasureResult,
)
from scheduler_core.measure.local_runner import local_measurer
from scheduler_core.schedule.dataflow_step import replay_steps

from .queues import listening_workers, measure_queue_name, requeue_job, worker_alive
from .redis_conn import current_connection
from .store import JobCancelled, RedisStore

NO_WORKER_GRACE_S = 30.0  # a batch may wait this long, in seconds, for a worker on its queue
LOST_JOB_GRACE_S = 5.0  # seconds a batch's job may be held by no queue and no live worker
MEASURE_JOB_FUNC = "workers.measure_queue.measure_job"
log = logging.getLogger(__name__)
_LOCAL: dict = {}  # per worker process: timing options -> (builder, runner), reused across jobs


def _local_pair(timeout_s: float, min_repeat_ms: float, repeat: int):
    key = (float(timeout_s), float(min_repeat_ms), int(repeat))
    if key not in _LOCAL:
        for _builder, runner in _LOCAL.values():
            runner.close()
        _LOCAL.clear()
        _LOCAL[key] = local_measurer(timeout_s, min_repeat_ms, repeat, check_correctness=True)
    return _LOCAL[key]


def measure_job(task_id: str, batch: list, timeout_s: float = 10.0, min_repeat_ms: float = 40.0,
                repeat: int = 3) -> list:
    """Build and time the states given by ``batch`` (lists of step records) for a task.

    Runs on a measurement worker, timing as the search's own LocalRunner does (``min_repeat_ms``,
    ``repeat``: the task's tuning options).  Returns one ``MeasureResult.to_json()`` per state
    (``{"costs": [seconds...], "error_no", "error_msg", "all_cost", "timestamp"}``).
    Outputs are checked against the numpy reference (WRONG_ANSWER on mismatch).
    """
    store = RedisStore(current_connection())
    meta = store.get_task(task_id)
    if meta is None:
        raise KeyError(f"unknown task {task_id!r}")
    task = store.load_task(meta)
    inputs = [MeasureInput(task, replay_steps(task.compute_dag, steps)) for steps in batch]
    builder, runner = _local_pair(timeout_s, min_repeat_ms, repeat)
    results = runner.run(inputs, builder.build(inputs))
    return [r.to_json() for r in results]


class QueueBuilder:
    """The builder half of queue measurement: building happens on the measurement worker.
    ``n_parallel``: what the search's measurer sizes its chunks by (one queue job per chunk)."""

    n_parallel = 4

    def build(self, inputs, verbose: int = 0) -> list:
        return [BuildResult("", (), int(MeasureErrorNo.NO_ERROR), "", 0.0) for _ in inputs]

    def close(self) -> None:
        """Nothing to release: the measurement workers own their builders."""


class NoMeasurementWorker(RuntimeError):
    """No worker listens on the device queue a batch was sent to (a configuration error)."""


class QueueRunner:
    """Sends each batch to the task's device queue and waits for the results.

    wait_s : seconds to wait for a batch before recording it as RUN_TIMEOUT errors.
    cancelled : callable returning True once the search job is asked to stop; checked
        while waiting, so a cancel never waits for a batch (raises JobCancelled).
    no_worker_s : seconds a batch may stay queued while no worker listens on the
        queue before the search fails with NoMeasurementWorker naming the queue.
    lost_s : seconds a batch's job may be held by no queue and no live worker (its worker
        died) before it is put back on its queue; default LOST_JOB_GRACE_S.
    """

    def __init__(self, conn, task_id: str, target: str, timeout_s: float = 10.0, wait_s: float = 1800.0,
                 poll_s: float = 0.2, cancelled: Callable[[], bool] | None = None, job_id: str = "",
                 no_worker_s: float | None = None, lost_s: float = LOST_JOB_GRACE_S,
                 min_repeat_ms: float = 40.0, repeat: int = 3):
        self.queue = Queue(measure_queue_name(target), connection=conn, serializer=JSONSerializer)
        self.conn, self.task_id, self.job_id = conn, task_id, job_id
        self.timeout_s, self.wait_s, self.poll_s = timeout_s, wait_s, poll_s
        self.cancelled = cancelled or (lambda: False)
        self.no_worker_s = NO_WORKER_GRACE_S if no_worker_s is None else no_worker_s
        self.lost_s = lost_s
        self.min_repeat_ms, self.repeat = float(min_repeat_ms), int(repeat)

    def close(self) -> None:
        """Nothing to release: the measurement workers own their runners."""

    def _held(self, job: Job, status: str) -> bool:
        """Whether RQ will still run or finish ``job``: it waits on its queue, a live worker
        has started it, or it is scheduled/deferred.  A worker killed after taking the job
        off the queue but before its work-horse marked it started leaves it *queued* on no
        queue, and RQ's registry cleanup skips such a job: nothing would ever run it."""
        if status == "queued":
            return job.id in self.queue.get_job_ids()
        if status == "started":
            return worker_alive(self.conn, job.worker_name)
        return True

    def run(self, inputs, build_results, verbose: int = 0) -> list:
        batch = [[s.to_record() for s in inp.state.transform_steps] for inp in inputs]
        args = (self.task_id, batch, self.timeout_s, self.min_repeat_ms, self.repeat)
        job = self.queue.enqueue(MEASURE_JOB_FUNC, args=args,
                                 job_timeout=int(len(batch) * 3 * self.timeout_s + 120),
                                 retry=Retry(max=2), result_ttl=600)
        start = time.time()
        unattended_since: float | None = None
        lost_since: float | None = None
        while time.time() - start < self.wait_s:
            job = Job.fetch(job.id, connection=self.conn, serializer=JSONSerializer)
            status = job.get_status(refresh=True)
            if status == "finished":
                return [MeasureResult.from_json(r) for r in job.return_value() or ()]
            if status in ("failed", "canceled", "stopped") and not job.retries_left:
                break
            if self.cancelled():
                job.cancel()
                raise JobCancelled(self.job_id)
            if status == "queued" and listening_workers(self.conn, self.queue.name) == 0:
                unattended_since = unattended_since or time.time()
                if time.time() - unattended_since > self.no_worker_s:
                    job.cancel()
                    raise NoMeasurementWorker(f"no measurement worker listens on queue {self.queue.name!r}")
            else:
                unattended_since = None
            if self._held(job, status):
                lost_since = None
            else:
                lost_since = lost_since or time.time()
                if time.time() - lost_since > self.lost_s:
                    log.warning("measurement job %s was lost by a dead worker (status %s); requeued", job.id, status)
                    requeue_job(self.conn, self.queue, job)
                    lost_since = None
            time.sleep(self.poll_s)
        err = MeasureErrorNo.RUN_TIMEOUT if time.time() - start >= self.wait_s else MeasureErrorNo.UNKNOWN_ERROR
        return [MeasureResult((FAILED_COST_S,), int(err), f"measurement job {job.id} ended {job.get_status()}",
                              time.time() - start, time.time()) for _ in inputs]
