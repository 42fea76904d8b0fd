"""JSON Schema of the ComputeDAG wire format (docs/dag_json_schema.md), for the OpenAPI document.

    DAG_JSON_SCHEMA : the ``dag`` field of POST /tasks (and each function's ``dag`` of POST /models)

The schema documents the shape of a payload: the top-level fields, the three op kinds, the
twelve expression kinds with their fields, dtypes, operators, reducers and intrinsics (taken
from ``scheduler_core.ir.expr``, so they cannot drift).  It is never stricter than the
library: ``ComputeDAG.from_json`` stays the validator (references between ops and variables,
topological order, dtype agreement, in-bounds accesses, limits), and its errors name the DAG
path (``ops[4].body.b.tensor``).  Nested expressions are described one level deep (an
expression's operands are "an int32 constant or an expression object of a known kind"), so the
schema has no recursive ``$ref`` for OpenAPI tools to unfold.
"""

from __future__ import annotations

from typing import Any

from scheduler_core.dag.dag_json import MAX_NAME_CHARS
from scheduler_core.ir.expr import BINARY_OPS, CMP_OPS, DTYPES, INTRINSICS, REDUCERS
from scheduler_core.ir.intrinsics import MAX_CALL_ARITY

DAG_FORMAT = "autosched.compute_dag"
DAG_VERSION = 1
FLOAT_DTYPES = tuple(d for d in DTYPES if d.startswith("float"))
INT_DTYPES = tuple(d for d in DTYPES if d not in FLOAT_DTYPES)  # integers and bool

EXPR_KINDS = ("int", "float", "var", "binary", "cmp", "logical", "not", "select", "cast", "call", "load",
              "reduce")
OP_KINDS = ("placeholder", "compute", "scan")

_INDEX = {"type": "integer", "minimum": 0}
_DTYPE = {"enum": list(DTYPES), "description": "element type"}
_NAME = {"type": "string", "minLength": 1, "maxLength": MAX_NAME_CHARS}

# An operand: a bare JSON integer (an int32 constant) or an expression object (one level deep).
_EXPR: dict[str, Any] = {
    "description": "an expression: a bare integer (int32 constant) or an object whose kind is one of "
                   + ", ".join(EXPR_KINDS),
    "anyOf": [{"type": "integer"},
              {"type": "object", "required": ["kind"], "properties": {"kind": {"enum": list(EXPR_KINDS)}}}],
}
_TENSOR_REF = {"type": "array", "items": _INDEX, "minItems": 2, "maxItems": 2,
               "description": "[op_index, value_index]: output value_index of an earlier op"}
_RANGE = {"type": "object", "required": ["var", "min", "extent"], "additionalProperties": False,
          "properties": {"var": {**_INDEX, "description": "index into vars (the variable it binds)"},
                         "min": _EXPR, "extent": _EXPR},
          "description": "an iteration range [min, min + extent) bound to one variable"}


def _node(kind: str, description: str, **fields: Any) -> dict:
    """An object schema with ``kind: <kind>`` and exactly ``fields`` (all required)."""
    return {"type": "object", "title": kind, "description": description,
            "required": ["kind", *fields], "additionalProperties": False,
            "properties": {"kind": {"const": kind}, **fields}}


EXPR_SCHEMAS: dict[str, dict] = {
    "int": _node("int", "integer or bool constant within its dtype's range",
                 value={"type": "integer"}, dtype={"enum": list(INT_DTYPES)}),
    "float": _node("float", "float constant",
                   value={"anyOf": [{"type": "number"}, {"enum": ["inf", "-inf", "nan"]}]},
                   dtype={"enum": list(FLOAT_DTYPES)}),
    "var": _node("var", "a variable", id={**_INDEX, "description": "index into vars"}),
    "binary": _node("binary", "a op b; a, b and the node share dtype",
                    op={"enum": list(BINARY_OPS)}, a=_EXPR, b=_EXPR, dtype=_DTYPE),
    "cmp": _node("cmp", "comparison (result bool); a and b share a dtype", op={"enum": list(CMP_OPS)},
                 a=_EXPR, b=_EXPR),
    "logical": _node("logical", "a and/or b", op={"enum": ["and", "or"]}, a=_EXPR, b=_EXPR),
    "not": _node("not", "logical not", a=_EXPR),
    "select": _node("select", "if_then_else: only the taken branch is evaluated",
                    cond=_EXPR, true_value=_EXPR, false_value=_EXPR, dtype=_DTYPE),
    "cast": _node("cast", "conversion to dtype", value=_EXPR, dtype=_DTYPE),
    "call": _node("call", "intrinsic; args: as many as it takes (docs/dag_json_schema.md), of one dtype",
                  name={"enum": list(INTRINSICS)},
                  args={"type": "array", "items": _EXPR, "minItems": 1, "maxItems": MAX_CALL_ARITY}, dtype=_DTYPE),
    "load": _node("load", "tensor element; one integer index per dimension; dtype is the tensor's",
                  tensor=_TENSOR_REF, indices={"type": "array", "items": _EXPR}, dtype=_DTYPE),
    "reduce": _node("reduce", "reduction, only as a compute's whole body; dtype is the source's",
                    combiner={"enum": list(REDUCERS)}, source=_EXPR,
                    axis={"type": "array", "items": _RANGE, "minItems": 1},
                    condition={"anyOf": [_EXPR, {"type": "null"}]}, dtype=_DTYPE),
}

