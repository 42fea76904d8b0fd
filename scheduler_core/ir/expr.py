"""Scalar expression nodes shared by tensor expressions and the loop IR.

Reading guide: ``Expr`` carries the Python operators; the leaves are ``IntImm``,
``FloatImm`` and ``Var``; the interior nodes are ``BinaryOp`` (arithmetic),
``CmpOp``, ``LogicalOp``, ``Not``, ``Select`` (if_then_else), ``Cast``, ``Call``
(math intrinsics), ``TensorLoad`` (a read of a tensor at index expressions) and
``Reduce`` (a commutative reduction over reduce axes).  ``Ramp``/``Broadcast``,
``BufferLoad`` and ``CheckedIndex`` only appear in lowered loop programs (see ``tir``).

Nodes are immutable.  They hash by identity (two ``Var("i")`` are different
variables); structural comparison is :func:`structural_equal`.  ``a == b`` on
expressions builds a ``CmpOp`` as in TVM; its truth value is identity.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from scheduler_core.base.errors import InvalidWorkloadError
from scheduler_core.base.frozen import fast_init

from .intrinsics import CALL_INTRINSICS, INTRINSIC_BY_NAME

INT_DTYPES = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")
FLOAT_DTYPES = ("float16", "float32", "float64")
DTYPES = INT_DTYPES + FLOAT_DTYPES + ("bool",)

BINARY_OPS = ("add", "sub", "mul", "div", "floordiv", "floormod", "min", "max", "pow")
CMP_OPS = ("eq", "ne", "lt", "le", "gt", "ge")
INTRINSICS = CALL_INTRINSICS  # the names of Call nodes (ir/intrinsics.py's table)
UNARY_INTRINSICS = tuple(n for n in INTRINSICS if INTRINSIC_BY_NAME[n].arity == 1)
REDUCERS = ("sum", "max", "min", "prod")


def is_float(dtype: str) -> bool:
    return dtype.startswith("float")


def is_int(dtype: str) -> bool:
    return dtype in INT_DTYPES


def dtype_bits(dtype: str) -> int:
    if dtype == "bool":
        return 1
    return int("".join(ch for ch in dtype if ch.isdigit()))


def promote(a: str, b: str) -> str:
    """The dtype of a binary op on ``a`` and ``b``: float beats int, wider beats narrower."""
    if a == b:
        return a
    if a == "bool":
        return b
    if b == "bool":
        return a
    if is_float(a) != is_float(b):
        return a if is_float(a) else b
    return a if dtype_bits(a) >= dtype_bits(b) else b


class Expr:
    """Base class of expression nodes; carries ``dtype`` and Python operators."""

    dtype: str
    __dataclass_fields__: ClassVar[dict[str, Any]]  # every concrete node class is a dataclass

    # -- arithmetic ---------------------------------------------------------
    def __add__(self, o): return binary("add", self, o)
    def __radd__(self, o): return binary("add", o, self)
    def __sub__(self, o): return binary("sub", self, o)
    def __rsub__(self, o): return binary("sub", o, self)
    def __mul__(self, o): return binary("mul", self, o)
    def __rmul__(self, o): return binary("mul", o, self)
    def __truediv__(self, o): return binary("div", self, o)
    def __rtruediv__(self, o): return binary("div", o, self)
    def __floordiv__(self, o): return binary("floordiv", self, o)
    def __rfloordiv__(self, o): return binary("floordiv", o, self)
    def __mod__(self, o): return binary("floormod", self, o)
    def __rmod__(self, o): return binary("floormod", o, self)
    def __pow__(self, o): return binary("pow", self, o)
    def __neg__(self): return binary("sub", const(0, self.dtype), self)

    # -- comparisons (build nodes, as TVM does) -----------------------------
    def __lt__(self, o): return compare("lt", self, o)
    def __le__(self, o): return compare("le", self, o)
    def __gt__(self, o): return compare("gt", self, o)
    def __ge__(self, o): return compare("ge", self, o)
    def __eq__(self, o): return compare("eq", self, o)
    def __ne__(self, o): return compare("ne", self, o)
    __hash__ = object.__hash__

    def __and__(self, o): return logical("and", self, o)
    def __rand__(self, o): return logical("and", o, self)
    def __or__(self, o): return logical("or", self, o)
    def __ror__(self, o): return logical("or", o, self)
    def __invert__(self): return Not(as_expr(self))

    def __bool__(self) -> bool:
        raise TypeError(
            "an expression has no truth value; use te.if_then_else / te.all for conditions"
        )

    def astype(self, dtype: str) -> Expr:
        """Cast to ``dtype`` (e.g. ``"float32"``)."""
        return cast(dtype, self)

    def __repr__(self) -> str:
        return expr_str(self)

    __str__ = __repr__


@fast_init
@dataclass(frozen=True, eq=False, repr=False)
class IntImm(Expr):
    value: int
    dtype: str = "int32"

    def __int__(self) -> int:  # int(tensor.shape[0]) as in TVM
        return int(self.value)


@fast_init
@dataclass(frozen=True, eq=False, repr=False)
class FloatImm(Expr):
    value: float
    dtype: str = "float32"

    def __float__(self) -> float:
        return float(self.value)


@fast_init
@dataclass(frozen=True, eq=False, repr=False)
class Var(Expr):
    """A scalar variable: a loop index, a symbolic shape, a scan step."""

    name: str
    dtype: str = "int32"


@fast_init
@dataclass(frozen=True, eq=False, repr=False)
class BinaryOp(Expr):
    op: str  # one of BINARY_OPS
    a: Expr
    b: Expr
    dtype: str = "int32"


@fast_init
@dataclass(frozen=True, eq=False, repr=False)
class CmpOp(Expr):
    op: str  # one of CMP_OPS
    a: Expr
    b: Expr
    dtype: str = "bool"

    def __bool__(self) -> bool:
        # Lets Python code test node identity with ``==`` / ``!=`` (TVM does the same).
        if self.op == "eq":
            return self.a is self.b
        if self.op == "ne":
            return self.a is not self.b
        return Expr.__bool__(self)


@fast_init
@dataclass(frozen=True, eq=False, repr=False)
class LogicalOp(Expr):
    op: str  # "and" | "or"
    a: Expr
    b: Expr
    dtype: str = "bool"


@fast_init
@dataclass(frozen=True, eq=False, repr=False)
class Not(Expr):
    a: Expr
    dtype: str = "bool"


@fast_init
@dataclass(frozen=True, eq=False, repr=False)
class Select(Expr):
    """``cond ? true_value : false_value``; only the taken branch is evaluated."""

    cond: Expr
    true_value: Expr
    false_value: Expr
    dtype: str = "float32"


@fast_init
@dataclass(frozen=True, eq=False, repr=False)
class Cast(Expr):
    value: Expr
    dtype: str = "float32"


@fast_init
@dataclass(frozen=True, eq=False, repr=False)
class Call(Expr):
    """A pure math intrinsic (``name`` in INTRINSICS) applied elementwise."""

    name: str
    args: tuple
    dtype: str = "float32"


@fast_init
@dataclass(frozen=True, eq=False, repr=False)
class CheckedIndex(Expr):
    """A data-dependent index checked at run time (lowered loop programs only).

    ``value`` (an integer, scalar or vector) where ``0 <= value < extent``; on any other lane
    it is 0 (an in-bounds element) and the program, when it returns, reports the access as out
    of bounds (a nonzero return code: ``codegen``'s ``INDEX_OUT_OF_BOUNDS``).  Lowering wraps
    each axis index of a tensor read that reads another tensor (a gather, e.g. an embedding
    lookup ``W[ids[i], j]``), the accesses that no static analysis can bound; the clamp keeps
    the read inside the buffer, the flag turns a bad index into an error instead of a wild
    read.  Clamp-and-flag, as bounds-checked indexing in safe array languages, with the check
    hoisted to the axis index so that a vectorized inner axis keeps contiguous loads.
    """

    value: Expr
    extent: Expr
    dtype: str = "int32"


@dataclass(frozen=True, eq=False, repr=False)
class IterVar:
    """An axis of a compute: a variable with a domain ``[min, min + extent)``.

    kind: ``"spatial"`` (data-parallel), ``"reduce"``, ``"scan"`` (the time axis
    of a scan) or ``"thread"`` (a GPU thread axis from ``te.thread_axis``, whose
    ``var.name`` is the tag such as ``"threadIdx.x"``).
    """

    var: Var
    dom_min: Expr
    dom_extent: Expr
    kind: str = "spatial"

    @property
    def name(self) -> str:
        return self.var.name

    @property
    def dom(self):
        return Range(self.dom_min, self.dom_extent)

    def __repr__(self) -> str:
        return f"IterVar({self.var.name}, [{self.dom_min}, {self.dom_extent}), {self.kind})"

    # Expressions may use an IterVar directly (``A[k]`` with ``k = te.reduce_axis``).
    def _e(self) -> Var:
        return self.var

    def __add__(self, o): return self.var + o
    def __radd__(self, o): return o + self.var
    def __sub__(self, o): return self.var - o
    def __rsub__(self, o): return o - self.var
    def __mul__(self, o): return self.var * o
    def __rmul__(self, o): return o * self.var
    def __floordiv__(self, o): return self.var // o
    def __mod__(self, o): return self.var % o
    def __lt__(self, o): return self.var < o
    def __le__(self, o): return self.var <= o
    def __gt__(self, o): return self.var > o
    def __ge__(self, o): return self.var >= o
    def __eq__(self, o): return self.var == (o.var if isinstance(o, IterVar) else o)
    def __ne__(self, o): return self.var != (o.var if isinstance(o, IterVar) else o)
    __hash__ = object.__hash__


@dataclass(frozen=True)
class Range:
    min: Expr
    extent: Expr


@fast_init
@dataclass(frozen=True, eq=False, repr=False)
class TensorLoad(Expr):
    """``tensor[indices]`` inside a compute body (TVM's ProducerLoad)."""

    tensor: Any  # scheduler_core.dag.tensor.Tensor
    indices: tuple
    dtype: str = "float32"


@fast_init
@dataclass(frozen=True, eq=False, repr=False)
class Reduce(Expr):
    """``combiner`` over ``axis`` of ``source`` where ``condition`` holds.

    combiner: ``"sum"``, ``"max"``, ``"min"`` or ``"prod"``; the identity element
    is the initial value (0, lowest, highest, 1).
    """

    combiner: str
    source: Expr
    axis: tuple  # tuple[IterVar, ...]
    condition: Expr | None = None
    dtype: str = "float32"


# Lowered-program-only nodes -------------------------------------------------

@fast_init
@dataclass(frozen=True, eq=False, repr=False)
class Ramp(Expr):
    """The vector ``[base, base + stride, ..., base + (lanes-1)*stride]``."""

    base: Expr
    stride: Expr
    lanes: int
    dtype: str = "int32"


@fast_init
@dataclass(frozen=True, eq=False, repr=False)
class Broadcast(Expr):
    """``lanes`` copies of the scalar ``value``."""

    value: Expr
    lanes: int
    dtype: str = "float32"


@fast_init
@dataclass(frozen=True, eq=False, repr=False)
class BufferLoad(Expr):
    """``buffer[index]`` with a flat element ``index`` (a ``Ramp`` for vectors)."""

    buffer: Any  # scheduler_core.ir.tir.Buffer
    index: Expr
    dtype: str = "float32"
    lanes: int = 1


# ---------------------------------------------------------------------------
# Constructors with type promotion
# ---------------------------------------------------------------------------

def const(value: Any, dtype: str | None = None) -> Expr:
    """A constant: ``int`` -> int32, ``float`` -> float32, ``bool`` -> bool by default."""
    if isinstance(value, Expr):
        return value
    if isinstance(value, bool):
        return IntImm(int(value), dtype or "bool")
    if dtype is None:
        dtype = "int32" if isinstance(value, int) else "float32"
    if is_float(dtype):
        return FloatImm(float(value), dtype)
    if isinstance(value, float) and not value.is_integer():
        raise InvalidWorkloadError(f"cannot make a {dtype} constant from {value!r}")
    return IntImm(int(value), dtype)


def as_expr(value: Any, like: str | None = None) -> Expr:
    """Turn a Python scalar, IterVar or Expr into an Expr (scalars take ``like``'s kind)."""
    if isinstance(value, Expr):
        return value
    if isinstance(value, IterVar):
        return value.var
    if hasattr(value, "_as_expr"):
        return value._as_expr()
    if isinstance(value, bool):
        return IntImm(int(value), "bool")
    if isinstance(value, int):
        if like is not None and like != "bool":
            return const(value, like)
        return IntImm(value, "int32")
    if isinstance(value, float):
        if like is not None and is_float(like):
            return FloatImm(value, like)
        return FloatImm(value, "float32")
    if isinstance(value, np.generic):
        return const(value.item(), str(value.dtype))
    raise InvalidWorkloadError(f"cannot use {type(value).__name__} {value!r} in an expression")


_INT_DTYPE_SET = frozenset(INT_DTYPES)


def _pair(a: Any, b: Any) -> tuple[Expr, Expr]:
    # Fast paths (the result the general code below gives): two Exprs of one dtype stay as
    # they are; a Python int next to an integer Expr becomes an IntImm of that dtype.
    if isinstance(a, Expr):
        if isinstance(b, Expr):
            if a.dtype == b.dtype:
                return a, b
        elif type(b) is int and a.dtype in _INT_DTYPE_SET:
            return a, IntImm(b, a.dtype)
    elif type(a) is int and isinstance(b, Expr) and b.dtype in _INT_DTYPE_SET:
        return IntImm(a, b.dtype), b
    if isinstance(a, (Expr, IterVar)) or not isinstance(b, (Expr, IterVar)):
        ea = as_expr(a)
        eb = as_expr(b, ea.dtype)
    else:
        eb = as_expr(b)
        ea = as_expr(a, eb.dtype)
    dt = promote(ea.dtype, eb.dtype)
    if ea.dtype != dt:
        ea = cast(dt, ea)
    if eb.dtype != dt:
        eb = cast(dt, eb)
    return ea, eb


def binary(op: str, a: Any, b: Any) -> Expr:
    ea, eb = _pair(a, b)
    dtype = ea.dtype
    if op == "div" and not dtype.startswith("float"):
        op = "floordiv"
    return BinaryOp(op, ea, eb, dtype)


def compare(op: str, a: Any, b: Any) -> Expr:
    ea, eb = _pair(a, b)
    return CmpOp(op, ea, eb)


def logical(op: str, a: Any, b: Any) -> Expr:
    return LogicalOp(op, as_expr(a), as_expr(b))


def cast(dtype: str, value: Any) -> Expr:
    if dtype not in DTYPES:
        raise InvalidWorkloadError(f"unknown dtype {dtype!r}")
    e = as_expr(value)
    if e.dtype == dtype:
        return e
    if isinstance(e, IntImm) and dtype != "bool":
        return const(e.value, dtype)
    if isinstance(e, FloatImm) and is_float(dtype):
        return FloatImm(e.value, dtype)
    return Cast(e, dtype)


def select(cond: Any, t: Any, f: Any) -> Expr:
    et, ef = _pair(t, f)
    return Select(as_expr(cond), et, ef, et.dtype)


def call(name: str, *args: Any) -> Expr:
    """The intrinsic ``name`` (a Call name of ir/intrinsics.py) on ``args``.

    The arguments are cast to one dtype (:func:`promote`), float32 when that is not a float
    and the intrinsic takes no integers.  Raises InvalidWorkloadError for an unknown name or
    a wrong number of arguments.
    """
    row = INTRINSIC_BY_NAME.get(name)
    if row is None or row.operator:
        raise InvalidWorkloadError(f"unknown intrinsic {name!r}")
    if len(args) != row.arity:
        raise InvalidWorkloadError(f"intrinsic {name} takes {row.arity} argument(s), got {len(args)}")
    exprs = tuple(as_expr(a) for a in args)
    dtype = exprs[0].dtype
    for e in exprs[1:]:
        dtype = promote(dtype, e.dtype)
    if not is_float(dtype) and not row.int_args:
        dtype = "float32"
    return Call(name, tuple(cast(dtype, e) for e in exprs), dtype)


# ---------------------------------------------------------------------------
# Text form (TVM's spacing: (a + b), (a*b))
# ---------------------------------------------------------------------------

_BIN_SYM = {"add": " + ", "sub": " - ", "mul": "*", "div": "/"}  # TVM spacing: (a + b), (a*b)
_CMP_SYM = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}


def _float_str(v: float, dtype: str) -> str:
    s = repr(float(v))
    if s.endswith(".0"):
        s = s[:-2]
    return s + ("f" if dtype == "float32" else "f64" if dtype == "float64" else "f16")


def expr_str(e) -> str:
    """One-line text of an expression, e.g. ``(A[i, k]*B[k, j])``."""
    t = type(e)  # the commonest nodes first, by exact class (the node classes are final)
    if t is Var:
        return e.name
    if t is BinaryOp:
        sym = _BIN_SYM.get(e.op)
        if sym is not None:
            return f"({expr_str(e.a)}{sym}{expr_str(e.b)})"
        return f"{e.op}({expr_str(e.a)}, {expr_str(e.b)})"
    if t is IntImm and e.dtype == "int32":
        return str(e.value)
    if isinstance(e, IterVar):
        return e.var.name
    if isinstance(e, IntImm):
        if e.dtype == "bool":
            return "True" if e.value else "False"
        return str(e.value) if e.dtype in ("int32",) else f"{e.value}{'i64' if e.dtype == 'int64' else ''}"
    if isinstance(e, FloatImm):
        return _float_str(e.value, e.dtype)
    if isinstance(e, Var):
        return e.name
    if isinstance(e, BinaryOp):
        if e.op in _BIN_SYM:
            return f"({expr_str(e.a)}{_BIN_SYM[e.op]}{expr_str(e.b)})"
        return f"{e.op}({expr_str(e.a)}, {expr_str(e.b)})"
    if isinstance(e, CmpOp):
        return f"({expr_str(e.a)} {_CMP_SYM[e.op]} {expr_str(e.b)})"
    if isinstance(e, LogicalOp):
        return f"({expr_str(e.a)} {'&&' if e.op == 'and' else '||'} {expr_str(e.b)})"
    if isinstance(e, Not):
        return f"!{expr_str(e.a)}"
    if isinstance(e, Select):
        return f"tir.if_then_else({expr_str(e.cond)}, {expr_str(e.true_value)}, {expr_str(e.false_value)})"
    if isinstance(e, Cast):
        return f"{e.dtype}({expr_str(e.value)})"
    if isinstance(e, Call):
        return f"{e.name}({', '.join(expr_str(a) for a in e.args)})"
    if isinstance(e, TensorLoad):
        return f"{e.tensor.name}[{', '.join(expr_str(i) for i in e.indices)}]"
    if isinstance(e, Reduce):
        axes = ", ".join(a.var.name for a in e.axis)
        where = "" if e.condition is None else f", where={expr_str(e.condition)}"
        return f"{e.combiner}({expr_str(e.source)}, axis=[{axes}]{where})"
    if isinstance(e, Ramp):
        return f"ramp({expr_str(e.base)}, {expr_str(e.stride)}, {e.lanes})"
    if isinstance(e, Broadcast):
        return f"broadcast({expr_str(e.value)}, {e.lanes})"
    if isinstance(e, BufferLoad):
        return f"{e.buffer.name}[{expr_str(e.index)}]"
    if isinstance(e, CheckedIndex):
        return f"checked_index({expr_str(e.value)}, {expr_str(e.extent)})"
    return repr(e)
