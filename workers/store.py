"""RedisStore: tasks, jobs, records, best-record index, artifacts and model snapshots in Redis.

    POST /tasks --create_task_with_job--> DAG + task hash + task_for_workload index + job hash
               (queued), in one WATCH/MULTI/EXEC (watch_task, then stage_task); ActiveJobError
               while the task has a queued or running job (nothing written).  The caller enqueues the job after it.
    resume --create_job--> job hash, the same way (at most one active job per task)
    Admission (workers.admission): the limits on new jobs (trials per task, active jobs per token, queued jobs
               overall) are read and written in that same transaction, so concurrent
               requests cannot pass a limit together (AdmissionError, nothing written)
    tune_job --record_sink.RedisRecordSink(policy, inputs, results)--> records whose state is new (Lua: SADD
               the state to record_states, RPUSH, lower the best), job progress (trials_done,
               best cost, error counts), in one MULTI/EXEC
    resume --load_measured--> [(MeasureInput, MeasureResult)] for the policy and the cost model
    POST /models --workers.model_store.ModelStore.create_model_with_job--> the same rules and the
               same steps per task for a job over several tasks (watch_task, stage_task, watch_admission,
               admit, new_job_fields)
    get_task / get_job --> workers.records.TaskRecord / JobRecord (typed; the hashes keep their layout)

Records are the lines of ``scheduler_core.measure.record`` (``encode_record``);
the DAG is stored once per workload_key under ``keys.dag``, so a record list plus
its DAG rebuilds every measured state.  Keys come from :mod:`workers.keys` only.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import redis

from scheduler_core.base.errors import RecordFormatError, SchedulerCoreError
from scheduler_core.base.target import Target
from scheduler_core.dag.compute_dag import ComputeDAG
from scheduler_core.dag.task import Task
from scheduler_core.measure.record import DagLine, RawRecord, parse_line
from scheduler_core.measure.record_file import decode_record, native_lines
from scheduler_core.search.tuning_options import TuningOptions

from . import keys
from .admission import (
    ActiveJobError,
    Admission,
    admit,
    new_job_fields,
    watch_active_job,
    watch_admission,
)
from .job_state import ACTIVE_STATES, ENDED_STATES, JobState
from .records import TASK_TRIALS_PREFIX, HashFields, JobRecord, TaskRecord, decode_hash
from .records import as_text as _s

_PAGE = 1000

# KEYS[1] = best hash; ARGV = cost_s, record line.  Keeps the smaller cost; returns 1 if replaced.
_UPDATE_BEST = """
local cur = redis.call('HGET', KEYS[1], 'cost_s')
if (not cur) or tonumber(ARGV[1]) < tonumber(cur) then
  redis.call('HSET', KEYS[1], 'cost_s', ARGV[1], 'record', ARGV[2])
  return 1
end
return 0
"""

# KEYS[1] = records list, KEYS[2] = record_states set, KEYS[3] = best hash, KEYS[4] = the
# service-wide record_errors hash; ARGV = state id, record line, cost_s ('' for an error), for
# each record in turn.  Appends each record whose state is not in the set yet (adding it and
# counting its error_no, the line's "r"[2], in KEYS[4]: a record is counted once, retries
# included), lowers the best to the fastest appended record; returns the number appended.
_APPEND_NEW_RECORDS = """
local appended = 0
for k = 1, #ARGV, 3 do
  if redis.call('SADD', KEYS[2], ARGV[k]) == 1 then
    redis.call('RPUSH', KEYS[1], ARGV[k + 1])
    appended = appended + 1
    local ok, rec = pcall(cjson.decode, ARGV[k + 1])
    local no = (ok and type(rec) == 'table' and type(rec['r']) == 'table') and tonumber(rec['r'][2]) or nil
    redis.call('HINCRBY', KEYS[4], no and tostring(no) or 'unparsed', 1)
    if ARGV[k + 2] ~= '' then
      local cur = redis.call('HGET', KEYS[3], 'cost_s')
      if (not cur) or tonumber(ARGV[k + 2]) < tonumber(cur) then
        redis.call('HSET', KEYS[3], 'cost_s', ARGV[k + 2], 'record', ARGV[k + 1])
      end
    end
  end
