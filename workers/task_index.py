"""Tasks as lists and curves, read from Redis: what GET /tasks and GET /tasks/{id}/curve show.

    task created (RedisStore._create, ModelStore) --ZADD--> keys.tasks_by_created() (score: created)
    list_tasks(conn, state=, workload=, limit=, offset=)
        ensure_index (tasks stored before the index: one SCAN, then a marker key)
        ZREVRANGE (newest first) --pipeline--> task hash, latest job's state, LLEN records, best cost
        --> ([TaskSummary dict, ...], total)
    task_curve(conn, workload_key, target)
        records (in the order they were measured) --parse_line--> one point per record,
        the trials where the best improved, error counts by MeasureErrorNo name

Both read only; they never block a writer.  Costs are in seconds (the median of a record's
repeats, as the best index ranks them), GFLOP/s from the DAG's FLOP count, times are float
seconds since the epoch (the API turns them into ISO 8601).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import redis

from scheduler_core.base.errors import SchedulerCoreError
from scheduler_core.dag.compute_dag import ComputeDAG
from scheduler_core.measure.data import MeasureErrorNo
from scheduler_core.measure.record import RawRecord, parse_line

from . import keys
from .job_state import JobState

_CHUNK = 500          # ids read per pipeline
_CACHE_MAX = 4096     # DAG names / FLOP counts kept per process (keyed by workload_key: immutable)
_TASK_FIELDS = ("task_id", "workload_key", "target", "created", "latest_job_id")
_names: dict[str, str] = {}
_flops: dict[str, float] = {}
_cache_lock = threading.Lock()


def _s(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def _cached(cache: dict, key: str, value: Any) -> Any:
    with _cache_lock:
        if len(cache) >= _CACHE_MAX:
            cache.clear()
        cache[key] = value
    return value


def dag_name(dag_json: str | dict) -> str:
    """The name of a DAG for people: its computed ops' names joined by ``+`` (``"matmul+out"``).

    ``dag_json``: the ComputeDAG wire format (text or decoded).  A DAG of placeholders only is
    named by them.  Raises ValueError for text that is not a JSON object with a list of ops.
    """
    obj = json.loads(dag_json) if isinstance(dag_json, str) else dag_json
    ops = obj.get("ops") if isinstance(obj, dict) else None
    if not isinstance(ops, list):
        raise ValueError("a ComputeDAG JSON object with an 'ops' list was expected")
    names = [str(op.get("name", "")) for op in ops if isinstance(op, dict)]
    computed = [str(op.get("name", "")) for op in ops if isinstance(op, dict) and op.get("kind") != "placeholder"]
    return "+".join(computed or names)


def _dag_texts(conn: redis.Redis, workload_keys: set[str]) -> dict[str, str | None]:
    wks = sorted(workload_keys)
    with conn.pipeline(transaction=False) as p:
        for wk in wks:
            p.get(keys.dag(wk))
        texts = p.execute() if wks else []
    return {wk: None if t is None else _s(t) for wk, t in zip(wks, texts)}


def dag_names(conn: redis.Redis, workload_keys: set[str]) -> dict[str, str]:
    """``{workload_key: dag_name}`` (cached per process; ``""`` when no DAG is stored)."""
    missing = {wk for wk in workload_keys if wk not in _names}
    for wk, text in _dag_texts(conn, missing).items():
        _cached(_names, wk, "" if text is None else dag_name(text))
    return {wk: _names.get(wk, "") for wk in workload_keys}


def dag_flops(conn: redis.Redis, workload_keys: set[str]) -> dict[str, float]:
    """``{workload_key: FLOP count}`` of the stored DAGs (cached per process); 0.0 for a DAG
    that is not stored or whose FLOPs cannot be counted (symbolic shapes)."""
    missing = {wk for wk in workload_keys if wk not in _flops}
    for wk, text in _dag_texts(conn, missing).items():
        try:
            flop = ComputeDAG.from_json(text).flop_ct if text is not None else 0.0
        except SchedulerCoreError:
            flop = 0.0
        _cached(_flops, wk, float(flop))
    return {wk: _flops.get(wk, 0.0) for wk in workload_keys}


def gflops(flop_ct: float, cost_s: float | None) -> float | None:
    """GFLOP/s of ``flop_ct`` operations in ``cost_s`` seconds; None without a cost or a count."""
    if cost_s is None or cost_s <= 0 or flop_ct <= 0:
        return None
    return flop_ct / cost_s / 1e9


def ensure_index(conn: redis.Redis) -> int:
    """Add every stored task to ``keys.tasks_by_created()``, once per Redis; the number added.

    Tasks created since the index existed are added where they are created; this finds the
    ones stored before (one SCAN of the task hashes), then sets
    ``keys.tasks_by_created_backfilled()`` so later calls cost one EXISTS.  Idempotent and
    safe beside writers (ZADD NX keeps a score a creator wrote).
    """
    marker = keys.tasks_by_created_backfilled()
    if conn.exists(marker):
        return 0
    added, batch = 0, []
    for key in conn.scan_iter(match=keys.task("*"), count=1000, _type="hash"):
        batch.append(_s(key))
        if len(batch) >= _CHUNK:
            added += _index_batch(conn, batch)
            batch = []
    added += _index_batch(conn, batch)
    conn.set(marker, "1")
    return added


def _index_batch(conn: redis.Redis, task_keys: list[str]) -> int:
    if not task_keys:
        return 0
    with conn.pipeline(transaction=False) as p:
        for k in task_keys:
            p.hmget(k, "task_id", "workload_key", "created")
        rows = p.execute()
    scores = {}
    for k, (task_id, wk, created) in zip(task_keys, rows):
        if wk is None:  # not a complete task hash
            continue
        tid = _s(task_id) if task_id is not None else k[len(keys.task("")):]
        scores[tid] = float(_s(created)) if created else 0.0
    return int(conn.zadd(keys.tasks_by_created(), scores, nx=True) or 0) if scores else 0


def _task_rows(conn: redis.Redis, ids: list[str]) -> list[dict]:
    """The task hashes of ``ids`` (those still stored) with their latest job's state."""
    with conn.pipeline(transaction=False) as p:
        for tid in ids:
            p.hmget(keys.task(tid), *_TASK_FIELDS)
        raw = p.execute() if ids else []
    rows: list[dict[str, Any]] = []
    for tid, values in zip(ids, raw):
        h = {f: None if v is None else _s(v) for f, v in zip(_TASK_FIELDS, values)}
        if not h["workload_key"]:
            continue  # deleted, or half written
        rows.append({"task_id": h["task_id"] or tid, "workload_key": h["workload_key"], "target": h["target"] or "",
                     "created": float(h["created"]) if h["created"] else None,
                     "latest_job_id": h["latest_job_id"] or None})
    with conn.pipeline(transaction=False) as p:
        for row in rows:
            p.hget(keys.job(row["latest_job_id"] or ""), "state")
        states = p.execute() if rows else []
    for row, st in zip(rows, states):
        row["state"] = _s(st) if (st is not None and row["latest_job_id"]) else None
    return rows


