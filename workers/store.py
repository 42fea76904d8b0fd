"""RedisStore: tasks, jobs, records, best-record index, artifacts and model snapshots in Redis.

    POST /tasks --create_task--> task hash + DAG + task_for_workload index
               --create_job--> job hash (queued)
    tune_job --RedisRecordSink(policy, inputs, results)--> RPUSH records, best (Lua, keeps the min),
               job progress (trials_done, best cost, error counts), in one MULTI/EXEC
    resume --load_measured--> [(MeasureInput, MeasureResult)] for the policy and the cost model

Records are the lines of ``scheduler_core.measure.record`` (``encode_record``);
the DAG is stored once per workload_key under ``keys.dag``, so a record list plus
its DAG rebuilds every measured state.  Keys come from :mod:`workers.keys` only.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Iterator, Mapping
from typing import Any

import redis

from scheduler_core.base.target import Target
from scheduler_core.dag.compute_dag import ComputeDAG
from scheduler_core.dag.task import Task
from scheduler_core.measure.data import MeasureErrorNo
from scheduler_core.measure.record import DagLine, decode_record, encode_record, iter_lines, parse_line
from scheduler_core.search.tuning_options import TuningOptions

from . import keys
from .job_state import ENDED_STATES, JobState

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


def _s(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def _decode_hash(h: Mapping) -> dict:
    return {_s(k): _s(v) for k, v in h.items()}


def canonical_target(target: str) -> str:
    """The target as SearchTask spells it (``Target.parse(t).str``); raises BuildError when unknown."""
    return Target.parse(str(target)).str


class RedisStore:
    """All service state in one Redis (see :mod:`workers.keys` for the layout).

    Parameters
    ----------
    conn : redis.Redis, created without ``decode_responses`` (artifacts are bytes)
    """

    def __init__(self, conn: redis.Redis):
        self.conn = conn
        self._update_best = conn.register_script(_UPDATE_BEST)
        self._job_progress = conn.register_script(_JOB_PROGRESS)

    # -- tasks -----------------------------------------------------------------
    def create_task(self, dag_json: str | dict | ComputeDAG, target: str,
                    tuning: TuningOptions | Mapping | None = None) -> tuple[str, str]:
        """Store a task; ``(task_id, workload_key)``.

        The same workload and target map to the same task (its tuning is replaced
        by ``tuning``), so a second POST reuses every record measured before.
        ``tuning``: TuningOptions or a dict of its fields (missing ones take the defaults);
        the task keeps every field (``TuningOptions.to_json``).
        Raises InvalidWorkloadError for a bad DAG or tuning option, InvalidTargetError
        (a BuildError) for a target the parser rejects.
        """
        if not isinstance(tuning, TuningOptions):
            tuning = TuningOptions.from_json(dict(tuning or {}))
        dag = dag_json if isinstance(dag_json, ComputeDAG) else ComputeDAG.from_json(dag_json)
        target = canonical_target(target)
        wk = dag.workload_key
        self.conn.setnx(keys.dag(wk), dag.to_json())
        new_id = uuid.uuid4().hex
        index = keys.task_for_workload(wk, target)
        created = self.conn.set(index, new_id, nx=True)
        task_id = new_id if created else _s(self.conn.get(index))
        fields = {"tuning": json.dumps(tuning.to_json())}
        if created:
            fields.update(task_id=task_id, workload_key=wk, target=target, created=repr(time.time()),
                          latest_job_id="")
        self.conn.hset(keys.task(task_id), mapping=fields)
        return task_id, wk

    def get_task(self, task_id: str) -> dict | None:
        """The task hash with ``tuning`` decoded, or None for an unknown id."""
        h = _decode_hash(self.conn.hgetall(keys.task(task_id)))
        if not h.get("workload_key"):
            return None
        h["tuning"] = json.loads(h.get("tuning") or "{}")
        h["created"] = float(h.get("created") or 0.0)
        return h

    def load_task(self, meta: Mapping) -> Task:
        """The Task of a task hash (from :meth:`get_task`): its stored DAG, key and target."""
        wk = meta["workload_key"]
        return Task.create(self.load_dag(wk), meta["target"], workload_key=wk)

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
    def create_job(self, task_id: str, trials: int) -> str:
        """A new job hash (state ``queued``) for ``trials`` measurements; the task's latest job.

        Raises KeyError for an unknown task.
        """
        if not self.conn.hexists(keys.task(task_id), "workload_key"):
            raise KeyError(f"unknown task {task_id!r}")
        job_id = uuid.uuid4().hex
        with self.conn.pipeline() as p:
            p.hset(keys.job(job_id), mapping={
                "job_id": job_id, "task_id": task_id, "state": JobState.queued.value, "trials_done": 0,
                "trials_total": int(trials), "best_cost_s": "", "best_gflops": "", "errors": "{}",
                "created": repr(time.time()), "started": "", "ended": "", "error": "", "cancel": 0})
            p.hset(keys.task(task_id), "latest_job_id", job_id)
            p.execute()
        return job_id

    def get_job(self, job_id: str) -> dict | None:
        """The job hash with numbers and ``errors`` decoded (None for absent values); None if unknown."""
        h = _decode_hash(self.conn.hgetall(keys.job(job_id)))
        if not h:
            return None
        for k in ("trials_done", "trials_total", "cancel"):
            h[k] = int(h.get(k) or 0)
        for k in ("best_cost_s", "best_gflops", "created", "started", "ended"):
            h[k] = float(h[k]) if h.get(k) else None
        h["errors"] = json.loads(h.get("errors") or "{}")
        h["cancel"] = bool(h["cancel"])
        return h

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
        self.conn.hset(keys.job(job_id), mapping=fields)

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

    def request_cancel(self, job_id: str) -> bool:
        """Flag the job for cancellation (a queued job becomes ``cancelled`` at once).

        The running search stops after its current batch.  False for an unknown
        job or one already ended.
        """
        job = self.get_job(job_id)
        if job is None or JobState(job["state"]) in ENDED_STATES:
            return False
        self.conn.hset(keys.job(job_id), "cancel", 1)
        if job["state"] == JobState.queued:
            self.set_job_state(job_id, JobState.cancelled)
        return True

    def cancel_requested(self, job_id: str) -> bool:
        return _s(self.conn.hget(keys.job(job_id), "cancel") or b"0") == "1"

    # -- records ---------------------------------------------------------------
    def append_records(self, workload_key: str, target: str, lines: list[str], pipeline=None):
        """RPUSH record lines (one atomic append); the new list length (or the pipeline)."""
        if not lines:
            return self.count_records(workload_key, target) if pipeline is None else pipeline
        return (pipeline or self.conn).rpush(keys.records(workload_key, target), *lines)

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
        h = _decode_hash(self.conn.hgetall(keys.best(workload_key, target)))
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
        return [json.dumps(list(parse_line(line).steps), separators=(",", ":"))
                for line in self.iter_records(workload_key, target)]

    # -- artifacts and model snapshots -------------------------------------------
    def save_artifact(self, task_id: str, fmt: str, data: bytes) -> None:
        self.conn.set(keys.artifact(task_id, fmt), data)

    def load_artifact(self, task_id: str, fmt: str) -> bytes | None:
        return self.conn.get(keys.artifact(task_id, fmt))

    def save_model(self, workload_key: str, target: str, data: bytes) -> None:
        self.conn.set(keys.model(workload_key, target), data)

    def load_model(self, workload_key: str, target: str) -> bytes | None:
        return self.conn.get(keys.model(workload_key, target))


class JobCancelled(Exception):
    """Raised by RedisRecordSink after a batch when the job was asked to stop."""


def import_record_file(store: RedisStore, path: str | os.PathLike) -> int:
    """Append a record file (RecordToFile's JSON lines) to Redis: its DAGs, records and best index.

    Returns the number of records imported.  Raises RecordFormatError naming the first
    invalid line (nothing after it is imported).
    """
    n = 0
    for item in iter_lines(str(path)):
        if isinstance(item, DagLine):
            store.conn.setnx(keys.dag(item.workload_key), json.dumps(item.dag))
            continue
        store.append_records(item.workload_key, item.target, [item.text])
        if item.error_no == MeasureErrorNo.NO_ERROR:
            store.update_best(item.workload_key, item.target, item.mean_cost, item.text)
        n += 1
    return n


class RedisRecordSink:
    """Measure callback ``(policy, inputs, results)`` writing each batch to Redis.

    One MULTI/EXEC per batch: RPUSH the records (``encode_record``), lower the
    best-record index (Lua), and add to the job's trials_done / error counts /
    best cost (GFLOP/s from ``task.compute_dag.flop_ct``).  A killed worker thus
    loses no finished batch, and trials_done always equals the records this job
    appended.  Raises :class:`JobCancelled` after writing when a cancel was requested.

    Parameters
    ----------
    store : RedisStore
    task : SearchTask (``workload_key``, ``target``, ``compute_dag``)
    job_id : str, the job whose progress is updated
    """

    def __init__(self, store: RedisStore, task: Any, job_id: str):
        self.store = store
        self.task = task
        self.job_id = job_id

    def __call__(self, policy: Any, inputs: list, results: list) -> None:
        wk, target = self.task.workload_key, str(self.task.target)
        lines, errors = [], {}
        best: tuple | None = None
        for inp, res in zip(inputs, results):
            line = encode_record(inp, res)
            lines.append(line)
            if res.cost is not None:
                if best is None or res.cost < best[0]:
                    best = (res.cost, line)
            else:
                name = MeasureErrorNo(res.error_no).name
                errors[name] = errors.get(name, 0) + 1
        if lines:
            with self.store.conn.pipeline(transaction=True) as p:
                self.store.append_records(wk, target, lines, pipeline=p)
                if best is not None:
                    self.store.update_best(wk, target, best[0], best[1], pipeline=p)
                self.store.add_job_progress(self.job_id, len(lines), errors,
                                            None if best is None else best[0],
                                            self.task.compute_dag.flop_ct, pipeline=p)
                p.execute()
        if self.store.cancel_requested(self.job_id):
            raise JobCancelled(self.job_id)