OP_SCHEMAS: dict[str, dict] = {
    "placeholder": _node("placeholder", "an input tensor", name=_NAME,
                         shape={"type": "array", "items": _EXPR, "description": "integer extents"},
                         dtype=_DTYPE),
    "compute": _node(
        "compute", "a tensor computed element-wise over its axes",
        name=_NAME, shape={"type": "array", "items": _EXPR, "description": "integer extents"},
        axis={"type": "array", "items": _INDEX,
              "description": "one variable id per shape dimension (the spatial axis over [0, shape[d]))"},
        body={"anyOf": [{"type": "integer"}, {"oneOf": list(EXPR_SCHEMAS.values())},
                        {"type": "array", "items": _EXPR, "minItems": 2,
                         "description": "a multi-output compute: output j is body[j]"}],
              "description": "the element expression (a reduce only as the whole body)"},
        attrs={"type": "object", "description": "JSON scalars or lists; layout_free_placeholders: tensor refs"},
        tag={"type": "string"}),
    "scan": _node(
        "scan", "a recurrence over time steps", name=_NAME, scan_axis=_RANGE,
        init={"type": "array", "items": _TENSOR_REF, "minItems": 1},
        update={"type": "array", "items": _TENSOR_REF, "minItems": 1},
        state_placeholder={"type": "array", "items": _TENSOR_REF, "minItems": 1},
        inputs={"type": "array", "items": _TENSOR_REF}),
}

DAG_JSON_SCHEMA: dict[str, Any] = {
    "type": "object",
    "title": "ComputeDAG",
    "description": "A ComputeDAG in its JSON wire format (docs/dag_json_schema.md), validated by "
                   "ComputeDAG.from_json: a 422 names the path of the first problem (e.g. ops[4].body.b.tensor).",
    "required": ["format", "version", "vars", "ops", "tensors"],
    "additionalProperties": False,
    "properties": {
        "format": {"const": DAG_FORMAT},
        "version": {"const": DAG_VERSION},
        "vars": {"type": "array", "description": "scalar variables, referred to by index",
                 "items": {"type": "object", "required": ["name", "dtype"], "additionalProperties": False,
                           "properties": {"name": _NAME, "dtype": _DTYPE}}},
        "ops": {"type": "array", "description": "operations in topological order (producers first)",
                "items": {"oneOf": list(OP_SCHEMAS.values())}},
        "tensors": {"type": "array", "items": _TENSOR_REF, "minItems": 1,
                    "description": "the DAG's arguments in call order (inputs and outputs)"},
    },
}


def dag_schema(example: dict) -> dict:
    """:data:`DAG_JSON_SCHEMA` with ``examples: [example]`` (a valid DAG payload)."""
    return {**DAG_JSON_SCHEMA, "examples": [example]}


# The graph of POST /models (scheduler_core.graph.Graph.to_json); as lenient as Graph.from_json,
# which validates it (a 422 whose path names the field, e.g. graph.calls[2].args[0]).
_GRAPH_VAR = {"type": "object", "required": ["name", "shape"],
              "properties": {"name": {"type": "string"},
                             "shape": {"type": "array", "items": {"type": "integer"}},
                             "dtype": {"type": "string", "description": "element type (default float32)",
                                       "examples": ["float32"]}},
              "description": "a named tensor value"}

GRAPH_JSON_SCHEMA: dict[str, Any] = {
    "type": "object",
    "title": "Graph",
    "description": "A model's graph (Graph.to_json): inputs, params, calls in order, outputs and the DAG of "
                   "every tensor-program function; no weights.  Validated by Graph.from_json.",
    "required": ["inputs", "calls", "outputs"],
    "properties": {
        "version": {"const": "graph-v1"},
        "inputs": {"type": "array", "items": _GRAPH_VAR},
        "params": {"type": "array", "items": _GRAPH_VAR, "description": "weights (shapes only)"},
        "calls": {"type": "array", "items": {
            "type": "object", "required": ["func", "args", "outputs"],
            "properties": {"kind": {"enum": ["tir", "library"], "description": "default tir"},
                           "func": {"type": "string", "description": "a function of functions (tir) or a "
                                                                     "library callable such as env.relu"},
                           "args": {"type": "array", "items": {"type": "string"}, "description": "value names"},
                           "outputs": {"type": "array", "items": _GRAPH_VAR}}}},
        "outputs": {"type": "array", "items": {"type": "string"}, "description": "value names"},
        "functions": {"type": "object", "description": "tensor programs by name",
                      "additionalProperties": {
                          "type": "object", "required": ["dag"],
                          "properties": {"dag": DAG_JSON_SCHEMA,
                                         "attrs": {"type": "object", "description": "kept, not interpreted"}}}},
    },
}


def graph_schema(example: dict) -> dict:
    """:data:`GRAPH_JSON_SCHEMA` with ``examples: [example]`` (a valid graph payload)."""
    return {**GRAPH_JSON_SCHEMA, "examples": [example]}
