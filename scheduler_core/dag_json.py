"""The JSON wire format of a ComputeDAG (format ``autosched.compute_dag``, version 1).

    ComputeDAG --dag_to_json--> dict --canonical_dumps--> text --sha256--> workload_key
    text | dict --dag_from_json (validates; iterative, never evaluates)--> ComputeDAG

The service receives DAGs in this form (DESIGN.md, "Service"), records name them
by the hash of its canonical text, and ``dag_from_json(dag_to_json(d))`` rebuilds
``d`` exactly.  The schema and every validation error are documented in
``docs/dag_json_schema.md``.  It plays the role of TVM's ``SaveJSON`` of a
ComputeDAG, restricted to what a tensor-expression workload needs.

Reading guide: ``_Encoder`` (DAG -> dict) first, then ``_Decoder`` (dict -> DAG):
top level, ops, expressions (an explicit stack, so a hostile 100000-deep payload
fails with InvalidWorkloadError instead of RecursionError), then references.
"""

from __future__ import annotations

import json
import math
from typing import Any

from .compute_dag import ComputeDAG
from .errors import InvalidWorkloadError
from .expr import (
    BINARY_OPS, CMP_OPS, DTYPES, INTRINSICS, REDUCERS, BinaryOp, Call, Cast, CmpOp, Expr,
    FloatImm, IntImm, IterVar, LogicalOp, Not, Reduce, Select, TensorLoad, Var, children,
    const_value, dtype_bits, free_vars, is_float, is_int,
)
from .tensor import ComputeOp, PlaceholderOp, ScanOp, Tensor

FORMAT = "autosched.compute_dag"
VERSION = 1
TENSOR_ATTR = "layout_free_placeholders"  # the one attr whose value is a list of tensors
INT_OR_BOOL = tuple(d for d in DTYPES if not is_float(d))
FLOATS = tuple(d for d in DTYPES if is_float(d))
_NON_FINITE = {"inf": math.inf, "-inf": -math.inf, "nan": math.nan}
_EXPR_FIELDS = {
    "int": ("value", "dtype"), "float": ("value", "dtype"), "var": ("id",),
    "binary": ("op", "a", "b", "dtype"), "cmp": ("op", "a", "b"), "logical": ("op", "a", "b"),
    "not": ("a",), "select": ("cond", "true_value", "false_value", "dtype"),
    "cast": ("value", "dtype"), "call": ("name", "args", "dtype"),
    "load": ("tensor", "indices", "dtype"), "reduce": ("combiner", "source", "axis", "condition", "dtype"),
}
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
        _fail("expressions nest too deeply to serialize", "")


def dag_to_json(dag: ComputeDAG) -> dict:
    """The JSON object (plain dicts/lists) of ``dag``: ``{"format", "version", "vars",
    "ops", "tensors"}``.  Ops are ``dag.ops`` in order, then any argument op that no
    output reads.  Raises InvalidWorkloadError for what the format cannot hold:
    lowered-only nodes, non-JSON attrs, references outside the DAG."""
    return _Encoder(dag).payload()


def dag_from_json(obj: dict | str | bytes, *, max_elements: int = 2**31,
                  max_total_elements: int = 2**33, max_depth: int = 256,
                  max_nodes: int = 100_000) -> ComputeDAG:
    """Validate ``obj`` (a payload dict or its JSON text) and build the ComputeDAG.

    max_elements: most elements of one tensor with a constant shape.
    max_total_elements: most elements over all tensors with constant shapes.
    max_depth: deepest expression nesting (a leaf has depth 1).
    max_nodes: most expression nodes, variables, ops and attr values in all.
    Raises InvalidWorkloadError(message, path=...) with ``path`` naming the
    offending node, e.g. ``ops[3].body.b.indices[1]``.
    """
    if isinstance(obj, (str, bytes, bytearray)):
        obj = _parse_text(obj)
    return _Decoder(max_elements, max_total_elements, max_depth, max_nodes).dag(obj)


def _fail(message: str, path: str):
    raise InvalidWorkloadError(message, path=path)


def _reject_constant(name: str):
    _fail(f"{name} is not valid JSON; write non-finite floats as \"inf\", \"-inf\", \"nan\"", "")


def _parse_text(text) -> Any:
    try:
        return json.loads(text, parse_constant=_reject_constant)
    except InvalidWorkloadError:
        raise
    except RecursionError:
        _fail("JSON nesting is too deep", "")
    except ValueError as e:  # JSONDecodeError, UnicodeDecodeError
        _fail(f"malformed JSON: {e}", "")


