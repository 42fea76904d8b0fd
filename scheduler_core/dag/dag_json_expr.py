"""The expressions of the ComputeDAG JSON wire format (see :mod:`.dag_json`).

Holds the expression encoder (``Expr`` tree -> JSON, :class:`ExprEncoder`) and the
validating expression decoder (JSON -> ``Expr``, :class:`ExprDecoder`, with the
generic field and dtype checks it shares with the op level), the expression
schema (``_EXPR_FIELDS``) and the error helper ``fail_at``.  Both walk with an
explicit stack, so a hostile 100000-deep payload fails with InvalidWorkloadError
instead of RecursionError.  :mod:`.dag_json` builds its ``_Encoder`` and
``_Decoder`` on these classes and keeps the op/tensor/DAG-level format.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NoReturn

from scheduler_core.arith.const_int_bound import DTYPE_RANGE
from scheduler_core.arith.int_set import interval
from scheduler_core.base.errors import InvalidWorkloadError
from scheduler_core.ir.expr import (
    BINARY_OPS,
    CMP_OPS,
    DTYPES,
    INTRINSICS,
    REDUCERS,
    BinaryOp,
    Call,
    Cast,
    CmpOp,
    Expr,
    FloatImm,
    IntImm,
    IterVar,
    LogicalOp,
    Not,
    Reduce,
    Select,
    TensorLoad,
    Var,
    expr_str,
    is_float,
    is_int,
)
from scheduler_core.ir.expr_functor import children, depth
from scheduler_core.ir.intrinsics import INTRINSIC_BY_NAME
from scheduler_core.ir.simplify import const_value, simplify

from .tensor import Tensor

INT_OR_BOOL = tuple(d for d in DTYPES if not is_float(d))
FLOATS = tuple(d for d in DTYPES if is_float(d))
_NON_FINITE = {"inf": math.inf, "-inf": -math.inf, "nan": math.nan}
_DIVISIONS = ("div", "floordiv", "floormod")
MAX_DIVISOR_DEPTH = 200  # deeper divisors get only the constant check (arith.int_set recurses)
_EXPR_FIELDS = {
    "int": ("value", "dtype"), "float": ("value", "dtype"), "var": ("id",),
    "binary": ("op", "a", "b", "dtype"), "cmp": ("op", "a", "b"), "logical": ("op", "a", "b"),
    "not": ("a",), "select": ("cond", "true_value", "false_value", "dtype"),
    "cast": ("value", "dtype"), "call": ("name", "args", "dtype"),
    "load": ("tensor", "indices", "dtype"), "reduce": ("combiner", "source", "axis", "condition", "dtype"),
}


def fail_at(message: str, path: str) -> NoReturn:
    """Raise InvalidWorkloadError(message, path=path): ``path`` names the offending node."""
    raise InvalidWorkloadError(message, path=path)


# ---------------------------------------------------------------------------
# Encoding
# ---------------------------------------------------------------------------

class ExprEncoder:
    """Expression -> JSON; the subclass provides ``var(v) -> id`` and
    ``ref(tensor, before, where) -> [op_index, value_index]``."""

    var: Callable[[Var], int]
    ref: Callable[[Any, int, str], list]

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
        assert isinstance(e, Reduce)  # the only other kind _encode_children lets through
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
        fail_at(f"{type(e).__name__} cannot appear in a ComputeDAG", f"ops[{k}]")
    return list(children(e))


# ---------------------------------------------------------------------------
# Decoding
# ---------------------------------------------------------------------------

def is_json_int(x: Any) -> bool:
    """Whether ``x`` is a JSON integer (a Python int that is not a bool)."""
    return isinstance(x, int) and not isinstance(x, bool)


class ExprDecoder:
    """JSON -> expression, validating; the subclass sets the counters and scope
    (``nodes``, ``max_nodes``, ``max_depth``, ``refs``, ``bound``, ``index_env``) and
    provides ``var_ref``, ``tensor_ref`` and ``bind``.

    Index context: the indices of tensor reads and every shape or extent expression
    (``in_shape``).  There an integer division or modulo whose divisor is always 0 (a
    constant 0, or an expression whose interval over ``index_env`` is just {0}) and a
    non-finite float constant are rejected."""

    nodes: int
    index_env: dict  # Var -> Interval: the ranges of the axes of the op being decoded
    max_nodes: int
    max_depth: int
    refs: list
    bound: dict
    var_ref: Callable[[Any, str], Var]  # (vars index, path) -> Var
    tensor_ref: Callable[[Any, str, int], Tensor]  # ([op, value_index], path, before) -> Tensor
    bind: Callable[[dict, Any, str], Var]  # (scope, vars index, path) -> the bound axis Var
    # (expr, path, what, least) -> expr: integer, concrete if required, constant >= least
    check_extent: Callable[[Expr, str, str, int | None], Expr]

    # -- generic checks ----------------------------------------------------
    def count(self, path: str) -> None:
        self.nodes += 1
        if self.nodes > self.max_nodes:
            fail_at(f"payload has more than max_nodes={self.max_nodes} nodes", path)

    def fields(self, obj: Any, path: str, required: tuple, what: str) -> dict:
        if not isinstance(obj, dict):
            fail_at(f"{what} must be a JSON object, not {type(obj).__name__}", path)
        for f in required:
            if f not in obj:
                fail_at(f"{what} is missing field {f!r}", path)
        extra = sorted(str(f) for f in obj if f not in required)
        if extra:
            fail_at(f"{what} has unknown field(s) {', '.join(map(repr, extra))}", path)
        return obj

    def kind_fields(self, obj: dict, path: str, kinds: dict, what: str, hint: str = "") -> str:
        """The ``"kind"`` of the object ``obj`` at ``path``, a key of ``kinds`` (kind -> its other
        fields), after checking that ``obj`` has exactly the fields of its kind; ``what``
        names the objects ("op"), ``hint`` ends the unknown-kind message."""
        kind = obj.get("kind")
        if not isinstance(kind, str) or kind not in kinds:
            fail_at(f"unknown {what} kind {kind!r}{hint}", f"{path}.kind")
        self.fields(obj, path, ("kind",) + kinds[kind], f"a {kind} {what}")
        return kind

    def typed(self, obj: dict, key: str, path: str, kind: type) -> Any:
        val = obj[key]
        ok = is_json_int(val) if kind is int else isinstance(val, kind)
        if not ok:
            fail_at(f"must be a {kind.__name__}, not {type(val).__name__}", f"{path}.{key}" if path else key)
        return val

    def dtype(self, obj: dict, path: str, allowed=DTYPES) -> str:
        d = obj["dtype"]
        if not isinstance(d, str) or d not in DTYPES:
            fail_at(f"unknown dtype {d!r}", f"{path}.dtype")
        if d not in allowed:
            fail_at(f"dtype {d} is not allowed here", f"{path}.dtype")
        return d

    def array(self, obj: dict, key: str, path: str) -> list:
        return self.typed(obj, key, path, list)

    # -- expressions ----------------------------------------------------------
    def expr(self, obj: Any, path: str, k: int, *, allow_reduce: bool = False,
             in_shape: bool = False) -> Expr:
        """Decode one expression with an explicit stack; ``allow_reduce`` allows a
        Reduce at the root only; ``in_shape`` forbids tensor reads."""
        vals: list = []
        stack: list = [(False, obj, path, 1, in_shape, in_shape)]
        while stack:
            built, o, p, d, no_load, in_index = stack.pop()
            if built:
                kind, n = d
                got = vals[len(vals) - n:]
                del vals[len(vals) - n:]
                vals.append(self.build(kind, o, p, got, k, no_load, in_index))
                continue
            self.count(p)
            if d > self.max_depth:
                fail_at(f"expression nested deeper than max_depth={self.max_depth}", p)
            if is_json_int(o):
                vals.append(self.int_const(o, "int32", p))
                continue
            if isinstance(o, float):
                fail_at("a bare number in an expression must be an integer; write floats as "
                      "{\"kind\": \"float\", ...}", p)
            kind = self.expr_kind(o, p)
            if kind == "reduce" and not (allow_reduce and p == path):
                fail_at("a reduction may only be the whole body of a compute", p)
            if kind == "load" and no_load:
                fail_at("tensor reads are not allowed in shapes or extents", p)
            kids = self.expr_children(kind, o, p)
            stack.append((True, o, p, (kind, len(kids)), no_load, in_index))
            kid_index = in_index or kind == "load"
            stack.extend((False, c, cp, d + 1, no_load or nl, kid_index or nl) for c, cp, nl in reversed(kids))
        return vals[0]

    def expr_kind(self, o: Any, path: str) -> str:
        if not isinstance(o, dict):
            fail_at(f"an expression must be an integer or an object, not {type(o).__name__}", path)
        return self.kind_fields(o, path, _EXPR_FIELDS, "expression")

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
        if not is_json_int(value):
            fail_at(f"an integer constant needs an integer value, not {value!r}", path)
        lo, hi = DTYPE_RANGE[dtype]
        if not lo <= value <= hi:
            fail_at(f"{value} is out of range for {dtype}", path)
        return IntImm(value, dtype)

    def build(self, kind: str, o: dict, p: str, kids: list, k: int, no_load: bool,
              in_index: bool = False) -> Expr:
        if kind == "int":
            return self.int_const(o["value"], self.dtype(o, p, INT_OR_BOOL), f"{p}.value")
        if kind == "float":
            value = self.float_value(o["value"], f"{p}.value")
            if in_index and not math.isfinite(value):
                fail_at(f"a non-finite float ({o['value']}) does not evaluate to an integer: it cannot "
                        "appear in an index, shape or extent expression", f"{p}.value")
            return FloatImm(value, self.dtype(o, p, FLOATS))
        if kind == "var":
            v = self.var_ref(o["id"], f"{p}.id")
            self.refs.append((o["id"], p, no_load))
            return v
        if kind in ("binary", "cmp", "logical"):
            ops = {"binary": BINARY_OPS, "cmp": CMP_OPS, "logical": ("and", "or")}[kind]
            if o["op"] not in ops:
                fail_at(f"unknown {kind} op {o['op']!r}", f"{p}.op")
            a, b = kids
            if kind == "logical":
                return LogicalOp(o["op"], a, b)
            if a.dtype != b.dtype:
                fail_at(f"operands have dtypes {a.dtype} and {b.dtype}", p)
            if kind == "cmp":
                return CmpOp(o["op"], a, b)
            # an integer "div" is floordiv, as in ``ir.expr.binary`` and the reference evaluator
            op = "floordiv" if o["op"] == "div" and is_int(a.dtype) else o["op"]
            if in_index and op in _DIVISIONS and is_int(b.dtype):
                self.check_divisor(op, b, f"{p}.b")
            return BinaryOp(op, a, b, self.same_dtype(o, p, a.dtype))
        if kind == "not":
            return Not(kids[0])
        if kind == "select":
            if kids[1].dtype != kids[2].dtype:
                fail_at(f"branches have dtypes {kids[1].dtype} and {kids[2].dtype}", p)
            return Select(kids[0], kids[1], kids[2], self.same_dtype(o, p, kids[1].dtype))
        if kind == "cast":
            return Cast(kids[0], self.dtype(o, p))
        if kind == "call":
            return self.call(o, p, kids)
        if kind == "load":
            return self.load(o, p, kids, k)
        return self.reduce(o, p, kids)

    def call(self, o: dict, p: str, kids: list) -> Call:
        """A ``call`` node: a Call name of ir/intrinsics.py with its number of arguments,
        which share one dtype."""
        if o["name"] not in INTRINSICS:
            fail_at(f"unknown intrinsic {o['name']!r}", f"{p}.name")
        arity = INTRINSIC_BY_NAME[o["name"]].arity
        if len(kids) != arity:
            fail_at(f"intrinsic {o['name']} takes {arity} argument(s), got {len(kids)}", f"{p}.args")
        if len({k.dtype for k in kids}) > 1:
            fail_at(f"arguments have dtypes {', '.join(k.dtype for k in kids)}", f"{p}.args")
        return Call(o["name"], tuple(kids), self.dtype(o, p))

    def check_divisor(self, op: str, b: Expr, path: str) -> None:
        """Reject ``op`` (a division or modulo in an index context) by a divisor that is always 0."""
        zero = const_value(b) == 0
        if not zero and depth(b) <= MAX_DIVISOR_DEPTH:
            try:
                iv = interval(b, getattr(self, "index_env", {}))
            except (ArithmeticError, RecursionError):
                iv = None
            zero = iv is not None and iv.const_extent == 1 and const_value(simplify(iv.lo)) == 0
        if zero:
            fail_at(f"{op} by zero in an index, shape or extent expression: the divisor "
                    f"{expr_str(b)} is always 0", path)

    def float_value(self, value: Any, path: str) -> float:
        if isinstance(value, str) and value in _NON_FINITE:
            return _NON_FINITE[value]
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            fail_at(f"a float constant needs a number or \"inf\"/\"-inf\"/\"nan\", not {value!r}", path)
        return float(value)

    def same_dtype(self, o: dict, p: str, expected: str) -> str:
        d = self.dtype(o, p)
        if d != expected:
            fail_at(f"dtype {d} differs from its operands' {expected}", f"{p}.dtype")
        return d

    def load(self, o: dict, p: str, kids: list, k: int) -> Expr:
        t = self.tensor_ref(o["tensor"], f"{p}.tensor", k)
        if len(kids) != len(t.shape):
            fail_at(f"tensor {t.name} has {len(t.shape)} dimensions, read with {len(kids)} indices",
                  f"{p}.indices")
        for j, idx in enumerate(kids):
            if not is_int(idx.dtype):
                fail_at(f"index has dtype {idx.dtype}; indices must be integers", f"{p}.indices[{j}]")
        self.same_dtype(o, p, t.dtype)
        return TensorLoad(t, tuple(kids), t.dtype)

    def reduce(self, o: dict, p: str, kids: list) -> Expr:
        if o["combiner"] not in REDUCERS:
            fail_at(f"unknown reducer {o['combiner']!r}", f"{p}.combiner")
        n_src = 1 if o["condition"] is None else 2
        axes = []
        for j, ax in enumerate(o["axis"]):
            ap = f"{p}.axis[{j}]"
            lo, ext = kids[n_src + 2 * j], kids[n_src + 2 * j + 1]
            self.check_extent(lo, f"{ap}.min", "a reduce axis's start", None)
            self.check_extent(ext, f"{ap}.extent", "a reduce axis's extent", 1)
            axes.append(IterVar(self.bind(self.bound, ax["var"], f"{ap}.var"), lo, ext, "reduce"))
        if not axes:
            fail_at("a reduction needs at least one axis", f"{p}.axis")
        source = kids[0]
        cond = kids[1] if n_src == 2 else None
        return Reduce(o["combiner"], source, tuple(axes), cond, self.same_dtype(o, p, source.dtype))
