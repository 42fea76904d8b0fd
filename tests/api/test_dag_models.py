"""The pydantic models of the DAG wire format (api/dag_schema.py) beside ComputeDAG.from_json.

    every valid DAG of the suite and of examples/workloads passes the models (never stricter)
    every malformed payload of tests/scheduler_core/dag/test_dag_json.py that the models reject,
        they reject at the path from_json names (the 422 is the same wherever it is caught)
    an expression deeper than pydantic's recursion limit is left to from_json's max_depth
    the OpenAPI schema is the models' (kinds, fields, enums), self-contained and without $ref
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from api.dag_schema import (
    DAG_JSON_SCHEMA,
    EXPR_KINDS,
    EXPR_SCHEMAS,
    OP_SCHEMAS,
    check_dag_structure,
)
from scheduler_core.base.errors import InvalidWorkloadError
from scheduler_core.dag.compute_dag import ComputeDAG
from scheduler_core.dag.dag_json import dag_to_json
from tests.scheduler_core.dag.test_dag_json import MALFORMED, WORKLOADS
from tests.workloads import matmul_add

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples" / "workloads").glob("*.json"))


def _payload(obj: dict) -> dict:
    return obj.get("dag", obj)


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_every_valid_dag_passes_the_models(name):
    check_dag_structure(dag_to_json(ComputeDAG(WORKLOADS[name]())))


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_example_workloads_pass_the_models(path):
    check_dag_structure(_payload(json.loads(path.read_text())))


def test_the_models_reject_at_the_librarys_path():
    """Each malformed payload of the library's table: what the models reject (a structural problem),
    they reject at the path ComputeDAG.from_json names; the rest passes them, for from_json."""
    rejected = []
    for what, mutate, _, limits in MALFORMED:
        obj = copy.deepcopy(dag_to_json(ComputeDAG(matmul_add(4, 4, 4))))
        mutate(obj)
        with pytest.raises(InvalidWorkloadError) as core:
            ComputeDAG.from_json(obj, **limits)
        try:
            check_dag_structure(obj)
        except InvalidWorkloadError as err:
            assert err.path == core.value.path, (what, err.path, core.value.path)
            assert str(err).startswith(f"{err.path}: "), str(err)
            rejected.append(what)
    assert {"unknown op kind", "missing field", "unknown field", "bare float", "no tensors"} <= set(rejected)
    assert "dangling tensor" not in rejected  # a reference: from_json's


def test_messages_name_the_kinds_of_the_format():
    obj = dag_to_json(ComputeDAG(matmul_add(4, 4, 4)))
    obj["ops"][2]["body"]["source"]["kind"] = "eval"
    with pytest.raises(InvalidWorkloadError, match=r"unknown expression kind 'eval' \(expected one of int, float"):
        check_dag_structure(obj)
    obj = dag_to_json(ComputeDAG(matmul_add(4, 4, 4)))
    obj["version"] = 2
    with pytest.raises(InvalidWorkloadError, match="format version 2 is newer than this reader's"):
        check_dag_structure(obj)


@pytest.mark.parametrize("depth", [300, 5000])
def test_an_expression_past_pydantics_recursion_limit_is_left_to_max_depth(depth):
    obj = dag_to_json(ComputeDAG(matmul_add(4, 4, 4)))
    body = obj["ops"][4]["body"]  # matmul + C
    load = body["b"]
    for _ in range(depth):
        body = {"kind": "binary", "op": "add", "dtype": "float32", "a": body, "b": load}
    obj["ops"][4]["body"] = body
    check_dag_structure(obj)  # pydantic stops at its recursion limit; the library decides
    ComputeDAG.from_json(obj, max_depth=depth + 10)
    with pytest.raises(InvalidWorkloadError, match="max_depth"):
        ComputeDAG.from_json(obj)


def test_the_openapi_schema_is_the_models():
    text = json.dumps(DAG_JSON_SCHEMA)
    assert "$ref" not in text and "$defs" not in text  # self-contained, nothing recursive to unfold
    assert DAG_JSON_SCHEMA["additionalProperties"] is False
    assert sorted(OP_SCHEMAS) == ["compute", "placeholder", "scan"] and sorted(EXPR_SCHEMAS) == sorted(EXPR_KINDS)
    for schema in [*OP_SCHEMAS.values(), *EXPR_SCHEMAS.values()]:
        assert schema["additionalProperties"] is False and set(schema["required"]) == set(schema["properties"])