# ---------------------------------------------------------------------------
# Encoding
# ---------------------------------------------------------------------------

class _Encoder:
    def __init__(self, dag: ComputeDAG):
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
            _fail(f"{t!r} is not a tensor of an earlier op of the DAG", where)
        return [k, t.value_index]

    def op(self, op: Any, k: int) -> dict:
        where = f"ops[{k}]"
        if isinstance(op, PlaceholderOp):
            return {"kind": "placeholder", "name": op.name, "dtype": op.dtype,
                    "shape": [self.expr(s, k) for s in op.shape]}
        if isinstance(op, ComputeOp):
            for iv in op.axis:
                if iv.kind != "spatial" or const_value(iv.dom_min) != 0:
                    _fail(f"axis {iv.var.name} is not a spatial axis starting at 0", where)
            shape = [self.expr(iv.dom_extent, k) for iv in op.axis]
            return {"kind": "compute", "name": op.name, "shape": shape,
                    "axis": [self.var(iv.var) for iv in op.axis], "body": self.expr(op.body, k),
                    "attrs": self.attrs(op.attrs, k), "tag": op.tag}
        if isinstance(op, ScanOp):
            refs = {f: [self.ref(t, k, f"{where}.{f}[{j}]") for j, t in enumerate(getattr(op, f))]
                    for f in ("init", "update", "state_placeholder", "inputs")}
            return {"kind": "scan", "name": op.name, "scan_axis": self.iter_var(op.scan_axis, k),
                    **refs}
        _fail(f"unknown op type {type(op).__name__}", where)

    def iter_var(self, iv: IterVar, k: int) -> dict:
        return {"var": self.var(iv.var), "min": self.expr(iv.dom_min, k),
                "extent": self.expr(iv.dom_extent, k)}

    def attrs(self, attrs: dict, k: int) -> dict:
        out = {}
        for key, val in attrs.items():
            where = f"ops[{k}].attrs.{key}"
            if not isinstance(key, str):
                _fail(f"attr key {key!r} is not a string", f"ops[{k}].attrs")
            if key == TENSOR_ATTR:
                out[key] = [self.ref(t, k, f"{where}[{j}]") for j, t in enumerate(val)]
            else:
                out[key] = _plain_json(val, where)
        return out

    def expr(self, root: Expr, k: int) -> Any:
        """Post-order with an explicit stack (te may build very deep chains)."""
        vals: list = []
        stack: list = [(root, False)]
        while stack:
            node, built = stack.pop()
            kids = _encode_children(node, k)
            if not built:
                stack.append((node, True))
                stack.extend((c, False) for c in reversed(kids))
                continue
            got = vals[len(vals) - len(kids):]
            del vals[len(vals) - len(kids):]
            vals.append(self.node(node, got, k))
        return vals[0]

    def node(self, e: Expr, kids: list, k: int) -> Any:
        if isinstance(e, IntImm):
            if e.dtype == "int32":
                return int(e.value)
            return {"kind": "int", "value": int(e.value), "dtype": e.dtype}
        if isinstance(e, FloatImm):
            v = float(e.value)
            value = v if math.isfinite(v) else ("nan" if math.isnan(v) else ("inf" if v > 0 else "-inf"))
            return {"kind": "float", "value": value, "dtype": e.dtype}
        if isinstance(e, Var):
            return {"kind": "var", "id": self.var(e)}
        if isinstance(e, BinaryOp):
            return {"kind": "binary", "op": e.op, "a": kids[0], "b": kids[1], "dtype": e.dtype}
        if isinstance(e, (CmpOp, LogicalOp)):
            kind = "cmp" if isinstance(e, CmpOp) else "logical"
            return {"kind": kind, "op": e.op, "a": kids[0], "b": kids[1]}
        if isinstance(e, Not):
            return {"kind": "not", "a": kids[0]}
        if isinstance(e, Select):
            return {"kind": "select", "cond": kids[0], "true_value": kids[1],
                    "false_value": kids[2], "dtype": e.dtype}
        if isinstance(e, Cast):
            return {"kind": "cast", "value": kids[0], "dtype": e.dtype}
        if isinstance(e, Call):
            return {"kind": "call", "name": e.name, "args": kids, "dtype": e.dtype}
        if isinstance(e, TensorLoad):
            return {"kind": "load", "tensor": self.ref(e.tensor, k, f"ops[{k}]"), "indices": kids,
                    "dtype": e.dtype}
        n_src = 1 if e.condition is None else 2
        axis = [{"var": self.var(iv.var), "min": kids[n_src + 2 * j], "extent": kids[n_src + 2 * j + 1]}
                for j, iv in enumerate(e.axis)]
        return {"kind": "reduce", "combiner": e.combiner, "source": kids[0], "axis": axis,
                "condition": kids[1] if n_src == 2 else None, "dtype": e.dtype}