def _complete(conn: redis.Redis, rows: list[dict]) -> list[dict]:
    """Add name, trials (records measured), best_cost_s and best_gflops to each row."""
    with conn.pipeline(transaction=False) as p:
        for row in rows:
            p.llen(keys.records(row["workload_key"], row["target"]))
            p.hget(keys.best(row["workload_key"], row["target"]), "cost_s")
        out = p.execute() if rows else []
    wks = {row["workload_key"] for row in rows}
    names, flops = dag_names(conn, wks), dag_flops(conn, wks)
    for k, row in enumerate(rows):
        cost = out[2 * k + 1]
        row["name"] = names[row["workload_key"]]
        row["trials"] = int(out[2 * k])
        row["best_cost_s"] = float(_s(cost)) if cost else None
        row["best_gflops"] = gflops(flops[row["workload_key"]], row["best_cost_s"])
    return rows


def _index_pages(conn: redis.Redis) -> Iterator[list[str]]:
    """Every indexed task id, newest first, in pages of ``_CHUNK``."""
    start = 0
    while True:
        ids = [_s(t) for t in conn.zrevrange(keys.tasks_by_created(), start, start + _CHUNK - 1)]
        if not ids:
            return
        yield ids
        start += len(ids)


def list_tasks(conn: redis.Redis, *, state: str | JobState | None = None, workload: str | None = None,
               limit: int = 50, offset: int = 0) -> tuple[list[dict], int]:
    """A page of tasks, newest first, and how many match; ``(items, total)``.

    state : the latest job's JobState (value or member); a task without a job never matches
    workload : a substring (case-insensitive) of the workload_key or of the DAG's name
    limit, offset : the page (``limit`` >= 1, ``offset`` >= 0)

    Each item: task_id, workload_key, name (:func:`dag_name`), target, trials (records
    measured), best_cost_s (seconds, the median of the best record's repeats, or None),
    best_gflops (or None), state (the latest job's JobState value, or None), latest_job_id
    (or None), created (seconds since the epoch, or None).  Raises ValueError for an unknown
    state or a limit/offset out of range.
    """
    if limit < 1 or offset < 0:
        raise ValueError(f"limit must be >= 1 and offset >= 0, got limit={limit}, offset={offset}")
    want_state = JobState(state).value if state is not None else None
    needle = (workload or "").lower()
    ensure_index(conn)
    if want_state is None and not needle:
        total = int(conn.zcard(keys.tasks_by_created()))
        ids = [_s(t) for t in conn.zrevrange(keys.tasks_by_created(), offset, offset + limit - 1)]
        return _complete(conn, _task_rows(conn, ids)), total
    matched, page = 0, []
    for ids in _index_pages(conn):
        rows = _task_rows(conn, ids)
        if needle:
            names = dag_names(conn, {r["workload_key"] for r in rows})
            rows = [r for r in rows
                    if needle in r["workload_key"].lower() or needle in names[r["workload_key"]].lower()]
        if want_state is not None:
            rows = [r for r in rows if r["state"] == want_state]
        for r in rows:
            if offset <= matched < offset + limit:
                page.append(r)
            matched += 1
    return _complete(conn, page), matched


