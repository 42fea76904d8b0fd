"""``autosched tune`` through the queue path on the embedded Redis, in a child process."""

import subprocess
import sys
from pathlib import Path

import pytest

import scheduler_core as sc
from tests.workloads import matmul_add

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.integration  # the embedded Redis and RQ worker processes, in a child


# "local" is the path tests/api/test_cli_tune.py drives end to end on every run: slow tier here
@pytest.mark.parametrize("measure", [pytest.param("local", marks=pytest.mark.slow), "queue"])
def test_tune_command_runs_the_queue_path_and_writes_the_best(tmp_path, measure):
    wl = tmp_path / "mm.json"
    wl.write_text(sc.ComputeDAG(matmul_add(32, 32, 32)).to_json())
    out = tmp_path / "out"
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    res = subprocess.run([sys.executable, "-m", "api.cli", "tune", str(wl), "--trials", "4",
                          "--per-round", "2", "--population", "32", "--out", str(out), "--measure", measure,
                          "--no-compare"],  # the last line's comparison: tests/api/test_cli_tune.py
                         capture_output=True, text=True, timeout=600, cwd=tmp_path, env=env)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "GFLOP/s" in res.stdout and "after 4 trials" in res.stdout
    code = (out / "best_schedule.py").read_text()
    assert "s[matmul]" in code or "s[out]" in code
    assert (out / "best.so").stat().st_size > 0 and "default_function" in (out / "best.h").read_text()


@pytest.mark.slow  # the same WorkerSupervisor restart and requeue: test_durable_service.py drives it through serve
def test_tune_restarts_a_killed_worker_and_its_job_finishes(tmp_path):
    """``autosched tune`` supervises its worker as ``serve`` does: the worker SIGKILLed mid-job is
    started again, its orphaned work-horse (RQ starts it in its own session) is killed, the job
    goes back on the queue and finishes from its records with exactly the trials it asked."""
    import os
    import re
    import signal
    import time

    import psutil
    import redis

    from workers import redis_conn
    from workers.store import RedisStore

    wl = tmp_path / "mm.json"
    wl.write_text(sc.ComputeDAG(matmul_add(32, 32, 32)).to_json())
    data_dir = tmp_path / "data"
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    tune = subprocess.Popen([sys.executable, "-m", "api.cli", "tune", str(wl), "--trials", "8", "--per-round", "2",
                             "--population", "32", "--out", str(tmp_path / "out"), "--data-dir", str(data_dir),
                             "--no-compare"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path, env=env,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        job = None
        while time.monotonic() < deadline and tune.poll() is None:
            try:
                store = RedisStore(redis.Redis(unix_socket_path=str(redis_conn.socket_path(data_dir))))
                job_ids = [k.decode().rsplit(":", 1)[1] for k in store.conn.keys("autosched:job:*")]
                job = store.get_job(job_ids[0]) if job_ids else None
            except redis.RedisError:
                job = None
            if job and job.state == "running" and job.trials_done >= 2:
                break
            time.sleep(0.1)
        assert job and job.trials_done >= 2 and tune.poll() is None, (job, tune.poll())
        workers = [p for p in psutil.Process(tune.pid).children()
                   if re.search(r"\brq\.cli\b", " ".join(p.cmdline()))]
        assert len(workers) == 1, workers
        os.kill(workers[0].pid, signal.SIGKILL)  # the worker, mid-job; its work-horse lives on
        out, err = tune.communicate(timeout=300)
    finally:
        if tune.poll() is None:
            os.killpg(tune.pid, signal.SIGKILL)
    assert tune.returncode == 0, err[-3000:]
    assert "orphaned process" in err and "requeued job" in err, err[-3000:]
    assert "after 8 trials" in out, out[-2000:]  # the horse did not go on measuring beside the retry
    assert "Traceback" not in err, err[-3000:]
    assert (tmp_path / "out" / "best.so").stat().st_size > 0