def _encode_children(e: Any, k: int) -> list:
    if isinstance(e, Reduce):
        out = [e.source] + ([] if e.condition is None else [e.condition])
        for iv in e.axis:
            out += [iv.dom_min, iv.dom_extent]
        return out
    if not isinstance(e, (IntImm, FloatImm, Var, BinaryOp, CmpOp, LogicalOp, Not, Select, Cast,
                          Call, TensorLoad)):
        _fail(f"{type(e).__name__} cannot appear in a ComputeDAG", f"ops[{k}]")
    return list(children(e))


def _plain_json(val: Any, where: str, depth: int = 0) -> Any:
    if depth > 64:
        _fail("attr value nested too deeply", where)
    if val is None or isinstance(val, (str, bool, int)):
        return val
    if isinstance(val, float) and math.isfinite(val):
        return val
    if isinstance(val, (list, tuple)):
        return [_plain_json(v, f"{where}[{j}]", depth + 1) for j, v in enumerate(val)]
    _fail(f"attr value {val!r} is not a JSON scalar or list", where)


# ---------------------------------------------------------------------------
# Decoding
# ---------------------------------------------------------------------------

def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _int_range(dtype: str) -> tuple[int, int]:
    if dtype == "bool":
        return 0, 1
    bits = dtype_bits(dtype)
    return (0, 2**bits - 1) if dtype.startswith("uint") else (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)