def task_curve(conn: redis.Redis, workload_key: str, target: str) -> dict:
    """The tuning curve of a workload on a target: every record, in the order measured.

    Returns ``{"points": [...], "best": [...], "errors": {name: count}}``.  A point:
    ``trial`` (1-based position in the task's records), ``cost_s`` (seconds, the median of
    the repeats; None for a failed measurement), ``gflops`` (or None), ``error`` (None or the
    MeasureErrorNo name), ``timestamp`` (seconds since the epoch).  ``best``: ``{"trial",
    "cost_s", "gflops"}`` at every trial whose cost beat every earlier one.  Raises
    RecordFormatError for a stored line that is not a valid record.
    """
    flop = dag_flops(conn, {workload_key})[workload_key]
    points: list[dict] = []
    best: list[dict] = []
    errors: dict[str, int] = {}
    key = keys.records(workload_key, target)
    n = int(conn.llen(key))
    for lo in range(0, n, _CHUNK):
        for line in conn.lrange(key, lo, min(lo + _CHUNK, n) - 1):
            rec = parse_line(_s(line), lineno=len(points) + 1, filename=key)
            if not isinstance(rec, RawRecord):
                continue
            err = MeasureErrorNo(rec.error_no)
            trial = len(points) + 1
            cost = rec.cost
            points.append({"trial": trial, "cost_s": cost, "gflops": gflops(flop, cost),
                           "error": None if cost is not None else err.name, "timestamp": rec.timestamp or None})
            if cost is None:
                errors[err.name] = errors.get(err.name, 0) + 1
            elif not best or cost < best[-1]["cost_s"]:
                best.append({"trial": trial, "cost_s": cost, "gflops": gflops(flop, cost)})
    return {"points": points, "best": best, "errors": errors}
