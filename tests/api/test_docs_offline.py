"""/docs and /redoc offline, the JSON Schemas of the DAG and graph fields, ISO 8601 timestamps.

    GET /docs, /redoc --> HTML whose every URL is a path of this server (no http(s):// host);
        every asset it names is served from the package (api/static/docs) with its content type
    OpenAPI: POST /tasks' ``dag`` and POST /models' ``graph`` carry a JSON Schema (type,
        properties) and a valid example (ComputeDAG.from_json / Graph.from_json accept it);
        the schema is never stricter than the library (same required fields per kind)
    the package (a wheel of this tree) carries api/static/**     (slow: builds the wheel)

No Redis is needed: these routes and the OpenAPI document never open a connection.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import zipfile
from datetime import datetime, timezone
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from api.dag_schema import DAG_JSON_SCHEMA, EXPR_SCHEMAS, OP_SCHEMAS
from api.main import STATIC_DIR, create_app
from api.model_schemas import MODEL_EXAMPLE
from api.schemas import TASK_EXAMPLE, JobPublic, epoch_to_datetime
from api.settings import Settings
from scheduler_core.base.errors import InvalidWorkloadError
from scheduler_core.dag.compute_dag import ComputeDAG
from scheduler_core.dag.dag_json import _OP_FIELDS
from scheduler_core.dag.dag_json_expr import _EXPR_FIELDS
from scheduler_core.graph.ir import Graph

ROOT = Path(__file__).resolve().parents[2]
CONTENT_TYPES = {".js": ("text/javascript", "application/javascript"), ".css": ("text/css",),
                 ".png": ("image/png",)}


@pytest.fixture(scope="module")
def client():
    return TestClient(create_app(Settings(redis_url="redis://127.0.0.1:1/0", api_token="docs-token")))


@pytest.fixture(scope="module")
def openapi(client) -> dict:
    r = client.get("/openapi.json")  # open with a token configured
    assert r.status_code == 200
    return r.json()


@pytest.mark.parametrize("page", ["/docs", "/redoc"])
def test_docs_pages_reference_only_the_servers_own_paths(client, page):
    r = client.get(page)  # no token: the docs stay open
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    html = r.text
    assert not re.search(r"https?://", html), re.findall(r"https?://\S+", html)
    assert "fonts.googleapis" not in html and "cdn" not in html.lower()
    urls = re.findall(r"""(?:src|href|spec-url)=["']([^"']+)["']""", html)
    urls += re.findall(r"""url:\s*['"]([^'"]+)['"]""", html)
    assert "/openapi.json" in urls and any(u.endswith(".js") for u in urls), urls
    for url in urls:
        assert url.startswith("/") and not url.startswith("//"), url
        asset = client.get(url)
        assert asset.status_code == 200, url
        suffix = Path(url).suffix
        if suffix in CONTENT_TYPES:
            assert asset.headers["content-type"].split(";")[0] in CONTENT_TYPES[suffix], (url, asset.headers)
            assert len(asset.content) > 500
    if page == "/docs":
        assert '"validatorUrl": null' in html  # no badge image from the online validator
    csp = r.headers["content-security-policy"]
    assert "default-src 'self'" in csp and "img-src 'self' data:" in csp and "connect-src 'self'" in csp


def test_vendored_assets_carry_their_licences_and_no_missing_source_maps():
    docs = STATIC_DIR / "docs"
    for sub, files in {"swagger-ui": ["swagger-ui-bundle.js", "swagger-ui.css", "favicon-32x32.png", "LICENSE",
                                      "NOTICE"],
                       "redoc": ["redoc.standalone.js", "LICENSE"]}.items():
        for name in files:
            assert (docs / sub / name).is_file(), f"{sub}/{name}"
    assert "Apache License" in (docs / "swagger-ui" / "LICENSE").read_text()
    assert "MIT" in (docs / "redoc" / "LICENSE").read_text() or "Permission is hereby granted" in (
        docs / "redoc" / "LICENSE").read_text()
    assert "cdn.redoc.ly" not in (docs / "redoc" / "redoc.standalone.js").read_text()  # ReDoc's footer logo
    for asset in docs.rglob("*"):
        if asset.suffix in (".js", ".css"):  # a trailing map comment would make browsers ask for a missing file
            assert "sourceMappingURL" not in asset.read_text(errors="replace")[-300:], asset


def test_static_files_stay_inside_the_static_directory(client):
    for path in ("/static/docs/../../main.py", "/static/docs/%2e%2e/%2e%2e/main.py", "/static/%2e%2e/main.py"):
        r = client.get(path)
        assert r.status_code in (401, 404) and "create_app" not in r.text, path
    assert client.get("/static/docs/nope.js").status_code == 404
    assert client.get("/tasks/x").status_code == 401  # a token is configured; /static is not a way around it


def test_dag_field_has_a_json_schema_and_a_valid_example(openapi):
    dag = openapi["components"]["schemas"]["TaskCreate"]["properties"]["dag"]
    assert dag["type"] == "object" and {"format", "version", "vars", "ops", "tensors"} <= set(dag["properties"])
    assert dag["examples"] and ComputeDAG.from_json(dag["examples"][0]).workload_key
    assert dag["examples"][0] == TASK_EXAMPLE["dag"]
    ops = dag["properties"]["ops"]["items"]["oneOf"]
    assert sorted(o["properties"]["kind"]["const"] for o in ops) == sorted(_OP_FIELDS)


def test_schema_required_fields_are_the_librarys():
    """Never stricter, never looser than ComputeDAG.from_json on the fields of each kind."""
    for kind, fields in _OP_FIELDS.items():
        assert set(OP_SCHEMAS[kind]["required"]) == {"kind", *fields}, kind
        assert set(OP_SCHEMAS[kind]["properties"]) == {"kind", *fields}, kind
    for kind, fields in _EXPR_FIELDS.items():
        assert set(EXPR_SCHEMAS[kind]["required"]) == {"kind", *fields}, kind
    assert set(DAG_JSON_SCHEMA["required"]) == {"format", "version", "vars", "ops", "tensors"}


def _docs_example() -> dict:
    text = (ROOT / "docs" / "dag_json_schema.md").read_text()
    return json.loads(re.search(r"```json\n(.*?)```", text, re.S).group(1))


def test_examples_validate_against_the_schema_and_the_library(openapi):
    jsonschema_rs = pytest.importorskip("jsonschema_rs")
    dag_schema = openapi["components"]["schemas"]["TaskCreate"]["properties"]["dag"]
    validator = jsonschema_rs.validator_for(dag_schema)
    for example in (TASK_EXAMPLE["dag"], _docs_example()):
        validator.validate(example)
        ComputeDAG.from_json(example)
    bad = json.loads(json.dumps(TASK_EXAMPLE["dag"]))
    del bad["ops"][1]["tag"]
    assert not validator.is_valid(bad)
    graph_schema = openapi["components"]["schemas"]["ModelCreate"]["properties"]["graph"]
    assert graph_schema["type"] == "object" and "calls" in graph_schema["properties"]
    assert graph_schema["examples"][0] == MODEL_EXAMPLE["graph"]
    jsonschema_rs.validator_for(graph_schema).validate(MODEL_EXAMPLE["graph"])
    Graph.from_json(graph_schema["examples"][0])


def test_timestamps_are_iso_8601_strings_in_utc():
    assert epoch_to_datetime(0.0) is None and epoch_to_datetime("") is None and epoch_to_datetime(None) is None
    assert epoch_to_datetime(1764000000.5) == datetime(2025, 11, 24, 16, 0, 0, 500000, tzinfo=timezone.utc)
    job = JobPublic(job_id="j", task_id="t", state="finished", created=1764000000.123456, started="1764000001",
                    ended=None)
    data = json.loads(job.model_dump_json())
    assert data["created"] == "2025-11-24T16:00:00.123456Z" and data["started"] == "2025-11-24T16:00:01Z"
    assert data["ended"] is None


@pytest.mark.slow
def test_a_built_wheel_carries_the_static_assets(tmp_path):
    """``pip wheel .`` of a copy of this tree (no isolation: the venv's setuptools; a copy, so the
    build leaves no build/ or egg-info behind in the tree) holds api/static/**."""
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    for pkg in ("scheduler_core", "sketch_rules", "cost_model", "workers", "api"):
        shutil.copytree(ROOT / pkg, src / pkg, ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                    "-w", str(tmp_path), str(src)], check=True, capture_output=True, text=True, timeout=300)
    wheel = next(tmp_path.glob("autosched-*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    for name in ("api/static/docs/swagger-ui/swagger-ui-bundle.js", "api/static/docs/swagger-ui/swagger-ui.css",
                 "api/static/docs/swagger-ui/LICENSE", "api/static/docs/redoc/redoc.standalone.js",
                 "api/static/docs/redoc/LICENSE"):
        assert name in names, name


@pytest.mark.parametrize("edit, path", [
    (lambda g: g["calls"][0].__setitem__("args", [["x"]]), "calls[0].args[0]"),
    (lambda g: g.__setitem__("outputs", [{"name": "y"}]), "outputs[0]"),
    (lambda g: g.__setitem__("params", 5), "params"),
])
def test_graph_values_of_the_wrong_json_type_are_invalid_workloads(edit, path):
    """What the graph schema rejects, Graph.from_json rejects too, naming the field (never a TypeError)."""
    graph = json.loads(json.dumps(MODEL_EXAMPLE["graph"]))
    edit(graph)
    with pytest.raises(InvalidWorkloadError) as err:
        Graph.from_json(graph)
    assert err.value.path == path


def test_metrics_is_a_503_while_redis_is_unreachable(client):
    r = client.get("/metrics")  # open: no token needed; the fixture's Redis URL has no server
    assert r.status_code == 503 and r.headers.get("retry-after"), r.text
    assert r.json()["error"] == "ServiceUnavailable"
