"""Worker processes for measurement: a small pool of ``python -m`` children with timeouts.

    parent --(function name, plain args)--> pipe --> child: import, call, reply
    parent <--("ok", value) | ("error", text)-- pipe <--
    child dies (segfault, abort, OOM kill) -> EOF         -> TaskOutcome("died", stderr tail)
    call passes its timeout_s               -> child killed -> TaskOutcome("timeout")
    a dead or killed child is replaced by a fresh one before the next task

The idea is TVM's ``PopenPoolExecutor`` (python/tvm/contrib/popen_pool.py): the
children are started with ``subprocess.Popen`` (``python -m scheduler_core.measure.popen_pool``),
not with ``multiprocessing``, so they never re-import the user's ``__main__`` script (a
tuning script without an ``if __name__ == "__main__"`` guard keeps working), they
never inherit the parent's threads (llvmlite, OpenMP) as a ``fork`` would, and a
crash in one of them only costs that task.

The children never see the service's credentials: their environment is the parent's
without ``REDIS_URL``, ``AUTOSCHED_API_TOKEN`` and any variable whose name contains
TOKEN, PASSWORD, SECRET or KEY (:func:`worker_environment`).  A pool may also give its
children resource limits (:class:`WorkerLimits`: no core files, an address-space
bound, a CPU-time bound per task), which each child sets on itself with
``resource.setrlimit`` before it imports anything.

Messages are pickles of plain values (str, int, float, lists, tuples, dicts) over
private pipes between this library's own processes; the function to call is named
by ``"module:function"`` and must live in ``scheduler_core``.  Nothing a user sent
over the service is ever unpickled here.  The runner's workers reply with a result's one
wire form, ``MeasureResult.to_json()`` (as the measurement queue does).
"""

from __future__ import annotations

import collections
import ctypes
import faulthandler
import importlib
import json
import math
import os
import resource
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any

STARTUP_TIMEOUT_S = 120.0   # a child must import and say "ready" within this many seconds
MAX_START_FAILURES = 3      # children that die while starting, in a row, before giving up
STDERR_TAIL_CHARS = 2000    # how much of a dead child's stderr goes into the error text
ORPHAN_POLL_S = 1.0         # how often a child checks that its parent still lives
_ALLOWED_PREFIXES = ("scheduler_core.", "cost_model.")  # the packages whose functions a child runs
SECRET_ENV_NAMES = ("REDIS_URL", "AUTOSCHED_API_TOKEN")   # never passed to a child
SECRET_ENV_WORDS = ("TOKEN", "PASSWORD", "SECRET", "KEY")  # nor any variable whose name holds one
LIMITS_ENV = "AUTOSCHED_WORKER_LIMITS"  # how a child learns its WorkerLimits (JSON)
# os.pathsep-separated paths a runner child hides from the programs it runs (the service's data
# directory and Redis socket): set by the service for its workers, read once by the child
ISOLATE_ENV = "AUTOSCHED_ISOLATE_PATHS"


def worker_environment(environ: dict | None = None) -> dict:
    """The environment of a worker process: ``environ`` (default ``os.environ``) without secrets.

    Drops ``REDIS_URL``, ``AUTOSCHED_API_TOKEN`` and every variable whose name contains
    TOKEN, PASSWORD, SECRET or KEY (case-insensitive), so that a measured program that
    reads its environment learns nothing of the service's credentials.
    """
    env = dict(os.environ if environ is None else environ)
    return {k: v for k, v in env.items()
            if k not in SECRET_ENV_NAMES and not any(w in k.upper() for w in SECRET_ENV_WORDS)}


@dataclass(frozen=True)
class WorkerLimits:
    """Resource limits a child sets on itself (``resource.setrlimit``; None = leave as is).

    core_bytes : RLIMIT_CORE, soft and hard (0: a crashing program leaves no core file)
    address_space_bytes : RLIMIT_AS, soft and hard: a program that allocates more gets
        NULL from malloc (or dies) instead of taking the machine's memory
    cpu_s_per_task : RLIMIT_CPU soft limit, re-armed before each task to the CPU seconds
        used so far plus this; a child past it gets SIGXCPU and dies (a backstop for the
        parent's wall-clock timeout: CPU time counts every thread of the child)
    """

    core_bytes: int | None = 0
    address_space_bytes: int | None = None
    cpu_s_per_task: float | None = None

    def to_json(self) -> str:
        return json.dumps([self.core_bytes, self.address_space_bytes, self.cpu_s_per_task])

    @classmethod
    def from_json(cls, text: str) -> WorkerLimits:
        core, space, cpu = json.loads(text)
        return cls(core, space, cpu)


