"""WorkerSupervisor's orphan handling with real processes: a worker whose work-horse no longer
shows among its children when the supervisor looks (it was reparented: in the real case, the
worker was SIGKILLed between the supervisor's liveness check and its listing of children)."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import textwrap

import psutil

from workers.processes import WorkerSupervisor

# the "horse": a sleeper in its own session, as RQ's work-horse
_MIDDLE = textwrap.dedent("""
    import subprocess, sys
    horse = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True)
    print(horse.pid, flush=True)
    sys.stdin.readline()
""")
# the "worker": starts the middle process, which starts the horse and exits when told, so the
# horse is reparented away from the worker while the worker itself runs on
_WORKER = textwrap.dedent(f"""
    import subprocess, sys, time
    mid = subprocess.Popen([sys.executable, "-c", {_MIDDLE!r}], stdin=subprocess.PIPE,
                           stdout=subprocess.PIPE, text=True)
    print(mid.stdout.readline().strip(), flush=True)
    sys.stdin.readline()
    mid.stdin.write("\\n"); mid.stdin.flush(); mid.wait()
    print("reparented", flush=True)
    time.sleep(120)
""")


def test_a_dead_workers_horse_is_killed_though_the_last_look_missed_it(caplog):
    worker = subprocess.Popen([sys.executable, "-c", _WORKER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True, start_new_session=True)
    horse_pid = int(worker.stdout.readline())
    horse = psutil.Process(horse_pid)
    supervisor = WorkerSupervisor("unix:///nonexistent.sock", 1)  # never started: no thread, no Redis
    supervisor.procs[0] = worker
    try:
        supervisor._tick()  # the worker runs: its family now holds the horse
        assert horse in supervisor._family[0]
        worker.stdin.write("\n")
        worker.stdin.flush()
        assert worker.stdout.readline().strip() == "reparented"
        assert horse.is_running() and horse not in psutil.Process(worker.pid).children(recursive=True)
        supervisor._tick()  # a look that no longer sees the horse among the worker's children
        os.kill(worker.pid, signal.SIGKILL)
        worker.wait(timeout=30)
        with caplog.at_level(logging.WARNING, logger="workers.processes"):
            supervisor._tick()  # the worker is dead: what it ever had and still runs is killed
        assert not horse.is_running() or horse.status() == psutil.STATUS_ZOMBIE
        assert f"killed 1 orphaned process(es) of a dead worker: {horse_pid}" in caplog.text
        assert "worker 0 (pid" in caplog.text and "restarting in 1 s" in caplog.text
    finally:
        for proc in (worker, horse):
            try:
                proc.kill()
            except (OSError, psutil.Error):
                pass
        worker.wait(timeout=30)
