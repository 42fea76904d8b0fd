"""The ComputeDAG wire format (docs/dag_json_schema.md) as pydantic models: the JSON Schema of the
OpenAPI document and the structural checks of POST /tasks, from one definition.

    ComputeDagPayload   the top level; Op (placeholder | compute | scan) and Expr (a bare int32
                        constant | one of the twelve expression kinds) are discriminated unions
                        on ``kind``
    check_dag_structure(obj)   types, required and unknown fields, enums, kinds; raises
                        InvalidWorkloadError whose path names the field (``ops[2].body.source.kind``)
    DAG_JSON_SCHEMA     the ``dag`` field of POST /tasks (and each function's ``dag`` of POST /models):
                        the models' schema, inlined (see :func:`_inline`); EXPR_SCHEMAS, OP_SCHEMAS by kind

The semantic checks that no schema expresses stay in ``ComputeDAG.from_json`` (scheduler_core,
which does not depend on pydantic and so keeps its own structural checks for library callers):
references by index in range, topological order, dtype agreement, variable scoping, in-bounds
accesses, the DAG limits.  The models are never stricter than it: anything they reject, it rejects
too (tests/api/test_dag_models.py checks the hostile cases against both).  An expression nested
deeper than pydantic's recursion limit (about 250 levels) is left to ``from_json``, whose
``max_depth`` decides.  Enums come from ``scheduler_core.ir.expr`` and the intrinsic table, so they
cannot drift from the library.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, TypeAdapter, ValidationError
from pydantic_core import ErrorDetails

from scheduler_core.base.errors import InvalidWorkloadError
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

if TYPE_CHECKING:  # the runtime tables below are Literal types; a type checker sees their base type
    DType = str
    IntDType = str
    FloatDType = str
    BinaryOpName = str
    CmpOpName = str
    Reducer = str
    Intrinsic = str
else:
    DType, IntDType, FloatDType = Literal[DTYPES], Literal[INT_DTYPES], Literal[FLOAT_DTYPES]
    BinaryOpName, CmpOpName, Reducer, Intrinsic = (Literal[BINARY_OPS], Literal[CMP_OPS], Literal[REDUCERS],
                                                   Literal[tuple(INTRINSICS)])

Index = Annotated[int, Field(ge=0)]
VarId = Annotated[int, Field(ge=0, description="index into vars")]
Name = Annotated[str, Field(min_length=1, max_length=MAX_NAME_CHARS)]
TensorRef = Annotated[list[Index], Field(min_length=2, max_length=2,
                                         description="[op_index, value_index]: output value_index of an "
                                                     "earlier op")]


class _Node(BaseModel):
    """A JSON object of the format: every field required, no others, no coercion ("1" is no 1)."""

    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)


def _expr_tag(value: Any) -> str | None:
    """The branch of an expression: ``int32`` for a bare JSON integer, else its ``kind``."""
    if isinstance(value, int) and not isinstance(value, bool):
        return "int32"
    return value.get("kind") if isinstance(value, dict) else None


# An expression: a bare JSON integer (an int32 constant; its range is checked by from_json) or an
# object of one of EXPR_KINDS, chosen by its kind.
Expr = Annotated[
    Annotated[int, Tag("int32")]
    | Annotated["IntNode", Tag("int")] | Annotated["FloatNode", Tag("float")] | Annotated["VarNode", Tag("var")]
    | Annotated["BinaryNode", Tag("binary")] | Annotated["CmpNode", Tag("cmp")]
    | Annotated["LogicalNode", Tag("logical")] | Annotated["NotNode", Tag("not")]
    | Annotated["SelectNode", Tag("select")] | Annotated["CastNode", Tag("cast")]
    | Annotated["CallNode", Tag("call")] | Annotated["LoadNode", Tag("load")]
    | Annotated["ReduceNode", Tag("reduce")],
    Discriminator(_expr_tag),
    Field(description="an expression: a bare integer (int32 constant) or an object whose kind is one of "
                      + ", ".join(EXPR_KINDS)),
]


class Range(_Node):
    """An iteration range [min, min + extent) bound to one variable."""

    var: VarId
    min: Expr
    extent: Expr


class IntNode(_Node):
    """Integer or bool constant within its dtype's range."""

    kind: Literal["int"]
    value: int
    dtype: IntDType


class FloatNode(_Node):
    """Float constant."""

    kind: Literal["float"]
    value: float | Literal["inf", "-inf", "nan"]
    dtype: FloatDType


class VarNode(_Node):
    """A variable."""

    kind: Literal["var"]
    id: VarId


class BinaryNode(_Node):
    """a op b; a, b and the node share dtype."""

    kind: Literal["binary"]
    op: BinaryOpName
    a: Expr
    b: Expr
    dtype: DType


class CmpNode(_Node):
    """Comparison (result bool); a and b share a dtype."""

    kind: Literal["cmp"]
    op: CmpOpName
    a: Expr
    b: Expr