end
return appended
"""

# KEYS[1] = job hash; ARGV = n_trials, errors JSON {name: count}, best cost_s ('' for none), flop_ct.
_JOB_PROGRESS = """
redis.call('HINCRBY', KEYS[1], 'trials_done', tonumber(ARGV[1]))
local errs = cjson.decode(redis.call('HGET', KEYS[1], 'errors') or '{}')
for name, n in pairs(cjson.decode(ARGV[2])) do errs[name] = (errs[name] or 0) + n end
if next(errs) == nil then
  redis.call('HSET', KEYS[1], 'errors', '{}')
else
  redis.call('HSET', KEYS[1], 'errors', cjson.encode(errs))
end
if ARGV[3] ~= '' then
  local cur = redis.call('HGET', KEYS[1], 'best_cost_s')
  if (not cur) or cur == '' or tonumber(ARGV[3]) < tonumber(cur) then
    redis.call('HSET', KEYS[1], 'best_cost_s', ARGV[3])
    local flop = tonumber(ARGV[4])
    if flop > 0 then
      redis.call('HSET', KEYS[1], 'best_gflops', tostring(flop / tonumber(ARGV[3]) / 1e9))
    end
  end
end
return redis.call('HGET', KEYS[1], 'trials_done')
"""


@dataclass(frozen=True)
class WatchedTask:
    """The task of a workload+target as read inside a WATCH: its id (a new one when there is none),
    whether its index entry is new, and whether its hash is complete (has a workload_key)."""

    task_id: str
    new_index: bool
    complete: bool


def watch_task(p: Any, workload_key: str, target: str, job_wanted: bool) -> WatchedTask:
    """WATCH the workload+target index and the task hash it names (immediate mode, before MULTI).

    With ``job_wanted``, raises ActiveJobError while an existing task has a queued or running job.
    """
    index = keys.task_for_workload(workload_key, target)
    p.watch(index)
    found = p.get(index)
    task_id = _s(found) if found is not None else uuid.uuid4().hex
    p.watch(keys.task(task_id))
    if found is not None and job_wanted:
        active = watch_active_job(p, task_id)
        if active is not None:
            raise ActiveJobError(task_id, *active)
    complete = found is not None and bool(p.hexists(keys.task(task_id), "workload_key"))
    return WatchedTask(task_id, found is None, complete)


def stage_task(p: Any, task: WatchedTask, workload_key: str, target: str, dag_text: str, tuning_text: str,
               latest_job_id: str | None, now_s: float) -> None:
    """Inside MULTI: the DAG (once per workload_key), the index entry when new, the task hash (its
    tuning and latest job; every field when it was not complete) and ``keys.tasks_by_created``
    (``workers.task_index``).  ``now_s``: the creation time, seconds since the epoch."""
    p.setnx(keys.dag(workload_key), dag_text)
    if task.new_index:
        p.set(keys.task_for_workload(workload_key, target), task.task_id)
    fields: HashFields = {"tuning": tuning_text}
    if not task.complete:
        fields.update(task_id=task.task_id, workload_key=workload_key, target=target, created=repr(now_s),
                      latest_job_id="")
        p.zadd(keys.tasks_by_created(), {task.task_id: now_s})
    if latest_job_id is not None:
        fields["latest_job_id"] = latest_job_id
        p.rpush(keys.task_jobs(task.task_id), latest_job_id)
    p.hset(keys.task(task.task_id), mapping=fields)


def canonical_target(target: str) -> str:
    """The target as SearchTask spells it (``str(Target.parse(t))``); raises BuildError when unknown."""
    return str(Target.parse(str(target)))


def record_steps(line: str) -> str:
    """The steps of a record line as compact JSON: the identity of its state (``state_key``).

    Raises RecordFormatError for a line that is not a record.
    """
    rec = parse_line(line)
    if not isinstance(rec, RawRecord):
        raise RecordFormatError("not a measurement record (a DAG line or a blank line)")
    return json.dumps(list(rec.steps), separators=(",", ":"))


def record_state_id(line: str) -> str:
    """The member of ``keys.record_states`` for a record line: a digest of :func:`record_steps`."""
    return hashlib.blake2b(record_steps(line).encode(), digest_size=16).hexdigest()


class RedisStore:
    """All service state in one Redis (see :mod:`workers.keys` for the layout).

    Parameters
    ----------
    conn : redis.Redis, created without ``decode_responses`` (artifacts are bytes)
    """

    def __init__(self, conn: redis.Redis):
        self.conn = conn
        self._update_best = conn.register_script(_UPDATE_BEST)
        self._append_new_records = conn.register_script(_APPEND_NEW_RECORDS)
        self._job_progress = conn.register_script(_JOB_PROGRESS)

    # -- tasks -----------------------------------------------------------------
    def create_task(self, dag_json: str | dict | ComputeDAG, target: str,
                    tuning: TuningOptions | Mapping | None = None) -> tuple[str, str]:
        """Store a task; ``(task_id, workload_key)``.

        The same workload and target map to the same task (its tuning is replaced
        by ``tuning``), so a second POST reuses every record measured before.
        ``tuning``: TuningOptions or a dict of its fields (missing ones take the defaults);
        the task keeps every field (``TuningOptions.to_json``).
        The DAG, the task hash and the workload+target index are written in one
        transaction: a reader never sees the index without its task.
        Raises InvalidWorkloadError for a bad DAG or tuning option, InvalidTargetError
        (a BuildError) for a target the parser rejects.
        """
        task_id, wk, _ = self._create(dag_json, target, tuning, None)
        return task_id, wk

    def create_task_with_job(self, dag_json: str | dict | ComputeDAG, target: str,
                             tuning: TuningOptions | Mapping | None, trials: int,
                             admission: Admission | None = None) -> tuple[str, str, str]:
        """:meth:`create_task` and :meth:`create_job` in one transaction; ``(task_id, workload_key, job_id)``.

        Raises ActiveJobError, writing nothing (the task keeps its tuning), when the task
        of this workload and target already has a queued or running job: of concurrent
        calls for one workload, exactly one creates a job.  Raises AdmissionError, writing
        nothing, when the job would pass a limit of ``admission``.  The caller enqueues it.
        """
        task_id, wk, job_id = self._create(dag_json, target, tuning, int(trials), admission)
        assert job_id is not None
        return task_id, wk, job_id

    def _create(self, dag_json, target: str, tuning, trials: int | None,
                admission: Admission | None = None) -> tuple[str, str, str | None]:
        """The task (and, with ``trials``, its new job) in one WATCH/MULTI/EXEC, retried on a race."""
        if not isinstance(tuning, TuningOptions):
            tuning = TuningOptions.from_json(dict(tuning or {}))
        dag = dag_json if isinstance(dag_json, ComputeDAG) else ComputeDAG.from_json(dag_json)
        target = canonical_target(target)
        wk = dag.workload_key
        dag_text, tuning_text = dag.to_json(), json.dumps(tuning.to_json())
        job_id = uuid.uuid4().hex if trials is not None else None
        with self.conn.pipeline(transaction=True) as p:
            while True:
                try:
                    task = watch_task(p, wk, target, job_wanted=trials is not None)
                    stale: tuple[list[str], list[str]] = ([], [])
                    if trials is not None:
                        stale = watch_admission(p, admission, task.task_id, task.complete, trials)
                    p.multi()
                    stage_task(p, task, wk, target, dag_text, tuning_text, job_id, time.time())
                    if job_id is not None and trials is not None:
                        p.hset(keys.job(job_id), mapping=new_job_fields(job_id, task.task_id, trials))
                        admit(p, admission, job_id, stale)
                        p.hincrby(keys.task(task.task_id), "trials_total", int(trials))
                    p.execute()
                    return task.task_id, wk, job_id
                except redis.WatchError:
                    continue

    def get_task(self, task_id: str) -> TaskRecord | None:
        """The task's record, or None for an unknown id."""
        return TaskRecord.from_hash(self.conn.hgetall(keys.task(task_id)))

    def load_task(self, task: TaskRecord) -> Task:
        """The Task of a task record: its stored DAG, key and target."""
        return Task.create(self.load_dag(task.workload_key), task.target, workload_key=task.workload_key)

    def task_for_workload(self, workload_key: str, target: str) -> str | None:
        v = self.conn.get(keys.task_for_workload(workload_key, canonical_target(target)))
        return _s(v) if v is not None else None

    def load_dag(self, workload_key: str) -> ComputeDAG:
        """The stored ComputeDAG of ``workload_key``; KeyError when none is stored."""
        text = self.conn.get(keys.dag(workload_key))
        if text is None:
            raise KeyError(f"no DAG stored for workload_key {workload_key!r}")
        return ComputeDAG.from_json(_s(text))

    # -- jobs ------------------------------------------------------------------
    def create_job(self, task_id: str, trials: int, admission: Admission | None = None) -> str:
        """A new job hash (state ``queued``) for ``trials`` measurements; the task's latest job.

        Atomic (WATCH/MULTI/EXEC): raises ActiveJobError, writing nothing, while the task's
        latest job is queued or running, so of concurrent calls exactly one creates a job;
        AdmissionError, writing nothing, when the job would pass a limit of ``admission``.
        Raises KeyError for an unknown task.
        """
        job_id = uuid.uuid4().hex
        with self.conn.pipeline(transaction=True) as p:
            while True:
                try:
                    p.watch(keys.task(task_id))
                    if not p.hexists(keys.task(task_id), "workload_key"):
                        raise KeyError(f"unknown task {task_id!r}")
                    active = watch_active_job(p, task_id)
                    if active is not None:
                        raise ActiveJobError(task_id, *active)
                    stale = watch_admission(p, admission, task_id, True, trials)
                    p.multi()
                    p.hset(keys.job(job_id), mapping=new_job_fields(job_id, task_id, trials))
                    admit(p, admission, job_id, stale)
                    p.hset(keys.task(task_id), "latest_job_id", job_id)
                    p.rpush(keys.task_jobs(task_id), job_id)
                    p.hincrby(keys.task(task_id), "trials_total", int(trials))
                    p.execute()
                    return job_id
                except redis.WatchError:
                    continue

    def task_trials(self, task_id: str) -> int:
        """Trials asked of the task over all its jobs (the sum of their ``trials_total``).

        A task stored before this counter existed counts its latest job's ``trials_total``.
        """
        total = self.conn.hget(keys.task(task_id), "trials_total")
        if total is not None:
            return int(total)
        latest = self.conn.hget(keys.task(task_id), "latest_job_id")
        job = self.conn.hget(keys.job(_s(latest)), "trials_total") if latest else None
        return int(job or 0)

    def count_active_token_jobs(self, token_id: str) -> int:
        """How many jobs of the token ``token_id`` are queued or running (read only)."""
        ids = [_s(j) for j in self.conn.smembers(keys.token_jobs(token_id))]
        with self.conn.pipeline(transaction=False) as p:
            for j in ids:
                p.hget(keys.job(j), "state")
            states = p.execute() if ids else []
        active = {st.value for st in ACTIVE_STATES}
        return sum(1 for st in states if st is not None and _s(st) in active)

    def count_queued_jobs(self) -> int:
        """How many jobs created through this store are still in state ``queued`` (read only)."""
        ids = [_s(j) for j in self.conn.smembers(keys.queued_jobs())]
        with self.conn.pipeline(transaction=False) as p:
            for j in ids:
                p.hget(keys.job(j), "state")
            states = p.execute() if ids else []
        return sum(1 for st in states if st is not None and _s(st) == JobState.queued.value)

    def get_job(self, job_id: str) -> JobRecord | None:
        """The job's record, or None for an unknown id."""
        return JobRecord.from_hash(self.conn.hgetall(keys.job(job_id)))

    def task_jobs(self, task_id: str) -> list[JobRecord]:
        """Every job that measured the task (its tune jobs and its models' jobs), oldest first.

        A task stored before ``keys.task_jobs`` existed lists its latest job only.  Jobs whose
        hash is gone are left out.
        """
        ids = [_s(j) for j in self.conn.lrange(keys.task_jobs(task_id), 0, -1)]
        if not ids:
            latest = self.conn.hget(keys.task(task_id), "latest_job_id")
            ids = [_s(latest)] if latest else []
        with self.conn.pipeline(transaction=False) as p:
            for j in ids:
                p.hgetall(keys.job(j))
            hashes = p.execute() if ids else []
        return [job for job in (JobRecord.from_hash(h) for h in hashes) if job is not None]

    def mark_first_trials(self, job_id: str, task_ids: list[str], workload_keys: list[str], target: str) -> None:
        """Write the job's ``first_trials`` ({task_id: records of its workload on ``target`` now})
        unless it has one (HSETNX: a retried job keeps the count of its first start)."""
        with self.conn.pipeline(transaction=False) as p:
            for wk in workload_keys:
                p.llen(keys.records(wk, target))
            counts = p.execute() if workload_keys else []
        self.conn.hsetnx(keys.job(job_id), "first_trials",
                         json.dumps({t: int(n) for t, n in zip(task_ids, counts)}))

    def set_job_state(self, job_id: str, state: str, error: str = "") -> None:
        """Set ``state`` (a JobState or its value), stamping ``started`` / ``ended``.

        Raises ValueError for an unknown state.
        """
        state = JobState(state)
        fields: dict = {"state": state.value}
        if state == JobState.running:
            fields.update(started=repr(time.time()), ended="", error="")
        elif state in ENDED_STATES:
            fields.update(ended=repr(time.time()), error=error)
        elif error:  # queued again: why (the error of the run that RQ retries)
            fields["error"] = error
        with self.conn.pipeline(transaction=True) as p:
            p.hset(keys.job(job_id), mapping=fields)
            if state == JobState.queued:  # requeued (a worker died): it waits on the queue again
                p.sadd(keys.queued_jobs(), job_id)
            p.execute()

    def update_job(self, job_id: str, **fields: Any) -> None:
        """Overwrite job hash fields as they are (e.g. ``best_cost_s`` at the start of a job)."""
        self.conn.hset(keys.job(job_id), mapping={k: ("" if v is None else v) for k, v in fields.items()})

    def add_job_progress(self, job_id: str, n_trials: int, errors: Mapping[str, int],
                         best_cost_s: float | None, flop_ct: float, pipeline=None):
        """Atomically add ``n_trials`` and error counts, and lower the job's best (seconds) if better."""
        return self._job_progress(keys=[keys.job(job_id)],
                                  args=[int(n_trials), json.dumps(dict(errors)),
                                        "" if best_cost_s is None else repr(float(best_cost_s)),
                                        repr(float(flop_ct))],
                                  client=pipeline or self.conn)

    def task_progress(self, job_id: str, task_ids: list[str]) -> dict[str, int]:
        """``{task_id: trials this model job measured for it}`` (its ``trials_done:<task_id>`` fields)."""
        values = self.conn.hmget(keys.job(job_id), [f"{TASK_TRIALS_PREFIX}{t}" for t in task_ids]) if task_ids else []
        return {t: int(v or 0) for t, v in zip(task_ids, values)}

    def add_task_trials(self, job_id: str, task_id: str, n: int, pipeline=None):
        """HINCRBY the model job's ``trials_done:<task_id>`` by ``n``."""
        return (pipeline or self.conn).hincrby(keys.job(job_id), f"{TASK_TRIALS_PREFIX}{task_id}", int(n))

    def request_cancel(self, job_id: str) -> bool:
        """Flag the job for cancellation (a queued job becomes ``cancelled`` at once).

        The running search stops after its current batch.  False for an unknown
        job or one already ended.
        """
        job = self.get_job(job_id)
        if job is None or job.state in ENDED_STATES:
            return False
        self.conn.hset(keys.job(job_id), "cancel", 1)
        if job.state == JobState.queued:
            self.set_job_state(job_id, JobState.cancelled)
        return True

    def cancel_requested(self, job_id: str) -> bool:
        return _s(self.conn.hget(keys.job(job_id), "cancel") or b"0") == "1"

    # -- records ---------------------------------------------------------------
    def append_records(self, workload_key: str, target: str, lines: list[str], pipeline=None):
        """RPUSH record lines as they are, duplicates too; the new list length (or the pipeline).

        Their states join ``keys.record_states`` in the same transaction, so
        :meth:`append_new_records` skips them.
        """
        if not lines:
            return self.count_records(workload_key, target) if pipeline is None else pipeline
        ids = []
        for line in lines:
            try:
                ids.append(record_state_id(line))
            except SchedulerCoreError:
                continue
        p = pipeline if pipeline is not None else self.conn.pipeline(transaction=True)
        p.rpush(keys.records(workload_key, target), *lines)
        if ids:
            p.sadd(keys.record_states(workload_key, target), *ids)
        return p if pipeline is not None else p.execute()[0]

    def append_new_records(self, workload_key: str, target: str, records: list[tuple[str, float | None]],
                           pipeline=None):
        """Append the ``(line, cost_s or None)`` records whose state is not recorded yet (Lua, atomic).

        A state (:func:`record_state_id`) is recorded once per workload+target, even when
        two jobs write it at once; the best index is lowered to the fastest appended record.
        Returns the number appended (or the pipeline).  Records appended by
        :meth:`append_records` before ``keys.record_states`` existed count once
        :meth:`index_record_states` ran.
        """
        args: list = []
        for line, cost_s in records:
            args += [record_state_id(line), line, "" if cost_s is None else repr(float(cost_s))]
        if not args:
            return 0 if pipeline is None else pipeline
        return self._append_new_records(
            keys=[keys.records(workload_key, target), keys.record_states(workload_key, target),
                  keys.best(workload_key, target), keys.record_errors()], args=args, client=pipeline or self.conn)

    def index_record_states(self, workload_key: str, target: str) -> int:
        """Add the state of every stored record to ``keys.record_states`` (idempotent).

        Only reads the records when the set has fewer members than the list has lines
        (records stored before the set, or by :meth:`append_records`).  Lines that are
        not records are left out.  Returns the set's size.
        """
        states = keys.record_states(workload_key, target)
        if self.conn.scard(states) >= self.count_records(workload_key, target):
            return int(self.conn.scard(states))
        ids = []
        for line in self.iter_records(workload_key, target):
            try:
                ids.append(record_state_id(line))
            except SchedulerCoreError:
                continue
        for lo in range(0, len(ids), _PAGE):
            self.conn.sadd(states, *ids[lo:lo + _PAGE])
        return int(self.conn.scard(states))

    def update_best(self, workload_key: str, target: str, cost_s: float, record: str, pipeline=None):
        """Make ``record`` the best of workload+target if ``cost_s`` (seconds) is lower (Lua, atomic)."""
        return self._update_best(keys=[keys.best(workload_key, target)], args=[repr(float(cost_s)), record],
                                 client=pipeline or self.conn)

    def count_records(self, workload_key: str, target: str) -> int:
        return int(self.conn.llen(keys.records(workload_key, target)))

    def iter_records(self, workload_key: str, target: str, start: int = 0,
                     stop: int | None = None) -> Iterator[str]:
        """Record lines ``start <= index < stop`` (Python slice bounds, ``None`` = the end), in order."""
        key = keys.records(workload_key, target)
        end = self.conn.llen(key) if stop is None else min(stop, self.conn.llen(key))
        for lo in range(max(start, 0), end, _PAGE):
            for line in self.conn.lrange(key, lo, min(lo + _PAGE, end) - 1):
                yield _s(line)

    def best_record(self, workload_key: str, target: str) -> tuple[float, str] | None:
        """``(cost_s, record line)`` of the fastest NO_ERROR record, or None."""
        h = decode_hash(self.conn.hgetall(keys.best(workload_key, target)))
        if not h.get("record"):
            return None
        return float(h["cost_s"]), h["record"]

    def load_measured(self, workload_key: str, target: str,
                      dags: Mapping[str, ComputeDAG] | None = None) -> list[tuple]:
        """Every record of workload+target as ``(MeasureInput, MeasureResult)`` (``decode_record``).

        dags : ``{workload_key: ComputeDAG}``; default the stored DAG.  Raises
        RecordFormatError for a line that does not decode or replay.
        """
        if dags is None:
            dags = {workload_key: self.load_dag(workload_key)}
        return [decode_record(line, dags, lineno=k + 1, filename=keys.records(workload_key, target))
                for k, line in enumerate(self.iter_records(workload_key, target))]

    def step_records(self, workload_key: str, target: str) -> list[str]:
        """The steps of every record as compact JSON (a state's identity), without replaying them."""
        return [record_steps(line) for line in self.iter_records(workload_key, target)]

    # -- artifacts and model snapshots -------------------------------------------
    def save_artifact(self, task_id: str, fmt: str, data: bytes) -> None:
        self.conn.set(keys.artifact(task_id, fmt), data)

    def load_artifact(self, task_id: str, fmt: str) -> bytes | None:
        return _bytes(self.conn.get(keys.artifact(task_id, fmt)))

    def save_model(self, workload_key: str, target: str, data: bytes) -> None:
        self.conn.set(keys.model(workload_key, target), data)

    def load_model(self, workload_key: str, target: str) -> bytes | None:
        return _bytes(self.conn.get(keys.model(workload_key, target)))


