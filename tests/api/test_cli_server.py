"""``autosched serve`` (API + a worker on the embedded Redis) driven by the CLI client
commands and the Python client; ``records export`` then ``records import``."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

import scheduler_core as sc
from api.client import Client
from tests.workloads import matmul_add

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.integration  # `autosched serve`: embedded Redis + RQ worker processes


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_serve_submit_best_artifact_and_records_round_trip(tmp_path):
    port = _free_port()
    env = dict(os.environ, PYTHONPATH=str(ROOT), HOME=str(tmp_path))
    env.pop("REDIS_URL", None)
    server = subprocess.Popen([sys.executable, "-m", "api.cli", "serve", "--port", str(port), "--workers", "1"],
                              cwd=tmp_path, env=env, start_new_session=True,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        with Client(base) as c:
            for _ in range(120):
                try:
                    c.healthz()
                    break
                except Exception:  # noqa: BLE001 - the server is still starting
                    time.sleep(0.5)
            dag = json.loads(sc.ComputeDAG(matmul_add(32, 32, 32)).to_json())
            created = c.create_task(dag, num_measure_trials=4, num_measures_per_round=2, population=32, num_iters=1)
            job = c.wait(created["job_id"], timeout_s=300)
            assert job["state"] == "finished" and job["trials_done"] == 4
        run = lambda *a: subprocess.run([sys.executable, "-m", "api.cli", *a, "--server", base],  # noqa: E731
                                        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
        res = run("best", created["task_id"])
        assert res.returncode == 0 and "s[" in res.stdout, res.stderr
        res = run("artifact", created["task_id"], "--format", "ll", "--out", str(tmp_path / "best.ll"))
        assert res.returncode == 0 and "define" in (tmp_path / "best.ll").read_text()
        res = run("records", "export", created["task_id"], str(tmp_path / "rec.jsonl"))
        assert res.returncode == 0, res.stderr
        lines = (tmp_path / "rec.jsonl").read_text().splitlines()
        assert len(lines) == 4
    finally:
        os.killpg(server.pid, 15)
        server.wait(timeout=30)
    # The exported records load with the library's reader once the DAG line is added.
    dag_obj = sc.ComputeDAG(matmul_add(32, 32, 32))
    from scheduler_core.measure.record import encode_dag_line
    path = tmp_path / "with_dag.jsonl"
    path.write_text(encode_dag_line(dag_obj.workload_key, dag_obj) + "\n" + "\n".join(lines) + "\n")
    assert len(sc.load_records(str(path))) == 4
