"""One logging format for the service: the worker processes (a rotating file) and the API (stderr).

    configure_worker_logging(data_dir) --> <data_dir>/logs/worker.log (RotatingFileHandler)
    configure_api_logging()            --> stderr
    a line: "2026-11-24T01:30:00.123Z INFO workers.jobs [job=3f2a...] job 3f2a... started: ..."

Times are ISO 8601 in UTC (:class:`UTCFormatter`).  ``job_id`` is the job whose code logged the
record (:data:`current_job_id`, set by ``workers.job_logs.job_logging`` while a job runs), ``-``
outside a job (:class:`JobIdFilter`).  Both functions are idempotent: a second call adds no second
handler.  The worker's file handler replaces the terminal: RQ's own stdout/stderr handlers are
removed and its loggers propagate to the file, so nothing a worker logs draws into a command
line's progress bar.
"""

from __future__ import annotations

import contextvars
import logging
import logging.handlers
import os
import re
import sys
import time
from pathlib import Path

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s [job=%(job_id)s] %(message)s"
LOG_DIR = "logs"
WORKER_LOG = "worker.log"
WORKER_LOG_MAX_BYTES = 10 * 1024 * 1024
WORKER_LOG_BACKUPS = 3
WORKER_HANDLER_NAME = "autosched.worker_file"
API_HANDLER_NAME = "autosched.api_stderr"
# the loggers of this project (set to the configured level) and RQ's (sent to the file too)
PACKAGE_LOGGERS = ("workers", "api", "scheduler_core", "sketch_rules", "cost_model")
RQ_LOGGERS = ("rq", "rq.worker", "rq.job", "rq.scheduler", "rq.worker_pool")

current_job_id: contextvars.ContextVar[str | None] = contextvars.ContextVar("autosched_job_id", default=None)


class UTCFormatter(logging.Formatter):
    """A Formatter whose ``%(asctime)s`` is ISO 8601 in UTC with milliseconds:
    ``2026-11-24T01:30:00.123Z``."""

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:  # noqa: N802 - logging's name
        stamp = time.strftime(datefmt or "%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        return f"{stamp}.{int(record.msecs):03d}Z"


class JobIdFilter(logging.Filter):
    """Sets ``record.job_id`` (when the record has none) to :data:`current_job_id`, ``-`` outside
    a job.  Never drops a record."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not getattr(record, "job_id", None):
            record.job_id = current_job_id.get() or "-"
        return True


_TOKEN_IN_QUERY = re.compile(r"([?&](?:access_)?token=)[^&\s\"]*", re.IGNORECASE)
ACCESS_LOGGERS = ("uvicorn.access",)  # loggers that log request paths with their query strings


class RedactTokenFilter(logging.Filter):
    """Replaces the value of a ``token=`` query parameter (the dashboard accepts the API token
    there) with ``[redacted]`` in a record's message and string arguments, so the token never
    reaches a log (uvicorn's access log writes each request's path with its query)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str):
            record.msg = redact_tokens(record.msg)
        if isinstance(record.args, tuple):
            record.args = tuple(redact_tokens(a) if isinstance(a, str) else a for a in record.args)
        return True


def redact_tokens(text: str) -> str:
    """``text`` with every ``token=<value>`` query parameter's value replaced by ``[redacted]``."""
    return _TOKEN_IN_QUERY.sub(r"\1[redacted]", text)


def redact_access_logs() -> None:
    """Put a :class:`RedactTokenFilter` on the access loggers (:data:`ACCESS_LOGGERS`); idempotent.
    Logging configuration (uvicorn's dictConfig) keeps a logger's filters."""
    for name in ACCESS_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, RedactTokenFilter) for f in logger.filters):
            logger.addFilter(RedactTokenFilter())


def log_level(level: int | str) -> int:
    """The numeric level of ``level`` (``"INFO"``, ``"debug"``, ``20``).

    Raises ValueError naming the allowed names for an unknown level.
    """
    if isinstance(level, int):
        return level
    value = logging.getLevelName(str(level).upper())
    if not isinstance(value, int):
        raise ValueError(f"unknown log level {level!r}: use DEBUG, INFO, WARNING, ERROR or CRITICAL")
    return value


def _named(name: str) -> logging.Handler | None:
    return next((h for h in logging.getLogger().handlers if h.get_name() == name), None)


def _set_levels(level: int) -> None:
    for name in PACKAGE_LOGGERS:
        logging.getLogger(name).setLevel(level)


def _is_terminal_handler(handler: logging.Handler) -> bool:
    return (isinstance(handler, logging.StreamHandler) and not isinstance(handler, logging.FileHandler)
            and getattr(handler, "stream", None) in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__))


def configure_worker_logging(data_dir: str | os.PathLike, level: int | str = "INFO") -> Path:
    """Send this (worker) process's log records to ``<data_dir>/logs/worker.log``; returns that path.

    data_dir : the service's data directory (``workers.redis_conn.resolve_data_dir()``); the
        ``logs`` directory is created
    level : the level of the project's loggers and RQ's (a name or a number); ValueError if unknown

    A RotatingFileHandler (10 MiB, 3 backups) on the root logger with :data:`LOG_FORMAT`; the
    terminal handlers of the root logger and of RQ's loggers are removed (RQ adds its own only when
    no handler is configured), and warnings are logged.  Idempotent; a call with another directory
    moves the handler there.
    """
    lvl = log_level(level)
    path = Path(os.path.abspath(os.fspath(data_dir))) / LOG_DIR / WORKER_LOG
    path.parent.mkdir(parents=True, exist_ok=True)
    root = logging.getLogger()
    old = _named(WORKER_HANDLER_NAME)
    if old is not None and getattr(old, "baseFilename", None) != str(path):
        root.removeHandler(old)
        old.close()
        old = None
    if old is None:
        handler = logging.handlers.RotatingFileHandler(path, maxBytes=WORKER_LOG_MAX_BYTES,
                                                       backupCount=WORKER_LOG_BACKUPS, encoding="utf-8")
        handler.set_name(WORKER_HANDLER_NAME)
        handler.setFormatter(UTCFormatter(LOG_FORMAT))
        handler.addFilter(JobIdFilter())
        root.addHandler(handler)
    for h in [h for h in root.handlers if _is_terminal_handler(h)]:
        root.removeHandler(h)
    for name in RQ_LOGGERS:
        logger = logging.getLogger(name)
        for h in [h for h in logger.handlers if _is_terminal_handler(h)]:
            logger.removeHandler(h)
        logger.propagate = True
        logger.setLevel(lvl)
    _set_levels(lvl)
    if root.level > logging.WARNING or root.level == logging.NOTSET:
        root.setLevel(logging.WARNING)  # other libraries: warnings and errors only
    logging.captureWarnings(True)
    return path


def configure_api_logging(level: int | str = "INFO") -> None:
    """Send the API process's log records to stderr in :data:`LOG_FORMAT` (ISO 8601 UTC times).

    level : the level of the project's loggers (a name or a number); ValueError if unknown.
    Other libraries' loggers (uvicorn's keep their own handlers) reach it at WARNING and above.
    Idempotent.
    """
    lvl = log_level(level)
    root = logging.getLogger()
    if _named(API_HANDLER_NAME) is None:
        handler = logging.StreamHandler(sys.stderr)
        handler.set_name(API_HANDLER_NAME)
        handler.setFormatter(UTCFormatter(LOG_FORMAT))
        handler.addFilter(JobIdFilter())
        root.addHandler(handler)
    _set_levels(lvl)
    if root.level > logging.WARNING or root.level == logging.NOTSET:
        root.setLevel(logging.WARNING)
