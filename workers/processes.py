"""RQ worker processes on one Redis: how the command line and the tests start them.

    start_worker_process(conn, queues) --> ``python -m rq.cli worker --url <conn's URL>
        --serializer json --worker-class workers.processes.FileLoggingWorker <queues>``
        in its own process group (stop it with os.killpg)

Workers run RQ's own command line with the JSON serializer (job arguments are ids and JSON,
never pickles); any process that can reach the Redis URL, on any machine, can attach the same
way.  Their worker class, :class:`FileLoggingWorker`, logs to ``<data dir>/logs/worker.log``
(workers.logging_setup), never to the terminal of the command that started it: the data
directory is ``data_dir``, else that of the embedded Redis this process uses, else
$AUTOSCHED_DATA_DIR / the default; the level is $AUTOSCHED_LOG_LEVEL (default INFO).

    WorkerSupervisor(url, n).start()  --> n workers kept running by a thread (restart with
        backoff, interrupted jobs requeued, the embedded Redis restarted); .stop()
    stop_worker_processes(procs)      --> warm shutdown, then cold, then SIGKILL
    recover_interrupted_jobs(conn)    --> jobs left *started* by a dead worker, back on their queue
    hold_serve_lock(data_dir), Orphans.find(conn, data_dir).stop()
                                      --> what a serve killed with SIGKILL left running on its data
                                          directory (its workers, its embedded Redis), adopted by
                                          the next serve and stopped with it
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import IO

import psutil
import redis
from rq import Queue, Worker
from rq.exceptions import NoSuchJobError
from rq.executions import Execution
from rq.job import Job, JobStatus
from rq.registry import StartedJobRegistry
from rq.serializers import JSONSerializer

from cost_model.lgbm_model import preload_lightgbm
from scheduler_core.measure.popen_pool import ISOLATE_ENV, worker_environment

from .job_state import JobState
from .logging_setup import configure_worker_logging
from .queues import TUNE_QUEUE, requeue_job, worker_alive
from .redis_conn import (
    DATA_DIR_ENV,
    connection_url,
    embedded_alive,
    embedded_data_dir,
    resolve_data_dir,
    restart_embedded,
    socket_path,
    started_embedded,
)
from .store import RedisStore

log = logging.getLogger(__name__)

LOG_LEVEL_ENV = "AUTOSCHED_LOG_LEVEL"
WORKER_CLASS = "workers.processes.FileLoggingWorker"


class FileLoggingWorker(Worker):
    """RQ's Worker, logging to ``<data dir>/logs/worker.log`` (``configure_worker_logging`` of
    ``resolve_data_dir()``, at $AUTOSCHED_LOG_LEVEL, default INFO) before it starts: RQ's own lines
    and those of the jobs its work-horses run go to the file, none to the terminal."""

    def __init__(self, *args, **kwargs):
        make_non_dumpable()  # its Redis URL and its jobs' state: not for the programs it measures
        configure_worker_logging(resolve_data_dir(), os.environ.get(LOG_LEVEL_ENV) or "INFO")
        preload_lightgbm()  # each job's work-horse is a fork of this process: the import is paid once
        super().__init__(*args, **kwargs)


def worker_command(url: str, queues: Sequence[str] = (TUNE_QUEUE,), burst: bool = False) -> list[str]:
    """The argv of an RQ worker on ``url`` listening to ``queues`` (JSON serializer), logging to a file."""
    cmd = [sys.executable, "-m", "rq.cli", "worker", "--url", url, "--serializer", "json",
           "--worker-class", WORKER_CLASS]
    if burst:
        cmd.append("--burst")
    return cmd + list(queues)


PR_SET_DUMPABLE = 4  # prctl option (linux/prctl.h)


def make_non_dumpable() -> bool:
    """Mark this process non-dumpable (``prctl(PR_SET_DUMPABLE, 0)``; Linux): other processes of
    the same user, such as a measured program, can no longer read its ``/proc/<pid>/environ``
    (where the API token of ``autosched serve`` lives) or attach to it, and it leaves no core
    file.  Children started with exec are dumpable again; forked ones (RQ's work-horses) are
    not.  Returns whether it took effect (False off Linux)."""
    if not sys.platform.startswith("linux"):
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    return libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) == 0


def worker_env(data_dir: str | os.PathLike | None = None) -> dict[str, str]:
    """The environment of a worker process: this one's without secrets (the API token and every
    variable named like a token, password, secret or key: ``popen_pool.worker_environment``; a
    worker needs none of them, and the programs it measures run below it), ``REDIS_URL`` kept,
    with $AUTOSCHED_DATA_DIR set to ``data_dir``, else to the data directory of this process's
    embedded Redis (when it uses one), so that the worker logs under ``<data dir>/logs``."""
    env = worker_environment()
    if "REDIS_URL" in os.environ:
        env["REDIS_URL"] = os.environ["REDIS_URL"]
    chosen = data_dir if data_dir is not None else embedded_data_dir()
    if chosen is not None:
        env[DATA_DIR_ENV] = resolve_data_dir(chosen)
    env[ISOLATE_ENV] = os.pathsep.join(service_paths(env.get(DATA_DIR_ENV), env.get("REDIS_URL")))
    return env


def service_paths(data_dir: str | None, redis_url: str | None = None) -> list[str]:
    """What the programs a worker measures must not reach: the data directory (its Redis socket,
    AOF, logs), the embedded Redis socket when it lives elsewhere, and the socket of a
    ``unix://`` REDIS_URL.  The runner's child covers them (``popen_pool.isolate_from_service``,
    which also takes the network away, so a TCP Redis is out of reach too)."""
    out = []
    if data_dir:
        out += [data_dir, socket_path(data_dir)]
    if redis_url and redis_url.startswith("unix://"):
        out.append(redis_url[len("unix://"):].split("?", 1)[0])
    return list(dict.fromkeys(out))


def start_worker_process(conn: redis.Redis, queues: Sequence[str] = (TUNE_QUEUE,),
                         burst: bool = True, data_dir: str | os.PathLike | None = None) -> subprocess.Popen:
    """A child RQ worker on ``conn``'s server (embedded or not), in its own process group,
    so that it and its RQ work-horse can be stopped together (``os.killpg``).

    burst : bool, exit when the queues are empty
    data_dir : where its log goes (``<data_dir>/logs/worker.log``; see :func:`worker_env`)
    """
    return subprocess.Popen(worker_command(connection_url(conn), queues, burst), start_new_session=True,
                            env=worker_env(data_dir))


def stop_worker_processes(procs: Sequence[subprocess.Popen], warm_s: float = 10.0, cold_s: float = 15.0) -> None:
    """Stop RQ worker processes: SIGTERM (RQ's warm shutdown: an idle worker exits, a busy
    one finishes its job), after ``warm_s`` seconds a second SIGTERM to those still running
    (RQ's cold shutdown: the worker kills its work-horse and exits; the job stays *started*
    in RQ's StartedJobRegistry, where :func:`recover_interrupted_jobs` finds it), and after
    ``cold_s`` more seconds SIGKILL to what is left, work-horses included."""
    running = [p for p in procs if p.poll() is None]
    handles = []
    for p in running:
        with contextlib.suppress(psutil.Error):
            handles.append(psutil.Process(p.pid))
    stop_rq_workers(handles, warm_s, cold_s)
    for p in running:
        with contextlib.suppress(subprocess.TimeoutExpired):
            p.wait(timeout=10)


def stop_rq_workers(procs: Sequence[psutil.Process], warm_s: float = 10.0, cold_s: float = 15.0) -> None:
    """:func:`stop_worker_processes` for worker processes known by pid (children or not)."""
    procs = list(_still_running(set(procs)))
    family = {p.pid: _descendants(p.pid) for p in procs}
    for p in procs:
        _signal(p.pid, signal.SIGTERM)
    busy = psutil.wait_procs(procs, timeout=warm_s)[1]
    if busy:
        time.sleep(max(0.0, 1.1 - warm_s))  # RQ ignores a second signal within a second
        for p in busy:
            family[p.pid] |= _descendants(p.pid)
            _signal(p.pid, signal.SIGTERM)
        busy = psutil.wait_procs(busy, timeout=cold_s)[1]
    _kill_orphans(set(busy).union(*family.values()))  # workers left, and work-horses left behind


def _descendants(pid: int) -> set[psutil.Process]:
    try:
        return set(psutil.Process(pid).children(recursive=True))
    except psutil.Error:
        return set()


def _still_running(family: set[psutil.Process]) -> set[psutil.Process]:
    """The members of ``family`` still running.  A worker's family is the union of what it ever
    had and still runs: a snapshot taken while the worker dies (killed between its check and
    the listing of its children) sees no children, as its work-horse has already been
    reparented, so a snapshot alone could forget the horse."""
    alive = set()
    for proc in family:
        with contextlib.suppress(psutil.Error):
            if proc.is_running():
                alive.add(proc)
    return alive


def _kill_orphans(family: set[psutil.Process], timeout_s: float = 5.0) -> None:
    """SIGKILL the processes of ``family`` still running (psutil checks each is the same process,
    not a reused pid) and wait for them."""
    alive = []
    for proc in family:
        with contextlib.suppress(psutil.Error):
            if proc.is_running():
                proc.kill()
                alive.append(proc)
    if alive:
        psutil.wait_procs(alive, timeout=timeout_s)
        log.warning("killed %d orphaned process(es) of a dead worker: %s", len(alive),
                    ", ".join(str(p.pid) for p in alive))


def _signal(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)


def recover_interrupted_jobs(conn: redis.Redis, queues: Sequence[str] = (TUNE_QUEUE,)) -> list[str]:
    """Put back on their queue the jobs that a dead worker left *started* (a stopped
    ``serve``, a killed worker or machine); returns their ids.

    RQ itself retries such a job only once its heartbeat expires and a worker cleans the
    registries (up to ten minutes later), and spends one of its retries on it; here it
    goes back to the front of its queue at once, its retries untouched.  A tune job
    continues from the records already in Redis (workers.jobs.tune_job).

    Also recovered: a job the worker took off its queue and registered as started but
    whose work-horse never marked it started (the worker died in between).  Its status
    still says *queued* though no queue holds it, and RQ's registry cleanup skips it
    (it retries only jobs whose status is *started*), so without this it is lost.
    """
    recovered, store = [], RedisStore(conn)
    for name in queues:
        registry = StartedJobRegistry(name, connection=conn, serializer=JSONSerializer)
        queue = Queue(name, connection=conn, serializer=JSONSerializer)
        for job_id, execution_id in registry.get_job_and_execution_ids(cleanup=False):
            try:
                job = Job.fetch(job_id, connection=conn, serializer=JSONSerializer)
            except NoSuchJobError:
                continue
            status = job.get_status()
            if status not in (JobStatus.STARTED, JobStatus.QUEUED) or job_id in recovered:
                continue
            if status == JobStatus.QUEUED and job_id in queue.get_job_ids():
                continue
            worker = job.worker_name if status == JobStatus.STARTED else ""
            if not worker and execution_id:
                with contextlib.suppress(ValueError):  # its hash expired with the heartbeat
                    worker = Execution.fetch(execution_id, job_id, connection=conn).worker_name
            if worker_alive(conn, worker):
                continue
            requeue_job(conn, queue, job)
            if store.get_job(job_id) is not None:  # a tune job: its hash says queued again, no phase
                store.update_job(job_id, phase="", phase_since="")
                store.set_job_state(job_id, JobState.queued)
            recovered.append(job_id)
    return recovered


class WorkerSupervisor:
    """``count`` RQ worker processes on ``url``, kept running by a background thread.

    A worker that exits is started again after a backoff (1, 2, 4 ... up to
    ``max_backoff_s`` seconds; reset once a worker ran ``stable_s`` seconds), after its
    interrupted job is put back on the queue (:func:`recover_interrupted_jobs`).  RQ runs each
    job in a work-horse in its own session, which outlives a killed worker: the supervisor
    remembers every worker's descendants (each ``poll_s``, keeping those seen before that still
    run) and SIGKILLs those of a dead one before its job is requeued, so the job never runs
    twice at once.  With
    ``supervise_redis``, the embedded Redis this process started is restarted when it
    stops answering (it reloads its AOF).  :meth:`stop` stops the thread, then the workers
    (:func:`stop_worker_processes`).  The workers log to ``<data_dir>/logs/worker.log``
    (:func:`worker_env`).
    """

    def __init__(self, url: str, count: int, queues: Sequence[str] = (TUNE_QUEUE,),
                 supervise_redis: bool = False, poll_s: float = 0.5, max_backoff_s: float = 30.0,
                 stable_s: float = 60.0, data_dir: str | os.PathLike | None = None):
        self.url, self.count, self.queues = url, count, tuple(queues)
        self.env = worker_env(data_dir)
        self.supervise_redis, self.poll_s = supervise_redis, poll_s
        self.max_backoff_s, self.stable_s = max_backoff_s, stable_s
        self.procs: list[subprocess.Popen | None] = [None] * count
        self.restarts = 0
        self._started_at = [0.0] * count
        self._failures = [0] * count
        self._next_start = [0.0] * count
        self._family: list[set[psutil.Process]] = [set() for _ in range(count)]
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> WorkerSupervisor:
        """Requeue jobs of dead workers, start the workers and the supervising thread."""
        self._recover()
        with self._lock:
            for i in range(self.count):
                self._start(i)
        self._thread = threading.Thread(target=self._run, name="autosched-supervisor", daemon=True)
        self._thread.start()
        return self

    def _start(self, i: int) -> None:
        self.procs[i] = subprocess.Popen(worker_command(self.url, self.queues, burst=False),
                                         start_new_session=True, env=self.env)
        self._started_at[i] = time.monotonic()

    def _recover(self) -> None:
        conn = redis.Redis.from_url(self.url)
        try:
            for job_id in recover_interrupted_jobs(conn, self.queues):
                log.warning("requeued job %s, interrupted with its worker", job_id)
        except redis.exceptions.RedisError as err:
            log.warning("could not check for interrupted jobs: %s", err)
        finally:
            conn.close()

    def _run(self) -> None:
        while not self._stop.wait(self.poll_s):
            try:
                self._tick()
            except Exception:  # noqa: BLE001 - the supervisor must keep running
                log.exception("worker supervisor")

    def _tick(self) -> None:
        if self.supervise_redis and started_embedded() and not embedded_alive():
            log.warning("the embedded Redis stopped answering; restarting it")
            restart_embedded()
        now = time.monotonic()
        due = []
        with self._lock:
            for i, p in enumerate(self.procs):
                if p is None:
                    continue
                if p.poll() is None:  # alive: remember its work-horse (RQ starts it in its own session)
                    self._family[i] = _still_running(self._family[i]) | _descendants(p.pid)
                    continue
                if self._family[i]:  # dead: its orphaned work-horse must not run the job beside the retry
                    _kill_orphans(self._family[i])
                    self._family[i] = set()
                if self._next_start[i] == 0.0:  # just noticed: schedule the restart
                    if now - self._started_at[i] >= self.stable_s:
                        self._failures[i] = 0
                    delay = min(self.max_backoff_s, 2.0 ** self._failures[i])
                    self._failures[i] += 1
                    self._next_start[i] = now + delay
                    log.warning("worker %d (pid %d) exited with %s; restarting in %.0f s", i, p.pid,
                                p.returncode, delay)
                elif now >= self._next_start[i]:
                    due.append(i)
        if due:
            self._recover()
        with self._lock:
            for i in due:
                if self._stop.is_set():
                    return
                self._next_start[i] = 0.0
                self._start(i)
                self.restarts += 1

    def stop(self, warm_s: float = 10.0, cold_s: float = 15.0) -> None:
        """Stop supervising, then stop the workers (warm, then cold shutdown, then SIGKILL)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=60)
        with self._lock:
            procs = [p for p in self.procs if p is not None]
        stop_worker_processes(procs, warm_s, cold_s)


