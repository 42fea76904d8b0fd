"""Service-wide counts for monitoring (GET /metrics), read from Redis when asked.

    service_counts(conn) -> ServiceCounts
        jobs_by_state   {JobState value: jobs}        every job hash (task and model jobs)
        tasks           task hashes
        models          whole-model hashes (POST /models)
        records         stored measurement records, over every workload and target
        errors_by_kind  {MeasureErrorNo name but NO_ERROR: stored records with that error}
        queues          {RQ queue name: jobs waiting}  the ``tune`` queue and every measurement
                        queue RQ knows (``measure:<kind>:<device>``)

Nothing is kept in the process: every call reads Redis (one SCAN over the service's keys plus
pipelined reads), so several API processes report the same numbers.  Errors come from the
``keys.record_errors`` hash that ``RedisStore.append_new_records`` updates in the Lua script
that stores a record: a record is counted when it is stored, once (a job retry that measures
a state again stores nothing), and never when a job's progress counters are.  Records stored
before that hash existed are counted by :func:`rebuild_record_errors`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import redis
from rq import Queue
from rq.serializers import JSONSerializer

from scheduler_core.measure.data import MeasureErrorNo

from . import keys
from .job_state import JobState
from .queues import TUNE_QUEUE

_SCAN_COUNT = 1000
ERROR_KINDS = tuple(e.name for e in MeasureErrorNo if e != MeasureErrorNo.NO_ERROR)
UNPARSED = "unparsed"  # the record_errors field of a stored line without a readable error_no


@dataclass
class ServiceCounts:
    """One reading of the service's state (see the module docstring); every value a count >= 0."""

    jobs_by_state: dict[str, int] = field(default_factory=dict)
    tasks: int = 0
    models: int = 0
    records: int = 0
    errors_by_kind: dict[str, int] = field(default_factory=dict)
    queues: dict[str, int] = field(default_factory=dict)


def _s(v) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def _kind_of(key: str) -> tuple[str, str] | None:
    """``(kind, rest)`` of a service key ``autosched:<kind>:<rest>``, None for another key."""
    if not key.startswith(keys.PREFIX):
        return None
    kind, sep, rest = key[len(keys.PREFIX):].partition(":")
    return (kind, rest) if sep else None


def _scan(conn: redis.Redis) -> dict[str, list[str]]:
    """The service's keys by kind: ``job`` and ``task`` hashes, ``model_meta`` hashes, ``records``
    lists (a job or task key with a further ``:`` is another structure and is left out)."""
    found: dict[str, list[str]] = {"job": [], "task": [], "model_meta": [], "records": []}
    for raw in conn.scan_iter(match=f"{keys.PREFIX}*", count=_SCAN_COUNT):
        key = _s(raw)
        parsed = _kind_of(key)
        if parsed is None or parsed[0] not in found:
            continue
        kind, rest = parsed
        if kind != "records" and (":" in rest or not rest):
            continue
        found[kind].append(key)
    return found


def error_counts(conn: redis.Redis) -> dict[str, int]:
    """``{MeasureErrorNo name: stored records}`` for every error kind (0 when none), read from
    ``keys.record_errors``; an error number this version does not know counts as UNKNOWN_ERROR."""
    out = dict.fromkeys(ERROR_KINDS, 0)
    for raw_no, raw_n in conn.hgetall(keys.record_errors()).items():
        no, n = _s(raw_no), int(raw_n)
        if no == UNPARSED:
            continue
        try:
            name = MeasureErrorNo(int(no)).name
        except ValueError:
            name = MeasureErrorNo.UNKNOWN_ERROR.name
        if name != MeasureErrorNo.NO_ERROR.name:
            out[name] += n
    return out


def queue_lengths(conn: redis.Redis) -> dict[str, int]:
    """``{queue name: jobs waiting}`` for ``tune`` (always) and every other RQ queue registered in
    this Redis (the measurement queues, once a job or worker used them)."""
    names = {TUNE_QUEUE} | {q.name for q in Queue.all(connection=conn, serializer=JSONSerializer)}
    with conn.pipeline(transaction=False) as p:
        for name in sorted(names):
            p.llen(Queue(name, connection=conn, serializer=JSONSerializer).key)
        lengths = p.execute()
    return {name: int(n) for name, n in zip(sorted(names), lengths)}


def service_counts(conn: redis.Redis) -> ServiceCounts:
    """Read every count of :class:`ServiceCounts` from Redis now.

    conn : redis.Redis (bytes or decoded responses).  Raises redis.RedisError when Redis is
    unreachable.  A job hash whose state is not a JobState value is left out.
    """
    found = _scan(conn)
    with conn.pipeline(transaction=False) as p:
        for key in found["job"]:
            p.hget(key, "state")
        for key in found["task"]:
            p.hexists(key, "workload_key")
        for key in found["records"]:
            p.llen(key)
        replies = p.execute(raise_on_error=False)
    n_jobs, n_tasks = len(found["job"]), len(found["task"])
    states = replies[:n_jobs]
    tasks = replies[n_jobs:n_jobs + n_tasks]
    lengths = replies[n_jobs + n_tasks:]
    by_state = dict.fromkeys((s.value for s in JobState), 0)
    for st in states:
        if isinstance(st, (bytes, str)) and _s(st) in by_state:
            by_state[_s(st)] += 1
    return ServiceCounts(
        jobs_by_state=by_state,
        tasks=sum(1 for t in tasks if t is True or t == 1),
        models=len(found["model_meta"]),
        records=sum(int(n) for n in lengths if isinstance(n, int)),
        errors_by_kind=error_counts(conn),
        queues=queue_lengths(conn))


def rebuild_record_errors(conn: redis.Redis) -> dict[str, int]:
    """Recount ``keys.record_errors`` from every stored record (for records stored before the
    counter existed); returns the new ``{error_no as text: records}``.  Reads every record:
    run it once, with no job running (a record stored meanwhile may be counted twice or not)."""
    counts: dict[Any, int] = {}  # error_no as text -> records (Any: redis' hset takes any key type)
    for key in _scan(conn)["records"]:
        for lo in range(0, int(conn.llen(key)), _SCAN_COUNT):
            for line in conn.lrange(key, lo, lo + _SCAN_COUNT - 1):
                try:
                    no = str(int(json.loads(_s(line))["r"][1]))
                except (ValueError, KeyError, IndexError, TypeError):
                    no = UNPARSED
                counts[no] = counts.get(no, 0) + 1
    with conn.pipeline(transaction=True) as p:
        p.delete(keys.record_errors())
        if counts:
            p.hset(keys.record_errors(), mapping=counts)
        p.execute()
    return counts