@dataclass(frozen=True)
class TaskOutcome:
    """What became of one task.

    status: ``"ok"`` (value is the function's return value), ``"error"`` (the
    function raised; value is the formatted exception), ``"timeout"`` (the child was
    killed after timeout_s; value is a message) or ``"died"`` (the child exited
    during the call; value says how, with the tail of its stderr).
    wall_s: seconds from handing the task to a child to its outcome.
    """

    status: str
    value: Any
    wall_s: float


class _Worker:
    """One child process, its two pipe ends and its stderr file."""

    def __init__(self, preload: Sequence[str], limits: WorkerLimits | None = None):
        parent_r, child_w = os.pipe()
        child_r, parent_w = os.pipe()
        self.stderr = tempfile.TemporaryFile(prefix="autosched_worker_")
        env = worker_environment()
        env.pop(LIMITS_ENV, None)
        if limits is not None:
            env[LIMITS_ENV] = limits.to_json()
            if ISOLATE_ENV in env:
                # a user namespace needs a single-threaded process, and OpenBLAS starts its threads
                # when numpy is imported (before the child can isolate itself)
                env.setdefault("OPENBLAS_NUM_THREADS", "1")
        root = str(Path(__file__).resolve().parent.parent)
        env["PYTHONPATH"] = os.pathsep.join([root] + [p for p in [env.get("PYTHONPATH", "")] if p])
        cmd = [sys.executable, "-m", "scheduler_core.measure.popen_pool", str(child_r), str(child_w), str(os.getpid()),
               *preload]
        try:
            self.proc = subprocess.Popen(cmd, pass_fds=(child_r, child_w), stdin=subprocess.DEVNULL,
                                         stdout=subprocess.DEVNULL, stderr=self.stderr, env=env)
        except BaseException:
            for fd in (parent_r, parent_w):
                os.close(fd)
            self.stderr.close()
            raise
        finally:
            os.close(child_r)
            os.close(child_w)
        self.recv_conn = Connection(parent_r, writable=False)
        self.send_conn = Connection(parent_w, readable=False)
        self.ready = False
        self.tasks_done = 0
        self.task: tuple | None = None  # (index, start time, deadline) while busy

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self.close_files()

    def retire(self) -> None:
        """Ask an idle child to exit (EOF on its input) and reap it."""
        self.send_conn.close()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.close_files()

    def close_files(self) -> None:
        for f in (self.recv_conn, self.send_conn, self.stderr):
            try:
                f.close()
            except OSError:
                pass

    def death_message(self) -> str:
        """How the child ended (exit code or signal name) and the tail of its stderr."""
        try:
            code = self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
        if code < 0:
            try:
                how = f"killed by {signal.Signals(-code).name}"
            except ValueError:
                how = f"killed by signal {-code}"
        else:
            how = f"exited with code {code}"
        try:
            self.stderr.seek(0, os.SEEK_END)
            size = self.stderr.tell()
            self.stderr.seek(max(0, size - STDERR_TAIL_CHARS))
            tail = self.stderr.read().decode("utf-8", "replace").strip()
        except (OSError, ValueError):
            tail = ""
        return f"worker process {self.proc.pid} {how}" + (f"; stderr:\n{tail}" if tail else "")