class _Decoder:
    def __init__(self, max_elements: int, max_total_elements: int, max_depth: int, max_nodes: int):
        self.max_elements, self.max_total = max_elements, max_total_elements
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

    # -- generic checks ----------------------------------------------------
    def count(self, path: str) -> None:
        self.nodes += 1
        if self.nodes > self.max_nodes:
            _fail(f"payload has more than max_nodes={self.max_nodes} nodes", path)

    def fields(self, obj: Any, path: str, required: tuple, what: str) -> dict:
        if not isinstance(obj, dict):
            _fail(f"{what} must be a JSON object, not {type(obj).__name__}", path)
        for f in required:
            if f not in obj:
                _fail(f"{what} is missing field {f!r}", path)
        extra = sorted(str(f) for f in obj if f not in required)
        if extra:
            _fail(f"{what} has unknown field(s) {', '.join(map(repr, extra))}", path)
        return obj

    def typed(self, obj: dict, key: str, path: str, kind: type) -> Any:
        val = obj[key]
        ok = _is_int(val) if kind is int else isinstance(val, kind)
        if not ok:
            _fail(f"must be a {kind.__name__}, not {type(val).__name__}", f"{path}.{key}" if path else key)
        return val

    def dtype(self, obj: dict, path: str, allowed=DTYPES) -> str:
        d = obj["dtype"]
        if not isinstance(d, str) or d not in DTYPES:
            _fail(f"unknown dtype {d!r}", f"{path}.dtype")
        if d not in allowed:
            _fail(f"dtype {d} is not allowed here", f"{path}.dtype")
        return d

    def array(self, obj: dict, key: str, path: str) -> list:
        return self.typed(obj, key, path, list)

    # -- top level ---------------------------------------------------------
    def dag(self, obj: Any) -> ComputeDAG:
        self.fields(obj, "", ("format", "version", "vars", "ops", "tensors"), "a ComputeDAG payload")
        if obj["format"] != FORMAT:
            _fail(f"format is {obj['format']!r}, expected {FORMAT!r}", "format")
        version = self.typed(obj, "version", "", int)
        if version > VERSION:
            _fail(f"format version {version} is newer than this reader's ({VERSION})", "version")
        if version != VERSION:
            _fail(f"unknown format version {version}", "version")
        for k, v in enumerate(self.array(obj, "vars", "")):
            path = f"vars[{k}]"
            self.count(path)
            self.fields(v, path, ("name", "dtype"), "a variable")
            self.vars.append(Var(self.typed(v, "name", path, str), self.dtype(v, path)))
        ops = self.array(obj, "ops", "")
        self.n_ops = len(ops)
        for k, o in enumerate(ops):
            self.count(f"ops[{k}]")
            self.ops.append(self.op(o, k))
        refs = self.array(obj, "tensors", "")
        if not refs:
            _fail("a ComputeDAG needs at least one tensor", "tensors")
        tensors = [self.tensor_ref(r, f"tensors[{j}]", self.n_ops) for j, r in enumerate(refs)]
        try:
            dag = ComputeDAG(tensors)
        except InvalidWorkloadError as e:
            _fail(str(e), "tensors")
        used = {id(op) for op in dag.ops} | {id(t.op) for t in tensors}
        for k, op in enumerate(self.ops):
            if id(op) not in used:
                _fail(f"op {op.name} is neither read by the DAG's outputs nor an argument", f"ops[{k}]")
        return dag

    # -- ops ----------------------------------------------------------------
    def op(self, o: Any, k: int) -> Any:
        path = f"ops[{k}]"
        if not isinstance(o, dict):
            _fail(f"an op must be a JSON object, not {type(o).__name__}", path)
        kind = o.get("kind")
        if not isinstance(kind, str) or kind not in _OP_FIELDS:
            _fail(f"unknown op kind {kind!r} (expected one of {', '.join(_OP_FIELDS)})", f"{path}.kind")
        self.fields(o, path, ("kind",) + _OP_FIELDS[kind], f"a {kind} op")
        name = self.typed(o, "name", path, str)
        self.refs = []
        if kind == "placeholder":
            op = PlaceholderOp(name, self.shape(o, path, k), self.dtype(o, path))
            bound: dict = {}
        elif kind == "compute":
            op, bound = self.compute(o, path, k, name)
        else:
            op, bound = self.scan(o, path, k, name)
        self.close_scope(bound)
        for j in range(op.num_outputs):
            where = f"{path}.update[{j}]" if kind == "scan" else f"{path}.shape"
            self.check_elements(op.output_shape(j), where)
        return op

    def shape(self, o: dict, path: str, k: int) -> tuple:
        out = []
        for j, s in enumerate(self.array(o, "shape", path)):
            out.append(self.extent(s, f"{path}.shape[{j}]", k))
        return tuple(out)

    def extent(self, obj: Any, path: str, k: int, what: str = "an extent") -> Expr:
        e = self.expr(obj, path, k, in_shape=True)
        if not is_int(e.dtype):
            _fail(f"{what} must be an integer expression, not {e.dtype}", path)
        value = const_value(e)
        if value is None and not free_vars(e):
            _fail(f"{what} has no variables but does not evaluate (division by zero?)", path)
        if value is not None and value < 0:
            _fail(f"{what} is negative ({value})", path)
        return e

    def check_elements(self, shape: tuple, path: str) -> None:
        values = [const_value(s) for s in shape]
        if any(v is None for v in values):
            return  # symbolic: bounded when bound
        n = math.prod(values)
        if n > self.max_elements:
            _fail(f"{n} elements exceed max_elements={self.max_elements}", path)
        self.total_elements += n
        if self.total_elements > self.max_total:
            _fail(f"tensors hold {self.total_elements} elements in all, over "
                  f"max_total_elements={self.max_total}", path)

    def bind(self, bound: dict, obj: Any, path: str) -> Var:
        v = self.var_ref(obj, path)
        if not is_int(v.dtype):
            _fail(f"axis variable {v.name} has dtype {v.dtype}; axes must be integers", path)
        if obj in bound:
            _fail(f"variable {v.name} (vars[{obj}]) is bound twice in this op", path)
        bound[obj] = path
        return v

    def compute(self, o: dict, path: str, k: int, name: str) -> tuple:
        shape = self.shape(o, path, k)
        ids = self.array(o, "axis", path)
        if len(ids) != len(shape):
            _fail(f"compute has {len(ids)} axes but its shape has {len(shape)} dimensions", f"{path}.axis")
        bound: dict = {}
        axis = tuple(IterVar(self.bind(bound, vid, f"{path}.axis[{j}]"), IntImm(0, "int32"), ext, "spatial")
                     for j, (vid, ext) in enumerate(zip(ids, shape)))
        self.bound = bound
        body = self.expr(o["body"], f"{path}.body", k, allow_reduce=True)
        attrs = self.attrs(o, path, k)
        return ComputeOp(name, axis, body, attrs, self.typed(o, "tag", path, str)), bound

    def attrs(self, o: dict, path: str, k: int) -> dict:
        attrs = self.typed(o, "attrs", path, dict)
        out = {}
        for key, val in attrs.items():
            where = f"{path}.attrs.{key}"
            if not isinstance(key, str):
                _fail(f"attr key {key!r} is not a string", f"{path}.attrs")
            if key == TENSOR_ATTR:
                if not isinstance(val, list):
                    _fail("must be a list of tensor references", where)
                out[key] = [self.tensor_ref(r, f"{where}[{j}]", k) for j, r in enumerate(val)]
            else:
                out[key] = self.plain(val, where)
        return out

    def plain(self, val: Any, path: str) -> Any:
        """Check an attr value (JSON scalars and lists) iteratively; returns it."""
        stack = [(val, path, 1)]
        while stack:
            v, p, d = stack.pop()
            self.count(p)
            if d > self.max_depth:
                _fail(f"attr value nested deeper than max_depth={self.max_depth}", p)
            if isinstance(v, list):
                stack.extend((x, f"{p}[{j}]", d + 1) for j, x in enumerate(v))
            elif isinstance(v, float) and not math.isfinite(v):
                _fail("attr values must be finite", p)
            elif not (v is None or isinstance(v, (str, bool, int, float))):
                _fail(f"attr values must be JSON scalars or lists, not {type(v).__name__}", p)
        return val

    def scan(self, o: dict, path: str, k: int, name: str) -> tuple:
        ax = self.fields(o["scan_axis"], f"{path}.scan_axis", ("var", "min", "extent"), "a scan axis")
        lo = self.extent(ax["min"], f"{path}.scan_axis.min", k)
        extent = self.extent(ax["extent"], f"{path}.scan_axis.extent", k)
        bound: dict = {}
        axis = IterVar(self.bind(bound, ax["var"], f"{path}.scan_axis.var"), lo, extent, "scan")
        groups = {f: tuple(self.tensor_ref(r, f"{path}.{f}[{j}]", k)
                           for j, r in enumerate(self.array(o, f, path)))
                  for f in ("init", "update", "state_placeholder", "inputs")}
        n = len(groups["update"])
        if n == 0 or len(groups["init"]) != n or len(groups["state_placeholder"]) != n:
            _fail("init, update and state_placeholder must be non-empty and of equal length", path)
        for j, (i, u, s) in enumerate(zip(groups["init"], groups["update"], groups["state_placeholder"])):
            if not isinstance(s.op, PlaceholderOp):
                _fail(f"state {s.name} is not a placeholder", f"{path}.state_placeholder[{j}]")
            if not (len(i.shape) == len(u.shape) == len(s.shape)):
                _fail("init, update and state differ in rank", f"{path}.update[{j}]")
        return ScanOp(name, axis, groups["init"], groups["update"], groups["state_placeholder"],
                      groups["inputs"]), bound

    # -- references ---------------------------------------------------------
    def var_ref(self, vid: Any, path: str) -> Var:
        if not _is_int(vid):
            _fail(f"a variable id must be an integer, not {type(vid).__name__}", path)
        if not 0 <= vid < len(self.vars):
            _fail(f"dangling variable id {vid} ({len(self.vars)} variables)", path)
        return self.vars[vid]

    def tensor_ref(self, ref: Any, path: str, before: int) -> Tensor:
        """``[op_index, value_index]`` of an op decoded before op ``before``."""
        if not (isinstance(ref, list) and len(ref) == 2 and all(_is_int(x) for x in ref)):
            _fail("a tensor reference must be [op_index, value_index]", path)
        k, v = ref
        if not 0 <= k < self.n_ops:
            _fail(f"dangling op index {k} ({self.n_ops} ops)", path)
        if k >= before:
            _fail(f"op {k} is not before this one; ops must be in topological order (no cycles)", path)
        op = self.ops[k]
        if not 0 <= v < op.num_outputs:
            _fail(f"value index {v} is out of range: op {op.name} has {op.num_outputs} output(s)", path)
        return op.output(v)

    def close_scope(self, bound: dict) -> None:
        """Check the variables the op just decoded uses: its own axes, or free
        variables (symbolic shapes) that no op binds."""
        for vid, path, in_shape in self.refs:
            name = self.vars[vid].name
            if vid in bound and in_shape:
                _fail(f"extent uses this op's own axis variable {name}", path)
            if vid in bound:
                continue
            if vid in self.bound_by:
                _fail(f"variable {name} (vars[{vid}]) is an axis of ops[{self.bound_by[vid]}], "
                      "not of this op", path)
            self.free_used.setdefault(vid, path)
        for vid, path in bound.items():
            if vid in self.free_used:
                _fail(f"variable {self.vars[vid].name} (vars[{vid}]) is used as a free variable at "
                      f"{self.free_used[vid]} and bound as an axis here", path)
            self.bound_by.setdefault(vid, len(self.ops))
        self.refs = []

    # -- expressions ----------------------------------------------------------
    def expr(self, obj: Any, path: str, k: int, *, allow_reduce: bool = False,
             in_shape: bool = False) -> Expr:
        """Decode one expression with an explicit stack; ``allow_reduce`` allows a
        Reduce at the root only; ``in_shape`` forbids tensor reads."""
        vals: list = []
        stack: list = [(False, obj, path, 1, in_shape)]
        while stack:
            built, o, p, d, no_load = stack.pop()
            if built:
                kind, n = d
                got = vals[len(vals) - n:]
                del vals[len(vals) - n:]
                vals.append(self.build(kind, o, p, got, k, no_load))
                continue
            self.count(p)
            if d > self.max_depth:
                _fail(f"expression nested deeper than max_depth={self.max_depth}", p)
            if _is_int(o):
                vals.append(self.int_const(o, "int32", p))
                continue
            if isinstance(o, float):
                _fail("a bare number in an expression must be an integer; write floats as "
                      "{\"kind\": \"float\", ...}", p)
            kind = self.expr_kind(o, p)
            if kind == "reduce" and not (allow_reduce and p == path):
                _fail("a reduction may only be the whole body of a compute", p)
            if kind == "load" and no_load:
                _fail("tensor reads are not allowed in shapes or extents", p)
            kids = self.expr_children(kind, o, p)
            stack.append((True, o, p, (kind, len(kids)), no_load))
            stack.extend((False, c, cp, d + 1, no_load or nl) for c, cp, nl in reversed(kids))
        return vals[0]

    def expr_kind(self, o: Any, path: str) -> str:
        if not isinstance(o, dict):
            _fail(f"an expression must be an integer or an object, not {type(o).__name__}", path)
        kind = o.get("kind")
        if not isinstance(kind, str) or kind not in _EXPR_FIELDS:
            _fail(f"unknown expression kind {kind!r}", f"{path}.kind")
        self.fields(o, path, ("kind",) + _EXPR_FIELDS[kind], f"a {kind} expression")
        return kind

    def expr_children(self, kind: str, o: dict, p: str) -> list:
        """``[(json, path, forbid_loads)]`` of the sub-expressions, in build order."""
        if kind in ("binary", "cmp", "logical"):
            return [(o["a"], f"{p}.a", False), (o["b"], f"{p}.b", False)]
        if kind == "not":
            return [(o["a"], f"{p}.a", False)]
        if kind == "select":
            return [(o[f], f"{p}.{f}", False) for f in ("cond", "true_value", "false_value")]
        if kind == "cast":
            return [(o["value"], f"{p}.value", False)]
        if kind in ("call", "load"):
            key = "args" if kind == "call" else "indices"
            return [(x, f"{p}.{key}[{j}]", False) for j, x in enumerate(self.array(o, key, p))]
        if kind == "reduce":
            out = [(o["source"], f"{p}.source", False)]
            if o["condition"] is not None:
                out.append((o["condition"], f"{p}.condition", False))
            for j, ax in enumerate(self.array(o, "axis", p)):
                ap = f"{p}.axis[{j}]"
                self.fields(ax, ap, ("var", "min", "extent"), "a reduce axis")
                out += [(ax["min"], f"{ap}.min", True), (ax["extent"], f"{ap}.extent", True)]
            return out
        return []

    def int_const(self, value: Any, dtype: str, path: str) -> IntImm:
        if not _is_int(value):
            _fail(f"an integer constant needs an integer value, not {value!r}", path)
        lo, hi = _int_range(dtype)
        if not lo <= value <= hi:
            _fail(f"{value} is out of range for {dtype}", path)
        return IntImm(value, dtype)

    def build(self, kind: str, o: dict, p: str, kids: list, k: int, no_load: bool) -> Expr:
        if kind == "int":
            return self.int_const(o["value"], self.dtype(o, p, INT_OR_BOOL), f"{p}.value")
        if kind == "float":
            return FloatImm(self.float_value(o["value"], f"{p}.value"), self.dtype(o, p, FLOATS))
        if kind == "var":
            v = self.var_ref(o["id"], f"{p}.id")
            self.refs.append((o["id"], p, no_load))
            return v
        if kind in ("binary", "cmp", "logical"):
            ops = {"binary": BINARY_OPS, "cmp": CMP_OPS, "logical": ("and", "or")}[kind]
            if o["op"] not in ops:
                _fail(f"unknown {kind} op {o['op']!r}", f"{p}.op")
            a, b = kids
            if kind == "logical":
                return LogicalOp(o["op"], a, b)
            if a.dtype != b.dtype:
                _fail(f"operands have dtypes {a.dtype} and {b.dtype}", p)
            if kind == "cmp":
                return CmpOp(o["op"], a, b)
            return BinaryOp(o["op"], a, b, self.same_dtype(o, p, a.dtype))
        if kind == "not":
            return Not(kids[0])
        if kind == "select":
            if kids[1].dtype != kids[2].dtype:
                _fail(f"branches have dtypes {kids[1].dtype} and {kids[2].dtype}", p)
            return Select(kids[0], kids[1], kids[2], self.same_dtype(o, p, kids[1].dtype))
        if kind == "cast":
            return Cast(kids[0], self.dtype(o, p))
        if kind == "call":
            if o["name"] not in INTRINSICS:
                _fail(f"unknown intrinsic {o['name']!r}", f"{p}.name")
            if len(kids) != 1:
                _fail(f"intrinsic {o['name']} takes 1 argument, got {len(kids)}", f"{p}.args")
            return Call(o["name"], tuple(kids), self.dtype(o, p))
        if kind == "load":
            return self.load(o, p, kids, k)
        return self.reduce(o, p, kids)

    def float_value(self, value: Any, path: str) -> float:
        if isinstance(value, str) and value in _NON_FINITE:
            return _NON_FINITE[value]
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            _fail(f"a float constant needs a number or \"inf\"/\"-inf\"/\"nan\", not {value!r}", path)
        return float(value)

    def same_dtype(self, o: dict, p: str, expected: str) -> str:
        d = self.dtype(o, p)
        if d != expected:
            _fail(f"dtype {d} differs from its operands' {expected}", f"{p}.dtype")
        return d

    def load(self, o: dict, p: str, kids: list, k: int) -> Expr:
        t = self.tensor_ref(o["tensor"], f"{p}.tensor", k)
        if len(kids) != len(t.shape):
            _fail(f"tensor {t.name} has {len(t.shape)} dimensions, read with {len(kids)} indices",
                  f"{p}.indices")
        for j, idx in enumerate(kids):
            if not is_int(idx.dtype):
                _fail(f"index has dtype {idx.dtype}; indices must be integers", f"{p}.indices[{j}]")
        self.same_dtype(o, p, t.dtype)
        return TensorLoad(t, tuple(kids), t.dtype)

    def reduce(self, o: dict, p: str, kids: list) -> Expr:
        if o["combiner"] not in REDUCERS:
            _fail(f"unknown reducer {o['combiner']!r}", f"{p}.combiner")
        n_src = 1 if o["condition"] is None else 2
        axes = []
        for j, ax in enumerate(o["axis"]):
            ap = f"{p}.axis[{j}]"
            lo, ext = kids[n_src + 2 * j], kids[n_src + 2 * j + 1]
            for e, f in ((lo, "min"), (ext, "extent")):
                if not is_int(e.dtype):
                    _fail(f"must be an integer expression, not {e.dtype}", f"{ap}.{f}")
            value = const_value(ext)
            if value is not None and value < 0:
                _fail(f"reduce extent is negative ({value})", f"{ap}.extent")
            axes.append(IterVar(self.bind(self.bound, ax["var"], f"{ap}.var"), lo, ext, "reduce"))
        if not axes:
            _fail("a reduction needs at least one axis", f"{p}.axis")
        source = kids[0]
        cond = kids[1] if n_src == 2 else None
        return Reduce(o["combiner"], source, tuple(axes), cond, self.same_dtype(o, p, source.dtype))

