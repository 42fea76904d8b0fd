"""``autosched serve`` (API + a worker on the embedded Redis) driven by the CLI client
commands and the Python client; ``records export`` then ``records import``."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

import scheduler_core as sc
from api.client import Client
from tests.workloads import matmul_add

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.integration  # `autosched serve`: embedded Redis + RQ worker processes


def _stop_serve(server: subprocess.Popen) -> None:
    """Stop ``autosched serve`` and what it started.  SIGTERM reaches only its process group:
    its RQ workers run in their own sessions and its embedded redis-server is daemonized, and
    uvicorn re-raises the SIGTERM after its own shutdown, so serve's cleanup does not run.
    The workers (serve's children) and the server (the unix socket on their command lines)
    are found first and stopped after serve exits."""
    try:
        started = psutil.Process(server.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        started = []
    sockets = {s for p in started for s in re.findall(r"unix://(/[^\s?]+)", " ".join(_cmdline(p)))}
    os.killpg(server.pid, signal.SIGTERM)
    try:
        server.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait(timeout=30)
    redis = [p for p in psutil.process_iter() if any(f"unixsocket:{s}" in " ".join(_cmdline(p)) for s in sockets)]
    for p in started + redis:
        with contextlib.suppress(psutil.NoSuchProcess):
            p.terminate()
    for p in psutil.wait_procs(started + redis, timeout=10)[1]:
        with contextlib.suppress(psutil.NoSuchProcess):
            p.kill()


def _cmdline(proc: psutil.Process) -> list[str]:
    try:
        return proc.cmdline()
    except psutil.Error:
        return []


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
        # a graph JSON with its weights (--params .npz; test_models runs such an artifact)
        import numpy as np

        from tests.workers.test_model_jobs import model_inputs, tir_only_graph
        from workers.model_store import encode_params
        (tmp_path / "g.json").write_text(json.dumps(tir_only_graph().to_json()))
        _, w, b = model_inputs()
        (tmp_path / "w.npz").write_bytes(encode_params({"w": w, "b": b}))
        res = run("submit-model", "g.json", "--params", "nope.npz")
        assert res.returncode == 2 and "nope.npz: no such .npz file" in res.stderr, res.stderr
        res = run("submit-model", "g.json", "--params", "w.npz", "--trials", "2", "--no-wait")
        assert res.returncode == 0, res.stderr
        res = run("cancel", json.loads(res.stdout[: res.stdout.rindex("}") + 1])["job_id"])
        assert res.returncode == 0, res.stderr
        if importlib.util.find_spec("onnx") and importlib.util.find_spec("torch"):
            # an ONNX file is uploaded as it is; the service imports it (workers.onnx_import)
            import onnx

            from tests.scheduler_core.frontend.test_onnx import small_cnn
            onnx.save(small_cnn(np.random.default_rng(0)), str(tmp_path / "cnn.onnx"))
            res = run("submit-model", str(tmp_path / "cnn.onnx"), "--trials", "5", "--no-wait")
            assert res.returncode == 0, res.stderr
            created = json.loads(res.stdout[: res.stdout.rindex("}") + 1])
            assert len(created["tasks"]) == 5, created
            res = run("cancel", created["job_id"])
            assert res.returncode == 0, res.stderr
    finally:
        _stop_serve(server)
    # The exported records load with the library's reader once the DAG line is added.
    dag_obj = sc.ComputeDAG(matmul_add(32, 32, 32))
    from scheduler_core.measure.record import encode_dag_line
    path = tmp_path / "with_dag.jsonl"
    path.write_text(encode_dag_line(dag_obj.workload_key, dag_obj) + "\n" + "\n".join(lines) + "\n")
    assert len(sc.load_records(str(path))) == 4