class PopenPool:
    """Up to ``n_workers`` child processes that run named functions with a timeout per call.

    Parameters
    ----------
    n_workers : int, how many children run tasks at once
    preload : module names the children import before they report ready (so that
        import time never counts against a task's timeout)
    max_tasks_per_worker : int or None, replace a child after this many tasks
        (bounds what loaded libraries and caches can accumulate); None = never
    limits : WorkerLimits or None, resource limits each child sets on itself

    Children never inherit secrets from the environment (:func:`worker_environment`).

    Children start lazily on the first :meth:`map` and are kept between calls;
    :meth:`close` (or garbage collection, or interpreter exit) ends them.
    """

    def __init__(self, n_workers: int, preload: Sequence[str] = (), max_tasks_per_worker: int | None = None,
                 limits: WorkerLimits | None = None):
        if int(n_workers) < 1:
            raise ValueError(f"n_workers must be >= 1, got {n_workers}")
        self.n_workers = int(n_workers)
        self.preload = tuple(preload)
        self.limits = limits
        self.max_tasks_per_worker = max_tasks_per_worker
        self._workers: list[_Worker] = []
        self._finalizer = weakref.finalize(self, _kill_all, self._workers)

    # -- public ---------------------------------------------------------------
    def map(self, func: str, arg_tuples: Sequence[tuple], timeout_s: float) -> list[TaskOutcome]:
        """Run ``func(*args)`` for each ``args`` in ``arg_tuples`` on the children.

        func: ``"scheduler_core.module:function"``.  timeout_s: seconds each call
        may take once a ready child has it.  Returns one TaskOutcome per task, in
        order.  Raises RuntimeError only when children keep dying while starting
        (e.g. the package cannot be imported in a fresh interpreter).
        """
        _check_func_name(func)
        pending = collections.deque(range(len(arg_tuples)))
        outcomes: list = [None] * len(arg_tuples)
        start_failures = 0
        while pending or any(w.task for w in self._workers):
            self._fill(len(pending))
            for w in self._workers:
                if pending and w.ready and w.task is None:
                    index = pending.popleft()
                    now = time.perf_counter()
                    w.task = (index, now, now + float(timeout_s))
                    try:
                        w.send_conn.send((func, tuple(arg_tuples[index])))
                    except OSError:
                        pass  # the child is gone; its EOF is picked up below
            start_failures = self._wait_once(outcomes, start_failures)
        return outcomes

    def close(self) -> None:
        """End every child (idle ones exit on EOF, busy ones are killed)."""
        _kill_all(self._workers)

    def __enter__(self) -> PopenPool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- internals ----------------------------------------------------------
    def _fill(self, n_pending: int) -> None:
        """Start children until there are enough for the pending tasks (at most n_workers)."""
        idle_or_starting = sum(1 for w in self._workers if w.task is None)
        while len(self._workers) < self.n_workers and idle_or_starting < n_pending:
            self._workers.append(_Worker(self.preload, self.limits))
            idle_or_starting += 1

    def _wait_once(self, outcomes: list, start_failures: int) -> int:
        """Wait for one round of messages, deaths or deadlines; returns the start-failure count."""
        now = time.perf_counter()
        deadlines = [w.task[2] for w in self._workers if w.task]
        if any(not w.ready for w in self._workers):
            deadlines.append(now + STARTUP_TIMEOUT_S)
        timeout = max(0.0, min(deadlines) - now) if deadlines else None
        by_conn = {w.recv_conn: w for w in self._workers if w.task or not w.ready}
        for conn in wait(list(by_conn), timeout):
            assert isinstance(conn, Connection)  # wait() returns some of the objects it was given
            w = by_conn[conn]
            try:
                msg = conn.recv()
            except (EOFError, OSError):
                message = w.death_message()
                if w.task is None:
                    start_failures += 1
                    if start_failures >= MAX_START_FAILURES:
                        self._drop(w)
                        raise RuntimeError(f"measurement workers fail to start: {message}") from None
                else:
                    self._finish(w, outcomes, "died", message)
                self._drop(w)
                continue
            if not w.ready:
                w.ready, start_failures = True, 0
            else:
                status, value = msg
                self._finish(w, outcomes, status, value)
                self._maybe_recycle(w)
        now = time.perf_counter()
        for w in list(self._workers):
            if w.task and now >= w.task[2]:
                elapsed = now - w.task[1]
                self._finish(w, outcomes, "timeout", f"killed after {elapsed:.3g} s (timeout)")
                self._drop(w)
        return start_failures

    def _finish(self, w: _Worker, outcomes: list, status: str, value: Any) -> None:
        assert w.task is not None  # only a busy worker finishes a task
        index, start, _ = w.task
        outcomes[index] = TaskOutcome(status, value, time.perf_counter() - start)
        w.task = None
        w.tasks_done += 1

    def _maybe_recycle(self, w: _Worker) -> None:
        if self.max_tasks_per_worker is not None and w.tasks_done >= self.max_tasks_per_worker:
            self._workers.remove(w)
            w.retire()

    def _drop(self, w: _Worker) -> None:
        self._workers.remove(w)
        w.kill()


