"""The log of one job: its log records as lines of a capped Redis list (``keys.job_log``).

    with job_logging(conn, job_id):      # in the RQ job, around the whole job
        log.info("...")                  # --> RPUSH keys.job_log(job_id) + LTRIM (last JOB_LOG_CAP)
    read_job_log(conn, job_id, tail=50)  # --> ["2026-11-24T01:30:00.123Z INFO workers.jobs: ...", ...]

A line is ``<ISO 8601 UTC time> <LEVEL> <logger>: <message>``; an exception adds its one-line
``Type: message`` (the traceback goes to the worker's log file only), so every record is one line.
Only the records of the job's own context reach its list (the job id in a contextvar, which the
worker's file format shows too).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

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
