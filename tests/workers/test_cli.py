"""``autosched tune`` through the queue path on the embedded Redis, in a child process."""

import subprocess
import sys
from pathlib import Path

import pytest

import scheduler_core as sc
from tests.workloads import matmul_add

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.integration  # the embedded Redis and RQ worker processes, in a child


@pytest.mark.parametrize("measure", ["local", "queue"])
def test_tune_command_runs_the_queue_path_and_writes_the_best(tmp_path, measure):
    wl = tmp_path / "mm.json"
    wl.write_text(sc.ComputeDAG(matmul_add(32, 32, 32)).to_json())
    out = tmp_path / "out"
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    res = subprocess.run([sys.executable, "-m", "api.cli", "tune", str(wl), "--trials", "4",
                          "--per-round", "2", "--population", "32", "--out", str(out), "--measure", measure],
                         capture_output=True, text=True, timeout=600, cwd=tmp_path, env=env)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "GFLOP/s" in res.stdout and "after 4 trials" in res.stdout
    code = (out / "best_schedule.py").read_text()
    assert "s[matmul]" in code or "s[out]" in code
    assert (out / "best.so").stat().st_size > 0 and "default_function" in (out / "best.h").read_text()
