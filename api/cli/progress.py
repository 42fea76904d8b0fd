"""The one progress bar of ``tune`` and ``submit --wait``, and keeping logs out of it.

    follow(poll, console, stream=...)  the bar until the job ends, fed by the job's event stream
        (GET /jobs/{id}/events) when there is one, else (or when it fails) by polling

    JobProgress(console).update(job)   job: a job hash / GET /jobs/{id} body (state, phase,
        trials_done, trials_total, best_cost_s, best_gflops, errors)
        -->  tuning  evolution  ━━━━━━━━━━━━━  12/64  ETA 0:42  best 1.23 ms (215.4 GFLOP/s)
    worker_output_to(log_path)         this process's stdout/stderr (inherited by the worker
        processes it starts) go to the log file; yields the terminal's stderr for the bar
    log_to_console(console)            WARNING and above printed above the bar, nothing below

The phase appears only when the job reports one, the ETA once two batches are measured (from
their trial rate), the best once a program has been measured (never "0.0" or "inf").
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TextIO

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from workers.job_state import ENDED_STATES, JobState

log = logging.getLogger(__name__)
PHASES = ("sketches", "initial population", "evolution", "building", "measuring", "saving")


def format_seconds(s: float) -> str:
    """A latency in seconds as text with a unit: ``12.3 us``, ``1.23 ms``, ``2.5 s``."""
    if s < 1e-3:
        return f"{s * 1e6:.3g} us"
    if s < 1.0:
        return f"{s * 1e3:.3g} ms"
    return f"{s:.3g} s"


def format_gflops(g: float) -> str:
    """GFLOP/s with one decimal, or three significant digits below 10 (``0.00213``)."""
    return f"{g:.1f}" if g >= 10 else f"{g:.3g}"


def best_text(job: dict) -> str:
    """``best 1.23 ms (215.4 GFLOP/s)`` once the job has a finite best, else ``""``."""
    cost = job.get("best_cost_s")
    if cost is None or not math.isfinite(float(cost)) or float(cost) <= 0:
        return ""
    gflops = job.get("best_gflops")
    flops = (f" ({format_gflops(float(gflops))} GFLOP/s)"
             if gflops is not None and math.isfinite(float(gflops)) and float(gflops) > 0 else "")
    return f"best {format_seconds(float(cost))}{flops}"


def phase_text(job: dict) -> str:
    """The running job's phase (``evolution``, ...; ``""`` when it reports none), ``waiting for a
    worker`` while queued, the state once it ended (``finished``, ``failed``, ``cancelled``)."""
    state = job.get("state")
    if state == JobState.queued.value:
        return "waiting for a worker"
    if state == JobState.running.value:
        return job.get("phase") or ""
    return state or ""


class EtaEstimator:
    """Seconds left from the trial rate, once ``min_batches`` batches were seen to complete.

    :meth:`observe` ``(trials_done, trials_total, now)`` per poll; a batch is a rise of trials_done.
    """

    def __init__(self, min_batches: int = 2):
        self.min_batches = min_batches
        self.start: tuple[float, int] | None = None   # (time, done) when this client first saw it run
        self.last: tuple[float, int] | None = None    # (time, done) of the latest rise
        self.batches = 0

    def observe(self, done: int, total: int, now: float) -> float | None:
        if self.start is None:
            self.start = self.last = (now, done)
            return None
        assert self.last is not None
        if done > self.last[1]:
            self.batches += 1
            self.last = (now, done)
        if self.batches < self.min_batches or done >= total:
            return None
        elapsed = self.last[0] - self.start[0]
        rate = (self.last[1] - self.start[1]) / elapsed if elapsed > 0 else 0.0
        if rate <= 0:
            return None
        return max(0.0, (total - done) / rate - (now - self.last[0]))


def eta_text(seconds: float | None) -> str:
    if seconds is None:
        return "ETA -:--"
    m, s = divmod(int(round(seconds)), 60)
    h, m = divmod(m, 60)
    return f"ETA {h}:{m:02d}:{s:02d}" if h else f"ETA {m}:{s:02d}"


class JobProgress:
    """A rich progress bar of one tuning job on ``console`` (stderr).  Use as a context manager;
    :meth:`update` with each polled job dict."""

    def __init__(self, console: Console, label: str = "tuning", clock: Callable[[], float] = time.monotonic):
        self.console, self.label, self.clock = console, label, clock
        self.eta = EtaEstimator()
        self.progress = Progress(TextColumn("[bold]{task.description}"), TextColumn("{task.fields[phase]}"),
                                 BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[eta]}"),
                                 TextColumn("{task.fields[best]}"), TimeElapsedColumn(), console=console)
        self.task_id: Any = None

    def __enter__(self) -> JobProgress:
        self.progress.start()
        return self

    def __exit__(self, *exc) -> None:
        self.progress.stop()

    def update(self, job: dict) -> None:
        done, total = int(job.get("trials_done") or 0), int(job.get("trials_total") or 0)
        eta = self.eta.observe(done, total, self.clock()) if job.get("state") == JobState.running.value else None
        errors = sum((job.get("errors") or {}).values())
        best = best_text(job) + (f"  errors {errors}" if errors else "")
        phase, eta_shown = phase_text(job), eta_text(eta) if job.get("state") == "running" else ""
        if self.task_id is None:
            self.task_id = self.progress.add_task(self.label, total=max(total, 1), completed=done, phase=phase,
                                                  eta=eta_shown, best=best)
        else:
            self.progress.update(self.task_id, total=max(total, 1), completed=done, phase=phase, eta=eta_shown,
                                 best=best)


def follow(poll: Callable[[], dict], console: Console, poll_s: float = 0.5, label: str = "tuning",
           stream: Callable[[], Iterable[dict]] | None = None,
           stream_errors: tuple[type[BaseException], ...] = ()) -> dict:
    """Show the progress of the job until it ends; returns its last state.

    stream : the job's dicts as it changes (``Client.job_updates``: GET /jobs/{id}/events), followed
        first and opened again when it closes before the end; when it fails with one of
        ``stream_errors`` (or closes having sent nothing), ``poll()`` every ``poll_s`` seconds instead.
    """
    with JobProgress(console, label) as bar:
        while stream is not None:
            got = False
            try:
                for job in stream():
                    got = True
                    bar.update(job)
                    if JobState(job["state"]) in ENDED_STATES:
                        return job
            except stream_errors as err:
                log.debug("the event stream failed (%s: %s); polling instead", type(err).__name__, err)
                break
            if not got:
                break
        while True:
            job = poll()
            bar.update(job)
            if JobState(job["state"]) in ENDED_STATES:
                return job
            time.sleep(poll_s)


# -- keeping worker output out of the terminal ------------------------------------------------

class ConsoleLogHandler(logging.Handler):
    """Prints records as ``LEVEL logger: message`` through a rich Console (above a live bar)."""

    def __init__(self, console: Console, level: int = logging.WARNING):
        super().__init__(level)
        self.console = console
        self.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.console.print(self.format(record), markup=False, highlight=False, soft_wrap=True)
        except Exception:  # noqa: BLE001 - logging must never raise into the caller
            self.handleError(record)


@contextlib.contextmanager
def log_to_console(console: Console, level: int = logging.WARNING) -> Iterator[None]:
    """While inside: the root logger's terminal handlers are removed and records at ``level`` and
    above are printed through ``console`` (above the live bar); restored on exit."""
    root = logging.getLogger()
    removed = [h for h in root.handlers if isinstance(h, logging.StreamHandler)
               and not isinstance(h, logging.FileHandler)]
    for h in removed:
        root.removeHandler(h)
    handler = ConsoleLogHandler(console, level)
    root.addHandler(handler)
    try:
        yield
    finally:
        root.removeHandler(handler)
        for h in removed:
            root.addHandler(h)


@contextlib.contextmanager
def worker_output_to(log_path: str | os.PathLike) -> Iterator[TextIO]:
    """Point this process's file descriptors 1 and 2 at ``log_path`` (appending) while inside, so
    that the worker processes started meanwhile (they inherit them) and any stray print write
    there, never into the terminal; yields a text stream on the terminal's stderr for the bar."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    log_fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    terminal = os.fdopen(os.dup(saved[1]), "w", buffering=1, encoding="utf-8", errors="replace")
    try:
        os.dup2(log_fd, 1)
        os.dup2(log_fd, 2)
        yield terminal
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in (*saved, log_fd):
            os.close(fd)
        terminal.close()


def stderr_console() -> Console:
    """The console of the progress bar when no redirection is needed: stderr."""
    return Console(stderr=True)