def _bytes(data: bytes | str | None) -> bytes | None:
    """A stored blob as bytes (a connection made with ``decode_responses`` hands back text)."""
    return data.encode() if isinstance(data, str) else data


class JobCancelled(Exception):
    """Raised by ``workers.record_sink.RedisRecordSink`` after a batch when the job was asked to stop."""


def import_record_file(store: RedisStore, path: str | os.PathLike, dags: Mapping[str, Any] | None = None,
                       task: Any = None) -> int:
    """Append a record file (RecordToFile's JSON lines) to Redis: its DAGs, records and best index.

    TVM's log lines ("v": "v0.6") are imported too, as our lines (``record.native_lines``:
    DAG resolved through ``dags``, the register_workload registry or ``task`` -- a Task,
    a ComputeDAG or a list of them -- then replayed; stored under our workload_key and the
    canonical target).  A record whose state is already stored for its workload+target is
    skipped (a state is recorded once), so importing a file twice adds nothing.  Returns
    the number of records appended.  Raises RecordFormatError naming the first invalid or
    unresolvable line (nothing after it is imported).
    """
    n, indexed = 0, set()
    for item in native_lines(str(path), dags, task):
        if isinstance(item, DagLine):
            store.conn.setnx(keys.dag(item.workload_key), json.dumps(item.dag))
            continue
        if (item.workload_key, item.target) not in indexed:
            store.index_record_states(item.workload_key, item.target)
            indexed.add((item.workload_key, item.target))
        n += store.append_new_records(item.workload_key, item.target, [(item.text, item.cost)])
    return n