class LogicalNode(_Node):
    """a and/or b."""

    kind: Literal["logical"]
    op: Literal["and", "or"]
    a: Expr
    b: Expr


class NotNode(_Node):
    """Logical not."""

    kind: Literal["not"]
    a: Expr


class SelectNode(_Node):
    """if_then_else: only the taken branch is evaluated."""

    kind: Literal["select"]
    cond: Expr
    true_value: Expr
    false_value: Expr
    dtype: DType


class CastNode(_Node):
    """Conversion to dtype."""

    kind: Literal["cast"]
    value: Expr
    dtype: DType


class CallNode(_Node):
    """Intrinsic; args: as many as it takes (docs/dag_json_schema.md), of one dtype."""

    kind: Literal["call"]
    name: Intrinsic
    args: Annotated[list[Expr], Field(min_length=1, max_length=MAX_CALL_ARITY)]
    dtype: DType


class LoadNode(_Node):
    """Tensor element; one integer index per dimension; dtype is the tensor's."""

    kind: Literal["load"]
    tensor: TensorRef
    indices: list[Expr]
    dtype: DType


class ReduceNode(_Node):
    """Reduction, only as a compute's whole body; dtype is the source's."""

    kind: Literal["reduce"]
    combiner: Reducer
    source: Expr
    axis: Annotated[list[Range], Field(min_length=1)]
    condition: Expr | None
    dtype: DType


def _body_tag(value: Any) -> str:
    return "multi" if isinstance(value, list) else "single"


Shape = Annotated[list[Expr], Field(description="integer extents")]


class PlaceholderOp(_Node):
    """An input tensor."""

    kind: Literal["placeholder"]
    name: Name
    shape: Shape
    dtype: DType


class ComputeOp(_Node):
    """A tensor computed element-wise over its axes."""

    kind: Literal["compute"]
    name: Name
    shape: Shape
    axis: Annotated[list[VarId], Field(description="one variable id per shape dimension (the spatial axis "
                                                   "over [0, shape[d]))")]
    body: Annotated[
        Annotated[Expr, Tag("single")]
        | Annotated[list[Expr], Tag("multi"), Field(min_length=2, description="a multi-output compute: output j is "
                                                                              "body[j]")],
        Discriminator(_body_tag),
        Field(description="the element expression (a reduce only as the whole body)")]
    attrs: Annotated[dict[str, Any], Field(description="JSON scalars or lists; layout_free_placeholders: "
                                                       "tensor refs")]
    tag: str


class ScanOp(_Node):
    """A recurrence over time steps."""

    kind: Literal["scan"]
    name: Name
    scan_axis: Range
    init: Annotated[list[TensorRef], Field(min_length=1)]
    update: Annotated[list[TensorRef], Field(min_length=1)]
    state_placeholder: Annotated[list[TensorRef], Field(min_length=1)]
    inputs: list[TensorRef]


Op = Annotated[PlaceholderOp | ComputeOp | ScanOp, Field(discriminator="kind")]


class Variable(_Node):
    """A scalar variable, referred to by its index in vars."""

    name: Name
    dtype: DType


class ComputeDagPayload(_Node):
    """A ComputeDAG in its JSON wire format (docs/dag_json_schema.md): its structure is checked by this
    schema, its references, dtypes, scopes, bounds and limits by ComputeDAG.from_json; a 422 names the
    path of the first problem (e.g. ops[4].body.b.tensor)."""

    model_config = ConfigDict(title="ComputeDAG")

    format: Literal["autosched.compute_dag"]
    version: Literal[1]
    vars: Annotated[list[Variable], Field(description="scalar variables, referred to by index")]
    ops: Annotated[list[Op], Field(description="operations in topological order (producers first)")]
    tensors: Annotated[list[TensorRef], Field(min_length=1, description="the DAG's arguments in call order "
                                                                        "(inputs and outputs)")]


for _model in (Range, BinaryNode, CmpNode, LogicalNode, NotNode, SelectNode, CastNode, CallNode, LoadNode,
               ReduceNode, PlaceholderOp, ComputeOp, ScanOp, ComputeDagPayload):
    _model.model_rebuild()

DAG_ADAPTER: TypeAdapter[ComputeDagPayload] = TypeAdapter(ComputeDagPayload)
_RECURSION = ("recursion_loop", "recursion_depth_exceeded")


def check_dag_structure(obj: Any) -> None:
    """Check ``obj`` (a DAG payload, decoded JSON) against the models; nothing is built from it.

    Raises InvalidWorkloadError(message, path) for the first problem, ``path`` in the form of
    ``ComputeDAG.from_json`` (``ops[2].body.source.kind``; the object itself for a missing or unknown
    field).  An expression too deep for pydantic's recursion limit passes: ``from_json`` checks its
    structure and depth."""
    try:
        DAG_ADAPTER.validate_python(obj)
    except ValidationError as err:
        errors = err.errors(include_url=False)
        if any(e["type"] in _RECURSION for e in errors):
            return
        first = errors[0]
        path = dag_path(first["loc"], obj, first["type"])
        raise InvalidWorkloadError(_message(first), path) from None


