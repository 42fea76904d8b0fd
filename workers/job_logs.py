"""The log of one job: its log records as lines of a capped Redis list (``keys.job_log``).

    with job_logging(conn, job_id):      # in the RQ job, around the whole job
        log.info("...")                  # --> RPUSH keys.job_log(job_id) + LTRIM (last JOB_LOG_CAP)
    read_job_log(conn, job_id, tail=50)  # --> ["2026-11-24T01:30:00.123Z INFO workers.jobs: ...", ...]
    shown, cursor = open_log_cursor(conn, job_id, tail=0)     # a follower (GET /jobs/{id}/events):
    read_new_log_lines(conn, job_id, cursor)                  # --> the lines logged since its last read

A line is ``<ISO 8601 UTC time> <LEVEL> <logger>: <message>``; an exception adds its one-line
``Type: message`` (the traceback goes to the worker's log file only), so every record is one line.
Only the records of the job's own context reach its list (the job id in a contextvar, which the
worker's file format shows too).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import redis

from . import keys
from .logging_setup import JobIdFilter, UTCFormatter, current_job_id

JOB_LOG_CAP = 2000
JOB_LINE_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def one_line(text: str, limit: int = 2000) -> str:
    """``text`` with every run of whitespace (newlines too) made one space, at most ``limit`` characters."""
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


class JobLineFormatter(UTCFormatter):
    """:data:`JOB_LINE_FORMAT` on one line: an exception adds `` | Type: message`` unless the
    message already says it (the traceback is for the worker's log file)."""

    def __init__(self) -> None:
        super().__init__(JOB_LINE_FORMAT)

    def format(self, record: logging.LogRecord) -> str:
        record.message = record.getMessage()
        record.asctime = self.formatTime(record)
        line = self.formatMessage(record)
        if record.exc_info and record.exc_info[1] is not None:
            err = f"{type(record.exc_info[1]).__name__}: {record.exc_info[1]}"
            if one_line(err) not in one_line(record.message):  # not already in the message
                line += f" | {err}"
        return one_line(line)


class RedisJobLogHandler(logging.Handler):
    """Appends the records of one job (``record.job_id == job_id``) to ``keys.job_log(job_id)``,
    keeping the last ``cap`` lines (RPUSH + LTRIM in one pipeline).  A Redis error is reported
    by logging's ``handleError`` and never reaches the job."""

    def __init__(self, conn: redis.Redis, job_id: str, cap: int = JOB_LOG_CAP, level: int = logging.INFO):
        super().__init__(level)
        if cap < 1:
            raise ValueError(f"cap must be >= 1, got {cap}")
        self.conn, self.job_id, self.cap, self.key = conn, job_id, int(cap), keys.job_log(job_id)
        self.setFormatter(JobLineFormatter())
        self.addFilter(JobIdFilter())

    def filter(self, record: logging.LogRecord):
        return super().filter(record) and getattr(record, "job_id", None) == self.job_id

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = self.format(record)
            with self.conn.pipeline(transaction=False) as p:
                p.rpush(self.key, line)
                p.ltrim(self.key, -self.cap, -1)
                p.execute()
        except Exception:  # noqa: BLE001 - logging must not break the job
            self.handleError(record)


@contextlib.contextmanager
def job_logging(conn: redis.Redis, job_id: str, cap: int = JOB_LOG_CAP) -> Iterator[RedisJobLogHandler]:
    """While the block runs, the records logged in this context carry ``job_id`` and reach the job's
    Redis list (at INFO and above; the project's ``workers`` logger is lowered to INFO for the block
    when it was quieter).  Restores the previous job id, handler set and level on exit."""
    handler = RedisJobLogHandler(conn, job_id, cap)
    root, workers_log = logging.getLogger(), logging.getLogger("workers")
    old_level = workers_log.level
    if workers_log.getEffectiveLevel() > logging.INFO:
        workers_log.setLevel(logging.INFO)
    token = current_job_id.set(job_id)
    root.addHandler(handler)
    try:
        yield handler
    finally:
        root.removeHandler(handler)
        current_job_id.reset(token)
        workers_log.setLevel(old_level)
        handler.close()


def read_job_log(conn: redis.Redis, job_id: str, tail: int | None = None) -> list[str]:
    """The job's log lines, oldest first (at most the last JOB_LOG_CAP); ``[]`` for a job that
    logged nothing (or an unknown one: the caller checks the job exists).

    tail : int | None, only the last ``tail`` lines (>= 0); ValueError when negative
    """
    if tail is not None and tail < 0:
        raise ValueError(f"tail must be >= 0, got {tail}")
    if tail == 0:
        return []
    start = 0 if tail is None else -int(tail)
    return [v.decode() if isinstance(v, bytes) else str(v) for v in conn.lrange(keys.job_log(job_id), start, -1)]


def _text(v) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def lines_after(last: str | None, lines: Sequence[str]) -> list[str]:
    """The lines of ``lines`` after the last occurrence of ``last``: all of them when ``last`` is None
    or no longer among them (trimmed away; a reader can do no better)."""
    if last is not None:
        for k in range(len(lines) - 1, -1, -1):
            if lines[k] == last:
                return list(lines[k + 1:])
    return list(lines)


@dataclass
class LogCursor:
    """A follower's place in a job's log: how many lines of the list it read and the last of them.
    While the list is under its cap nothing was trimmed, so the count says where new lines start;
    once full, its oldest lines go as new ones come, and the last line read marks the place."""

    read: int = 0
    last: str | None = None


def open_log_cursor(conn: redis.Redis, job_id: str, tail: int | None = None) -> tuple[list[str], LogCursor]:
    """The lines a follower shows first (all kept, or the last ``tail``; 0: none) and its cursor,
    placed after every line logged so far."""
    lines = read_job_log(conn, job_id)
    shown = lines if tail is None else lines[len(lines) - tail:] if tail else []
    return shown, LogCursor(len(lines), lines[-1] if lines else None)


def read_new_log_lines(conn: redis.Redis, job_id: str, cursor: LogCursor, cap: int = JOB_LOG_CAP) -> list[str]:
    """The lines logged since ``cursor`` last read, oldest first; moves ``cursor`` past them.

    cap : the list's cap (the job's ``job_logging`` cap).  Under it the new lines are the list from
    ``cursor.read`` on (one LRANGE); at it, the lines after ``cursor.last`` (one LINDEX when nothing
    came, else the whole list)."""
    key = keys.job_log(job_id)
    length = conn.llen(key)
    if length < cap:
        new = [_text(v) for v in conn.lrange(key, cursor.read, -1)] if length > cursor.read else []
    elif cursor.last is not None and _text(conn.lindex(key, -1) or b"") == cursor.last:
        new = []
    else:
        new = lines_after(cursor.last, [_text(v) for v in conn.lrange(key, 0, -1)])
    if new:
        cursor.read, cursor.last = cursor.read + len(new), new[-1]
    return new
