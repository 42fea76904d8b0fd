"""The JSON wire format of a ComputeDAG (format ``autosched.compute_dag``, version 1).

    ComputeDAG --dag_to_json--> dict --canonical_dumps--> text --sha256--> workload_key
    text | dict --tensors_from_json (validates; iterative, never evaluates)--> tensors --> ComputeDAG

The service receives DAGs in this form (docs/architecture.md, "Service"), records name them
by the hash of its canonical text, and ``dag_from_json(dag_to_json(d))`` rebuilds
``d`` exactly.  The schema and every validation error are documented in
``docs/dag_json_schema.md``.  It plays the role of TVM's ``SaveJSON`` of a
ComputeDAG, restricted to what a tensor-expression workload needs.

Reading guide: ``_Encoder`` (DAG -> dict) first, then ``_Decoder`` (dict -> DAG):
top level, ops, then references.  Expressions (an explicit stack, so a hostile
100000-deep payload fails with InvalidWorkloadError instead of RecursionError)
are encoded and decoded by the base classes in :mod:`.dag_json_expr`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

from scheduler_core.arith.int_set import Interval
from scheduler_core.base.errors import InvalidWorkloadError
from scheduler_core.ir.expr import Expr, IntImm, IterVar, Var, is_int
from scheduler_core.ir.expr_functor import free_vars
from scheduler_core.ir.simplify import const_value

from .access_bounds import check_ops_access_bounds
from .dag_json_expr import (
    ExprDecoder,
    ExprEncoder,
    fail_at,
    is_json_int,
)
from .tensor import ComputeOp, PlaceholderOp, ScanOp, Tensor, check_iter_names, dag_ops

FORMAT = "autosched.compute_dag"
VERSION = 1
TENSOR_ATTR = "layout_free_placeholders"  # the one attr whose value is a list of tensors
MAX_NAME_CHARS = 256  # an op's or variable's name (they become C identifiers and file names)
MAX_FLOP_ATTR = 2**63 - 1  # an integer FLOP attr (it overrides the FLOP estimate)
_OP_FIELDS = {
    "placeholder": ("name", "shape", "dtype"),
    "compute": ("name", "shape", "axis", "body", "attrs", "tag"),
    "scan": ("name", "scan_axis", "init", "update", "state_placeholder", "inputs"),
}


def canonical_dumps(obj: dict) -> str:
    """The canonical text of a payload: sorted keys, no whitespace, ASCII, no NaN.
    Raises InvalidWorkloadError when the payload nests too deeply for ``json``."""
    try:
        return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True,
                          allow_nan=False)
    except RecursionError:
        fail_at("expressions nest too deeply to serialize", "")


def dag_to_json(dag: Any) -> dict:
    """The JSON object (plain dicts/lists) of ``dag`` (a ComputeDAG: its ``ops`` and
    ``tensors``): ``{"format", "version", "vars",
    "ops", "tensors"}``.  Ops are ``dag.ops`` in order, then any argument op that no
    output reads.  Raises InvalidWorkloadError for what the format cannot hold:
    lowered-only nodes, non-JSON attrs, references outside the DAG."""
    return _Encoder(dag).payload()


def tensors_from_json(obj: dict | str | bytes, *, max_elements: int = 2**31,
                      max_total_elements: int = 2**33, max_depth: int = 256,
                      max_nodes: int = 100_000, require_concrete_shapes: bool = False) -> list:
    """Validate ``obj`` (a payload dict or its JSON text); the ComputeDAG's argument tensors.

    ``ComputeDAG.from_json`` wraps them into the DAG.

    max_elements: most elements of one tensor with a constant shape.
    max_total_elements: most elements over all tensors with constant shapes.
    max_depth: deepest expression nesting (a leaf has depth 1).
    max_nodes: most expression nodes, variables, ops and attr values in all.
    require_concrete_shapes: reject any variable in a shape, an axis extent or a scan's
    range (tuning needs concrete shapes; manual schedules and the default allow them).

    Every extent (a shape dimension, a reduce axis's or a scan's extent) must be positive
    when it is a constant; in index context (tensor-read indices, shapes, extents) a
    ``div``/``floordiv``/``floormod`` whose divisor is always 0 and a non-finite float
    constant are rejected.
    Raises InvalidWorkloadError(message, path=...) with ``path`` naming the
    offending node, e.g. ``ops[3].body.b.indices[1]``, or ``ops[3]`` for an access
    that leaves its tensor (:mod:`.access_bounds`, e.g. ``A[i + 1000]`` of a
    10-element ``A``, or a scan whose time range exceeds its state).
    """
    if isinstance(obj, (str, bytes, bytearray)):
        obj = _parse_text(obj)
    return _Decoder(max_elements, max_total_elements, max_depth, max_nodes,
                    require_concrete_shapes).dag(obj)


def _short(v: int) -> str:
    """An integer for a message: its digits, or its size when it has more than 18."""
    return str(v) if abs(v) < 10**18 else f"an integer of {v.bit_length()} bits"


def _reject_constant(name: str):
    fail_at(f"{name} is not valid JSON; write non-finite floats as \"inf\", \"-inf\", \"nan\"", "")


def _parse_text(text) -> Any:
    try:
        return json.loads(text, parse_constant=_reject_constant)
    except InvalidWorkloadError:
        raise
    except RecursionError:
        fail_at("JSON nesting is too deep", "")
    except ValueError as e:  # JSONDecodeError, UnicodeDecodeError
        fail_at(f"malformed JSON: {e}", "")


# ---------------------------------------------------------------------------
# Encoding
# ---------------------------------------------------------------------------

class _Encoder(ExprEncoder):
    def __init__(self, dag: Any):
        ops = list(dag.ops)
        known = {id(op) for op in ops}
        for t in dag.tensors:  # argument placeholders that no output reads
            if id(t.op) not in known:
                known.add(id(t.op))
                ops.append(t.op)
        self.dag, self.ops = dag, ops
        self.op_index = {id(op): k for k, op in enumerate(ops)}
        self.var_ids: dict[int, int] = {}
        self.vars: list = []

    def payload(self) -> dict:
        ops = [self.op(op, k) for k, op in enumerate(self.ops)]
        tensors = [self.ref(t, len(self.ops), f"tensors[{k}]") for k, t in enumerate(self.dag.tensors)]
        return {"format": FORMAT, "version": VERSION, "vars": self.vars, "ops": ops,
                "tensors": tensors}

    def var(self, v: Var) -> int:
        if id(v) not in self.var_ids:
            self.var_ids[id(v)] = len(self.vars)
            self.vars.append({"name": v.name, "dtype": v.dtype})
        return self.var_ids[id(v)]

    def ref(self, t: Any, before: int, where: str) -> list:
        k = self.op_index.get(id(getattr(t, "op", None)))
        if not isinstance(t, Tensor) or k is None or k >= before:
            fail_at(f"{t!r} is not a tensor of an earlier op of the DAG", where)
        return [k, t.value_index]

    def op(self, op: Any, k: int) -> dict:
        where = f"ops[{k}]"
        if isinstance(op, PlaceholderOp):
            return {"kind": "placeholder", "name": op.name, "dtype": op.dtype,
                    "shape": [self.expr(s, k) for s in op.shape]}
        if isinstance(op, ComputeOp):
            for iv in op.axis:
                if iv.kind != "spatial" or const_value(iv.dom_min) != 0:
                    fail_at(f"axis {iv.var.name} is not a spatial axis starting at 0", where)
            shape = [self.expr(iv.dom_extent, k) for iv in op.axis]
            axis = [self.var(iv.var) for iv in op.axis]
            # One output: its body; several (a multi-output compute): the list of bodies.
            body = self.expr(op.body, k) if op.num_outputs == 1 else [self.expr(b, k) for b in op.bodies]
            return {"kind": "compute", "name": op.name, "shape": shape, "axis": axis, "body": body,
                    "attrs": self.attrs(op.attrs, k), "tag": op.tag}
        if isinstance(op, ScanOp):
            refs = {f: [self.ref(t, k, f"{where}.{f}[{j}]") for j, t in enumerate(getattr(op, f))]
                    for f in ("init", "update", "state_placeholder", "inputs")}
            return {"kind": "scan", "name": op.name, "scan_axis": self.iter_var(op.scan_axis, k),
                    **refs}
        fail_at(f"unknown op type {type(op).__name__}", where)

    def iter_var(self, iv: IterVar, k: int) -> dict:
        return {"var": self.var(iv.var), "min": self.expr(iv.dom_min, k),
                "extent": self.expr(iv.dom_extent, k)}

    def attrs(self, attrs: dict, k: int) -> dict:
        def refs(val: Any, where: str) -> list:
            return [self.ref(t, k, f"{where}[{j}]") for j, t in enumerate(val)]
        return map_attrs(attrs, f"ops[{k}].attrs", refs, _plain_json)


def map_attrs(attrs: dict, path: str, tensors: Callable[[Any, str], list],
              plain: Callable[[Any, str], Any]) -> dict:
    """``attrs`` (an op's attrs, at ``path``) with the :data:`TENSOR_ATTR` list mapped by
    ``tensors(value, where)`` and every other value by ``plain(value, where)``; the
    encoder and the decoder share it.  Fails (InvalidWorkloadError) on a non-string key."""
    out = {}
    for key, val in attrs.items():
        if not isinstance(key, str):
            fail_at(f"attr key {key!r} is not a string", path)
        out[key] = (tensors if key == TENSOR_ATTR else plain)(val, f"{path}.{key}")
    return out


def _plain_json(val: Any, where: str, depth: int = 0) -> Any:
    if depth > 64:
        fail_at("attr value nested too deeply", where)
    if val is None or isinstance(val, (str, bool, int)):
        return val
    if isinstance(val, float) and math.isfinite(val):
        return val
    if isinstance(val, (list, tuple)):
        return [_plain_json(v, f"{where}[{j}]", depth + 1) for j, v in enumerate(val)]
    fail_at(f"attr value {val!r} is not a JSON scalar or list", where)


# ---------------------------------------------------------------------------
# Decoding
# ---------------------------------------------------------------------------

class _Decoder(ExprDecoder):
    def __init__(self, max_elements: int, max_total_elements: int, max_depth: int, max_nodes: int,
                 require_concrete_shapes: bool = False):
        self.max_elements, self.max_total = max_elements, max_total_elements
        self.concrete = require_concrete_shapes
        self.index_env: dict = {}  # Var -> Interval of the axes of the compute being decoded
        self.max_depth, self.max_nodes = max_depth, max_nodes
        self.nodes = 0
        self.total_elements = 0
        self.vars: list = []
        self.ops: list = []
        self.n_ops = 0
        self.bound_by: dict[int, int] = {}  # var id -> first op that binds it as an axis
        self.free_used: dict[int, str] = {}  # var id -> first path using it as a free variable
        self.refs: list = []  # (var id, path, in_shape) of the op being decoded
        self.bound: dict = {}  # var id -> path, the axes of the compute being decoded

    # -- top level ---------------------------------------------------------
    def dag(self, obj: Any) -> list:
        self.fields(obj, "", ("format", "version", "vars", "ops", "tensors"), "a ComputeDAG payload")
        if obj["format"] != FORMAT:
            fail_at(f"format is {obj['format']!r}, expected {FORMAT!r}", "format")
        version = self.typed(obj, "version", "", int)
        if version > VERSION:
            fail_at(f"format version {version} is newer than this reader's ({VERSION})", "version")
        if version != VERSION:
            fail_at(f"unknown format version {version}", "version")
        for k, v in enumerate(self.array(obj, "vars", "")):
            path = f"vars[{k}]"
            self.count(path)
            self.fields(v, path, ("name", "dtype"), "a variable")
            self.vars.append(Var(self.name(v, path), self.dtype(v, path)))
        ops = self.array(obj, "ops", "")
        self.n_ops = len(ops)
        for k, o in enumerate(ops):
            self.count(f"ops[{k}]")
            self.ops.append(self.op(o, k))
        refs = self.array(obj, "tensors", "")
        if not refs:
            fail_at("a ComputeDAG needs at least one tensor", "tensors")
        tensors = [self.tensor_ref(r, f"tensors[{j}]", self.n_ops) for j, r in enumerate(refs)]
        first: dict = {}
        for j, t in enumerate(tensors):
            key = (id(t.op), t.value_index)
            if key in first:
                fail_at(f"tensor {t.op.name} is listed twice in tensors (tensors[{first[key]}] and "
                        f"tensors[{j}]): each argument is one buffer", f"tensors[{j}]")
            first[key] = j
        try:
            reachable = dag_ops(tensors)
        except InvalidWorkloadError as e:
            fail_at(str(e), "tensors")
        used = {id(op) for op in reachable} | {id(t.op) for t in tensors}
        for k, op in enumerate(self.ops):
            if id(op) not in used:
                fail_at(f"op {op.name} is neither read by the DAG's outputs nor an argument", f"ops[{k}]")
        # Every access inside its tensor; errors name the op as ops[k].
        check_ops_access_bounds(self.ops, [f"ops[{k}]" for k in range(len(self.ops))])
        return tensors

    def name(self, obj: dict, path: str) -> str:
        """An op's or variable's ``name``: a string of 1 to MAX_NAME_CHARS characters."""
        name = self.typed(obj, "name", path, str)
        if not 0 < len(name) <= MAX_NAME_CHARS:
            fail_at(f"a name must have 1 to {MAX_NAME_CHARS} characters, this one has {len(name)}",
                    f"{path}.name")
        return name

    # -- ops ----------------------------------------------------------------
    def op(self, o: Any, k: int) -> Any:
        path = f"ops[{k}]"
        if not isinstance(o, dict):
            fail_at(f"an op must be a JSON object, not {type(o).__name__}", path)
        kind = self.kind_fields(o, path, _OP_FIELDS, "op", f" (expected one of {', '.join(_OP_FIELDS)})")
        name = self.name(o, path)
        self.refs = []
        if kind == "placeholder":
            op = PlaceholderOp(name, self.shape(o, path, k), self.dtype(o, path))
            bound: dict = {}
        elif kind == "compute":
            op, bound = self.compute(o, path, k, name)
        else:
            op, bound = self.scan(o, path, k, name)
        self.close_scope(bound)
        self.index_env = {}
        for j in range(op.num_outputs):
            where = f"{path}.update[{j}]" if kind == "scan" else f"{path}.shape"
            self.check_elements(op.output_shape(j), where)
        return op

    def shape(self, o: dict, path: str, k: int) -> tuple:
        out = []
        for j, s in enumerate(self.array(o, "shape", path)):
            out.append(self.extent(s, f"{path}.shape[{j}]", k, "a shape dimension"))
        return tuple(out)

    def extent(self, obj: Any, path: str, k: int, what: str = "an extent", least: int | None = 1) -> Expr:
        """A shape dimension or range expression (see :meth:`check_extent`)."""
        e = self.expr(obj, path, k, in_shape=True)
        return self.check_extent(e, path, what, least)

    def check_extent(self, e: Expr, path: str, what: str, least: int | None = 1) -> Expr:
        """``e`` must be an integer; when constant, at least ``least`` (1 for extents, 0 for
        a scan's start, None: any); symbolic only when concrete shapes are not required."""
        if not is_int(e.dtype):
            fail_at(f"{what} must be an integer expression, not {e.dtype}", path)
        names = sorted({v.name for v in free_vars(e)})
        if names and self.concrete:
            fail_at(f"{what} is symbolic (uses {', '.join(names)}); tuning needs concrete shapes", path)
        value = const_value(e)
        if value is None and not names:
            fail_at(f"{what} has no variables but does not evaluate (division by zero?)", path)
        if value is not None and least is not None and value < least:
            fail_at(f"{what} is {'negative' if value < 0 else 'zero'} ({value}); it must be at least {least}",
                    path)
        return e

    def check_elements(self, shape: tuple, path: str) -> None:
        values = [v for v in map(const_value, shape) if isinstance(v, int)]  # extents are integer
        if len(values) != len(shape):
            return  # symbolic: bounded when bound
        n = math.prod(values)
        if n > self.max_elements:
            fail_at(f"{n} elements exceed max_elements={self.max_elements}", path)
        self.total_elements += n
        if self.total_elements > self.max_total:
            fail_at(f"tensors hold {self.total_elements} elements in all, over "
                  f"max_total_elements={self.max_total}", path)

    def bind(self, bound: dict, obj: Any, path: str) -> Var:
        v = self.var_ref(obj, path)
        if not is_int(v.dtype):
            fail_at(f"axis variable {v.name} has dtype {v.dtype}; axes must be integers", path)
        if obj in bound:
            fail_at(f"variable {v.name} (vars[{obj}]) is bound twice in this op", path)
        bound[obj] = path
        return v

    def compute(self, o: dict, path: str, k: int, name: str) -> tuple:
        shape = self.shape(o, path, k)
        ids = self.array(o, "axis", path)
        if len(ids) != len(shape):
            fail_at(f"compute has {len(ids)} axes but its shape has {len(shape)} dimensions", f"{path}.axis")
        bound: dict = {}
        axis = tuple(IterVar(self.bind(bound, vid, f"{path}.axis[{j}]"), IntImm(0, "int32"), ext, "spatial")
                     for j, (vid, ext) in enumerate(zip(ids, shape)))
        self.bound = bound
        self.index_env = {iv.var: Interval(iv.dom_min, iv.dom_extent) for iv in axis}
        raw = o["body"]
        if not isinstance(raw, list):
            bodies = [self.expr(raw, f"{path}.body", k, allow_reduce=True)]
        else:  # a multi-output compute: one body per output, reductions over the same axes
            if len(raw) < 2:
                fail_at("a list of bodies (a multi-output compute) needs at least two", f"{path}.body")
            spatial = dict(bound)
            bodies = []
            for j, b in enumerate(raw):
                self.bound = dict(spatial)  # each body may bind the shared reduce axes again
                bodies.append(self.expr(b, f"{path}.body[{j}]", k, allow_reduce=True))
                bound.update(self.bound)
            self.bound = bound
        attrs = self.attrs(o, path, k)
        tag = self.typed(o, "tag", path, str)
        try:
            op = ComputeOp(name, axis, bodies[0], attrs, tag, tuple(bodies[1:]))
        except InvalidWorkloadError as e:
            fail_at(str(e), f"{path}.body")
        check_iter_names(op, path)
        return op, bound

    def attrs(self, o: dict, path: str, k: int) -> dict:
        def refs(val: Any, where: str) -> list:
            if not isinstance(val, list):
                fail_at("must be a list of tensor references", where)
            return [self.tensor_ref(r, f"{where}[{j}]", k) for j, r in enumerate(val)]
        attrs = map_attrs(self.typed(o, "attrs", path, dict), f"{path}.attrs", refs, self.plain)
        flop = attrs.get("FLOP")
        if isinstance(flop, int) and is_json_int(flop) and not 0 <= flop <= MAX_FLOP_ATTR:
            fail_at(f"FLOP must be an integer in [0, {MAX_FLOP_ATTR}], got {_short(flop)}", f"{path}.attrs.FLOP")
        return attrs

    def plain(self, val: Any, path: str) -> Any:
        """Check an attr value (JSON scalars and lists) iteratively; returns it."""
        stack = [(val, path, 1)]
        while stack:
            v, p, d = stack.pop()
            self.count(p)
            if d > self.max_depth:
                fail_at(f"attr value nested deeper than max_depth={self.max_depth}", p)
            if isinstance(v, list):
                stack.extend((x, f"{p}[{j}]", d + 1) for j, x in enumerate(v))
            elif isinstance(v, float) and not math.isfinite(v):
                fail_at("attr values must be finite", p)
            elif not (v is None or isinstance(v, (str, bool, int, float))):
                fail_at(f"attr values must be JSON scalars or lists, not {type(v).__name__}", p)
        return val

    def scan(self, o: dict, path: str, k: int, name: str) -> tuple:
        ax = self.fields(o["scan_axis"], f"{path}.scan_axis", ("var", "min", "extent"), "a scan axis")
        lo = self.extent(ax["min"], f"{path}.scan_axis.min", k, "a scan's start", least=0)
        extent = self.extent(ax["extent"], f"{path}.scan_axis.extent", k, "a scan's extent")
        bound: dict = {}
        axis = IterVar(self.bind(bound, ax["var"], f"{path}.scan_axis.var"), lo, extent, "scan")
        groups = {f: tuple(self.tensor_ref(r, f"{path}.{f}[{j}]", k)
                           for j, r in enumerate(self.array(o, f, path)))
                  for f in ("init", "update", "state_placeholder", "inputs")}
        n = len(groups["update"])
        if n == 0 or len(groups["init"]) != n or len(groups["state_placeholder"]) != n:
            fail_at("init, update and state_placeholder must be non-empty and of equal length", path)
        for j, (i, u, s) in enumerate(zip(groups["init"], groups["update"], groups["state_placeholder"])):
            if not isinstance(s.op, PlaceholderOp):
                fail_at(f"state {s.name} is not a placeholder", f"{path}.state_placeholder[{j}]")
            if not (len(i.shape) == len(u.shape) == len(s.shape)):
                fail_at("init, update and state differ in rank", f"{path}.update[{j}]")
        return ScanOp(name, axis, groups["init"], groups["update"], groups["state_placeholder"],
                      groups["inputs"]), bound

    # -- references ---------------------------------------------------------
    def var_ref(self, vid: Any, path: str) -> Var:
        if not is_json_int(vid):
            fail_at(f"a variable id must be an integer, not {type(vid).__name__}", path)
        if not 0 <= vid < len(self.vars):
            fail_at(f"dangling variable id {vid} ({len(self.vars)} variables)", path)
        return self.vars[vid]

    def tensor_ref(self, ref: Any, path: str, before: int) -> Tensor:
        """``[op_index, value_index]`` of an op decoded before op ``before``."""
        if not (isinstance(ref, list) and len(ref) == 2 and all(is_json_int(x) for x in ref)):
            fail_at("a tensor reference must be [op_index, value_index]", path)
        k, v = ref
        if not 0 <= k < self.n_ops:
            fail_at(f"dangling op index {k} ({self.n_ops} ops)", path)
        if k >= before:
            fail_at(f"op {k} is not before this one; ops must be in topological order (no cycles)", path)
        op = self.ops[k]
        if not 0 <= v < op.num_outputs:
            fail_at(f"value index {v} is out of range: op {op.name} has {op.num_outputs} output(s)", path)
        return op.output(v)

    def close_scope(self, bound: dict) -> None:
        """Check the variables the op just decoded uses: its own axes, or free
        variables (symbolic shapes) that no op binds."""
        for vid, path, in_shape in self.refs:
            name = self.vars[vid].name
            if vid in bound and in_shape:
                fail_at(f"extent uses this op's own axis variable {name}", path)
            if vid in bound:
                continue
            if vid in self.bound_by:
                fail_at(f"variable {name} (vars[{vid}]) is an axis of ops[{self.bound_by[vid]}], "
                      "not of this op", path)
            self.free_used.setdefault(vid, path)
        for vid, path in bound.items():
            if vid in self.free_used:
                fail_at(f"variable {self.vars[vid].name} (vars[{vid}]) is used as a free variable at "
                      f"{self.free_used[vid]} and bound as an axis here", path)
            self.bound_by.setdefault(vid, len(self.ops))
        self.refs = []