def dag_path(loc: tuple, obj: Any, error_type: str = "") -> str:
    """The DAG path (``ops[4].body.b.indices[1]``) of a pydantic error location in ``obj``.

    A location also names the branch a union took (an expression's or op's kind, ``int32`` for a bare
    integer, ``single``/``multi`` for a compute body, a member type): walking ``obj`` along it keeps
    only the keys and indices that exist there, so those drop out.  A missing or unknown field names
    its object; an unknown kind names the ``kind`` field."""
    parts: list[str] = []
    cur, tag_seen = obj, False
    for key in loc:
        if isinstance(cur, list) and isinstance(key, int) and 0 <= key < len(cur):
            parts.append(f"[{key}]")
            cur, tag_seen = cur[key], False
        elif isinstance(cur, dict) and isinstance(key, str) and key in cur and not (
                not tag_seen and key == cur.get("kind")):
            if error_type == "extra_forbidden" and key is loc[-1]:
                break
            parts.append(f".{key}" if parts else key)
            cur, tag_seen = cur[key], False
        else:
            tag_seen = True  # a branch name, or a missing field
    if error_type in ("union_tag_invalid", "union_tag_not_found") and isinstance(cur, dict):
        parts.append(".kind" if parts else "kind")
    return "".join(parts)


def _message(error: ErrorDetails) -> str:
    """A message for the first error: pydantic's, but for a kind, which names the kinds of the format."""
    ctx = error.get("ctx") or {}
    expr = ctx.get("discriminator") != "'kind'"  # the expression union's discriminator is a function
    what = "expression" if expr else "op"
    if error["type"] == "union_tag_invalid":
        return f"unknown {what} kind {ctx.get('tag')!r} (expected one of {', '.join(EXPR_KINDS if expr else OP_KINDS)})"
    if error["type"] == "union_tag_not_found":
        return "an expression must be an integer or an object with a kind" if expr else "an op needs a kind"
    if error["type"] in ("missing", "extra_forbidden") and error["loc"]:
        return f"{'missing' if error['type'] == 'missing' else 'unknown'} field {error['loc'][-1]!r}"
    if tuple(error["loc"]) == ("version",) and isinstance(error.get("input"), int) and error["input"] > DAG_VERSION:
        return f"format version {error['input']} is newer than this reader's ({DAG_VERSION})"
    return str(error["msg"])


# ---------------------------------------------------------------------------
# The JSON Schema of the OpenAPI document
# ---------------------------------------------------------------------------

# The operand of an expression inside an expression: one level deep, so the schema has no recursive
# $ref for OpenAPI tools (schemathesis, the docs pages) to unfold.
_OPERAND: dict[str, Any] = {
    "description": "an expression: a bare integer (int32 constant) or an object whose kind is one of "
                   + ", ".join(EXPR_KINDS),
    "anyOf": [{"type": "integer"},
              {"type": "object", "required": ["kind"], "properties": {"kind": {"enum": list(EXPR_KINDS)}}}],
}


def _inline(node: Any, defs: dict, full: bool = False) -> Any:
    """``node`` (a part of the models' JSON Schema) with every ``$ref`` replaced by its definition.

    An expression is described one level deep: a compute's ``body`` (``full``) is one of the
    expression kinds with their fields, every other expression (a shape, an extent, an operand of
    an expression) is :data:`_OPERAND`.  OpenAPI's ``discriminator`` hints go: their mappings point
    into the ``$defs`` that inlining removes, and ``oneOf`` with ``kind`` consts says the same."""
    if isinstance(node, list):
        return [_inline(x, defs, full) for x in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        name = node["$ref"].rsplit("/", 1)[-1]
        return {**_inline(defs[name], defs, False), **{k: v for k, v in node.items() if k != "$ref"}}
    if {"type": "integer"} in node.get("oneOf", ()) and not full:  # an expression
        return {**copy.deepcopy(_OPERAND), **{k: v for k, v in node.items() if k not in ("oneOf", "discriminator")}}
    return {k: _inline(v, defs, full or k == "body") for k, v in node.items() if k not in ("discriminator", "$defs")}


def _generated_schema() -> dict[str, Any]:
    schema = DAG_ADAPTER.json_schema()
    return _inline(schema, schema.get("$defs", {}))


DAG_JSON_SCHEMA: dict[str, Any] = _generated_schema()
OP_SCHEMAS: dict[str, dict] = {o["properties"]["kind"]["const"]: o
                               for o in DAG_JSON_SCHEMA["properties"]["ops"]["items"]["oneOf"]}
EXPR_SCHEMAS: dict[str, dict] = {e["properties"]["kind"]["const"]: e
                                 for e in OP_SCHEMAS["compute"]["properties"]["body"]["oneOf"][0]["oneOf"]
                                 if "properties" in e}


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