def _kill_all(workers: list) -> None:
    while workers:
        w = workers.pop()
        if w.task is None and w.ready:
            w.retire()
        else:
            w.kill()


def _check_func_name(func: str) -> None:
    module, sep, name = func.partition(":")
    if not sep or not name or not module.startswith(_ALLOWED_PREFIXES):
        raise ValueError(f"worker functions are named 'scheduler_core.<module>:<function>' "
                         f"or 'cost_model.<module>:<function>', got {func!r}")


# ---------------------------------------------------------------------------
# the child
# ---------------------------------------------------------------------------

def _resolve(func: str, cache: dict):
    if func not in cache:
        _check_func_name(func)
        module, _, name = func.partition(":")
        cache[func] = getattr(importlib.import_module(module), name)
    return cache[func]


def _exit_when_orphaned(parent_pid: int) -> None:
    """Watchdog thread: end this child when its parent is gone (e.g. killed while a kernel hangs).

    Polling ``getppid`` rather than ``PR_SET_PDEATHSIG``, which would fire when the
    parent's *thread* that started the child exits.  Compiled code runs through
    ctypes with the GIL released, so this thread also runs during a hung kernel.
    """
    while os.getppid() == parent_pid:
        time.sleep(ORPHAN_POLL_S)
    os._exit(3)


def _set_limit(which: int, value: int) -> None:
    """Soft and hard limit ``which`` to ``value`` (never above the hard limit already there)."""
    _, hard = resource.getrlimit(which)
    if hard != resource.RLIM_INFINITY:
        value = min(value, hard)
    resource.setrlimit(which, (value, value))


def apply_limits(limits: WorkerLimits) -> None:
    """Set the process-wide limits of ``limits`` on this process (RLIMIT_CORE, RLIMIT_AS)."""
    if limits.core_bytes is not None:
        _set_limit(resource.RLIMIT_CORE, int(limits.core_bytes))
    if limits.address_space_bytes is not None:
        _set_limit(resource.RLIMIT_AS, int(limits.address_space_bytes))


def arm_cpu_limit(cpu_s: float) -> None:
    """RLIMIT_CPU soft limit: the CPU seconds this process used so far plus ``cpu_s``."""
    use = resource.getrusage(resource.RUSAGE_SELF)
    soft = math.ceil(use.ru_utime + use.ru_stime + float(cpu_s))
    _, hard = resource.getrlimit(resource.RLIMIT_CPU)
    if hard != resource.RLIM_INFINITY:
        soft = min(soft, hard)
    resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))


_CAP_VERSION_3 = 0x20080522  # _LINUX_CAPABILITY_VERSION_3 (linux/capability.h): two 32-bit words


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def drop_capabilities() -> bool:
    """Clear this process's capability sets (``capset(2)``; Linux).  A child of a service that
    runs as root keeps uid 0 but loses what makes root more than the owner of its files: it can
    no longer read the environment of a non-dumpable process (``CAP_SYS_PTRACE``; the API
    token of ``autosched serve``) nor files it does not own (``CAP_DAC_OVERRIDE``).  Returns
    whether the sets are now empty (False off Linux or where capset is unavailable)."""
    if not sys.platform.startswith("linux"):
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    capset = getattr(libc, "capset", None)
    if capset is None:
        return False
    return capset(ctypes.byref(_CapHeader(_CAP_VERSION_3, 0)), (_CapData * 2)()) == 0


_CLONE_NEWNS, _CLONE_NEWUSER, _CLONE_NEWNET = 0x00020000, 0x10000000, 0x40000000
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC = 1, 2, 4, 8
_MS_BIND, _MS_REC, _MS_PRIVATE = 0x1000, 0x4000, 0x40000
ISOLATION: dict = {}  # what isolate_from_service did in this process ("namespaces", "hidden", "error")


