"""RedisRecordSink: the one record sink of a job, whether it tunes one task or a model's tasks.

    measure callback (policy, inputs, results)
      --> per workload_key of the batch, in one MULTI/EXEC: the records whose state is new for
          that workload+target and the lowered best index (``RedisStore.append_new_records``,
          Lua), the job's trials_done and error counts, and for a model job
          ``trials_done:<task_id>`` of that task
      --> the job's ``best_cost_s`` / ``best_gflops``: the weighted latency of its tasks (Ansor's
          task scheduler objective, section 6), lowered only (Lua)
      --> JobCancelled after writing when a cancel was requested

A task job is a job of one task of weight 1: its best is then the task's best latency.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from scheduler_core.dag.task import Task
from scheduler_core.measure.data import MeasureErrorNo, MeasureInput, MeasureResult
from scheduler_core.measure.record import encode_record

from .store import JobCancelled, RedisStore


def error_counts(results: Sequence[MeasureResult]) -> dict[str, int]:
    """``{MeasureErrorNo name: count}`` of the failed results."""
    errors: dict[str, int] = {}
    for res in results:
        if res.cost is None:
            name = MeasureErrorNo(res.error_no).name
            errors[name] = errors.get(name, 0) + 1
    return errors


class RedisRecordSink:
    """Measure callback ``(policy, inputs, results)`` writing each batch of a job to Redis.

    Parameters
    ----------
    store : RedisStore
    tasks : the job's Task (a SearchTask is one), or its tasks (one per workload_key, one target)
    job_id : str, the job whose progress is updated
    weights : calls of each task per model run (Ansor's task weights); default 1 each
    task_ids : ``{workload_key: task_id}`` of a model job: each batch also adds to the job's
        ``trials_done:<task_id>``; None for a task job

    trials_done counts this job's measurements, the skipped duplicates included (what the job
    has done; a retry subtracts it).  The job's best (seconds) is ``sum(weight x best)`` over its
    tasks once every task has one, a task's best being the lower of its stored best record and
    this job's own fastest measurement of it (a duplicate state measured faster by this job
    counts for the job though its record is not stored twice).  A killed worker loses no
    finished batch.  Raises :class:`~workers.store.JobCancelled` after writing when a cancel
    was requested.
    """

    def __init__(self, store: RedisStore, tasks: Task | Sequence[Task], job_id: str,
                 weights: Sequence[float] | None = None, task_ids: Mapping[str, str] | None = None):
        self.tasks = [tasks] if isinstance(tasks, Task) else list(tasks)
        self.weights = [1.0] * len(self.tasks) if weights is None else [float(w) for w in weights]
        self.store, self.job_id, self.task_ids = store, job_id, task_ids
        self.target = str(self.tasks[0].target)
        self._own_best: dict[str, float] = {}  # workload_key -> this job's fastest measurement, seconds
        self._indexed: set[str] = set()

    def __call__(self, policy: Any, inputs: Sequence[MeasureInput], results: Sequence[MeasureResult]) -> None:
        batches: dict[str, list[tuple[MeasureInput, MeasureResult]]] = {}
        for inp, res in zip(inputs, results):
            batches.setdefault(str(inp.task.workload_key), []).append((inp, res))
        for wk, batch in batches.items():
            self._write(wk, batch)
        if batches:
            self.publish_best()
        if self.store.cancel_requested(self.job_id):
            raise JobCancelled(self.job_id)

    def _write(self, wk: str, batch: list[tuple[MeasureInput, MeasureResult]]) -> None:
        """One MULTI/EXEC: the batch's new records of ``wk``, the job's progress (and the task's trials)."""
        for _, res in batch:
            if res.cost is not None and res.cost < self._own_best.get(wk, float("inf")):
                self._own_best[wk] = res.cost
        if wk not in self._indexed:  # records stored before keys.record_states count as recorded
            self.store.index_record_states(wk, self.target)
            self._indexed.add(wk)
        records = [(encode_record(inp, res), res.cost) for inp, res in batch]
        with self.store.conn.pipeline(transaction=True) as p:
            self.store.append_new_records(wk, self.target, records, pipeline=p)
            self.store.add_job_progress(self.job_id, len(records), error_counts([r for _, r in batch]), None, 0.0,
                                        pipeline=p)
            if self.task_ids is not None:
                self.store.add_task_trials(self.job_id, self.task_ids[wk], len(records), pipeline=p)
            p.execute()

    def weighted_best(self) -> float | None:
        """``sum(weight x best latency)`` over the tasks in seconds; None while a task has none."""
        total = 0.0
        for task, weight in zip(self.tasks, self.weights):
            wk = str(task.workload_key)
            stored = self.store.best_record(wk, self.target)
            costs = [c for c in (stored[0] if stored else None, self._own_best.get(wk)) if c is not None]
            if not costs:
                return None
            total += weight * min(costs)
        return total

    def publish_best(self) -> float | None:
        """Lower the job's ``best_cost_s`` (and ``best_gflops``) to :meth:`weighted_best`; that latency."""
        total = self.weighted_best()
        if total is not None and total > 0:
            flop = sum(w * t.compute_dag.flop_ct for t, w in zip(self.tasks, self.weights))
            self.store.add_job_progress(self.job_id, 0, {}, total, flop)
        return total