SERVE_LOCK_NAME = "serve.lock"


def hold_serve_lock(data_dir: str | os.PathLike) -> IO | None:
    """Take ``<data_dir>/serve.lock`` (an exclusive ``flock``) for the life of this process.

    Returns the open file (keep a reference: closing it releases the lock), or None when another
    live process holds it (another ``serve`` on the same data directory).  The kernel releases
    the lock when its holder dies, SIGKILL included, so a serve that gets it knows that whatever
    still runs on the directory was left by a serve that is gone.
    """
    os.makedirs(data_dir, mode=0o700, exist_ok=True)
    f = open(os.path.join(data_dir, SERVE_LOCK_NAME), "a")  # noqa: SIM115 - held until exit
    try:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        f.close()
        return None
    return f


@dataclass
class Orphans:
    """What a dead ``serve`` left running on its data directory: its RQ worker processes (the
    ``FileLoggingWorker`` workers registered in that Redis on this host) and the embedded
    redis-server on the directory's socket.  The next serve on the directory (holding
    :func:`hold_serve_lock`) adopts them: they keep working, and :meth:`stop` stops them with it."""

    redis_server: psutil.Process | None = None
    workers: list[psutil.Process] = field(default_factory=list)

    @classmethod
    def find(cls, conn: redis.Redis, data_dir: str | os.PathLike) -> Orphans:
        """The orphans on ``conn`` (the embedded server of ``data_dir``); call it before starting
        workers of one's own.  Unreadable processes are skipped."""
        out = cls()
        host = socket.gethostname()
        for w in Worker.all(connection=conn):
            if w.hostname != host or not w.pid or w.pid == os.getpid():
                continue
            with contextlib.suppress(psutil.Error):
                proc = psutil.Process(w.pid)
                if WORKER_CLASS in proc.cmdline():
                    out.workers.append(proc)
        with contextlib.suppress(psutil.Error, redis.exceptions.RedisError, TypeError, ValueError):
            proc = psutil.Process(int(conn.info("server")["process_id"]))
            if any(socket_path(data_dir) in arg for arg in proc.cmdline()):
                out.redis_server = proc
        return out

    def __bool__(self) -> bool:
        return self.redis_server is not None or bool(self.workers)

    def describe(self) -> str:
        parts = [f"{len(self.workers)} worker(s) (pid {', '.join(str(p.pid) for p in self.workers)})"] \
            if self.workers else []
        if self.redis_server is not None:
            parts.append(f"the embedded Redis (pid {self.redis_server.pid})")
        return " and ".join(parts)

    def stop(self, warm_s: float = 10.0, cold_s: float = 15.0, redis_timeout_s: float = 10.0) -> None:
        """Stop the workers (:func:`stop_rq_workers`: warm, cold, then SIGKILL with their
        work-horses), then the Redis (SIGTERM: it saves and flushes its AOF; SIGKILL after
        ``redis_timeout_s``)."""
        stop_rq_workers(self.workers, warm_s, cold_s)
        if self.redis_server is not None:
            with contextlib.suppress(psutil.Error):
                self.redis_server.terminate()
                if psutil.wait_procs([self.redis_server], timeout=redis_timeout_s)[1]:
                    self.redis_server.kill()