def isolate_from_service(paths: Sequence[str]) -> bool:
    """Cut this process off from the service that measures through it (Linux namespaces).

    The process enters a new network namespace (no interface but a down loopback: no TCP
    Redis, no network) and a new mount namespace, private from the host's, in which each of
    ``paths`` is covered: a directory by an empty read-only tmpfs, a file (a unix socket) by
    ``/dev/null``, so the service's data directory (its Redis socket, its AOF) is not there to
    open or connect to.  A process that is not root first enters a new user namespace in which
    it is root (mapped to its own uid), which unprivileged users may do where the kernel allows
    it.  Returns whether it worked; what happened is in :data:`ISOLATION` (the reason when not).
    The idea is a sandbox's (bubblewrap, nsjail): namespaces, then mounts over what must not be seen.
    """
    ISOLATION.clear()
    if not sys.platform.startswith("linux"):
        ISOLATION["error"] = "namespaces are Linux's"
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    uid, gid = os.geteuid(), os.getegid()

    def fail(what: str) -> bool:
        ISOLATION["error"] = f"{what}: {os.strerror(ctypes.get_errno())}"
        return False

    flags = _CLONE_NEWNS | _CLONE_NEWNET | (0 if uid == 0 else _CLONE_NEWUSER)
    if libc.unshare(flags) != 0:
        threads = threading.active_count() if uid == 0 else len(os.listdir("/proc/self/task"))
        if uid != 0 and threads > 1:
            return fail(f"unshare (a user namespace needs one thread; this process has {threads})")
        return fail("unshare")
    if uid != 0:
        try:
            for name, text in (("setgroups", "deny"), ("uid_map", f"0 {uid} 1"), ("gid_map", f"0 {gid} 1")):
                with open(f"/proc/self/{name}", "w") as f:
                    f.write(text)
        except OSError as err:
            ISOLATION["error"] = f"user namespace maps: {err}"
            return False
    if libc.mount(b"none", b"/", None, _MS_REC | _MS_PRIVATE, None) != 0:
        return fail("making / private")
    hidden = []
    for path in paths:
        if not path or not os.path.exists(path):
            continue
        if os.path.isdir(path):
            ok = libc.mount(b"tmpfs", os.fsencode(path), b"tmpfs", _MS_RDONLY | _MS_NOSUID | _MS_NODEV | _MS_NOEXEC,
                            b"size=4k,mode=0500") == 0
        else:
            ok = libc.mount(b"/dev/null", os.fsencode(path), None, _MS_BIND, None) == 0
        if not ok:
            return fail(f"covering {path}")
        hidden.append(path)
    ISOLATION.update(namespaces="net+mount" + ("" if uid == 0 else "+user"), hidden=hidden)
    return True


def child_main(read_fd: int, write_fd: int, parent_pid: int, preload: Sequence[str]) -> None:
    """The loop of a child: set its limits, import ``preload``, say ready, then serve calls until EOF.
    A child with limits (the runner's, where measured programs run) also drops its capabilities
    when it runs as root (:func:`drop_capabilities`)."""
    limits_text = os.environ.pop(LIMITS_ENV, "")
    limits = WorkerLimits.from_json(limits_text) if limits_text else None
    hide = os.environ.pop(ISOLATE_ENV, None)
    if limits is not None:
        apply_limits(limits)
        if hide is not None and not isolate_from_service(hide.split(os.pathsep)):
            print(f"autosched runner: not isolated from the service ({ISOLATION['error']})", file=sys.stderr)
        if os.geteuid() == 0:
            drop_capabilities()
    faulthandler.enable()  # a segfault leaves a Python traceback in the stderr file
    threading.Thread(target=_exit_when_orphaned, args=(parent_pid,), daemon=True).start()
    recv_conn = Connection(read_fd, writable=False)
    send_conn = Connection(write_fd, readable=False)
    for module in preload:
        importlib.import_module(module)
    send_conn.send(("ready", os.getpid()))
    functions: dict = {}
    while True:
        try:
            func, args = recv_conn.recv()
        except (EOFError, OSError):  # the pool closed, or its owner died
            # No interpreter teardown: freeing a worker's caches (features, lowered programs)
            # took seconds of CPU after its job had ended, beside whatever runs next.
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(0)
        if limits is not None and limits.cpu_s_per_task is not None:
            arm_cpu_limit(limits.cpu_s_per_task)
        try:
            reply = ("ok", _resolve(func, functions)(*args))
        except Exception as err:  # noqa: BLE001 - every failure goes back as text
            tb = "".join(traceback.format_exception(type(err), err, err.__traceback__)[-6:])
            reply = ("error", f"{type(err).__name__}: {err}\n{tb}")
        send_conn.send(reply)


if __name__ == "__main__":
    child_main(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:])
