"""The calling convention of a compiled entry function, and argument checking.

    PrimFunc ---------from_primfunc--> Signature --bind(args)--> (data pointers, int32 sizes)
    __autosched_meta_<name> JSON --from_meta_json--^

ABI (fixed by codegen): ``int32_t name(T0* buf0, ..., int32_t sym0, ...)``: one
data pointer per buffer parameter in order, then one ``int32`` per symbolic shape
variable in ``scalar_params`` order; 0 is success.

A shape entry (a "dim") is an ``int``, a ``str`` naming a symbolic variable, or a
:class:`ComputedDim` (an expression of variables such as ``n + 1``), checked once
every variable is bound from the arguments' shapes.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from scheduler_core.base.c_names import c_identifiers
from scheduler_core.base.errors import RuntimeArgumentError
from scheduler_core.ir import expr as E
from scheduler_core.ir import expr_functor as EF
from scheduler_core.ir import simplify as ES

from .ndarray import NDArray

INT32_MAX = 2**31 - 1
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]*$")
# Element types of the C ABI (float16 is passed as its 16-bit storage).
C_ELEMENT_TYPES = {
    "float32": "float", "float64": "double", "float16": "uint16_t", "bool": "uint8_t",
    "int8": "int8_t", "int16": "int16_t", "int32": "int32_t", "int64": "int64_t",
    "uint8": "uint8_t", "uint16": "uint16_t", "uint32": "uint32_t", "uint64": "uint64_t",
}


@dataclass(frozen=True)
class ComputedDim:
    """A shape entry computed from symbolic variables; ``text`` is how it prints."""

    text: str
    evaluate: Callable[[dict], int]  # {var name: int} -> extent

    def __str__(self) -> str:
        return self.text


@dataclass(frozen=True)
class ParamSpec:
    """One buffer parameter: ``name``, ``dtype`` (e.g. "float32"), ``shape`` (tuple of dims)."""

    name: str
    dtype: str
    shape: tuple

    @cached_property
    def np_dtype(self) -> np.dtype:
        """``dtype`` as a numpy dtype (compared per call; faster than formatting names)."""
        return np.dtype(self.dtype)


@dataclass(frozen=True)
class Signature:
    """The entry function ``name``: buffer ``params`` then int32 ``scalar_params`` (var names)."""

    name: str
    params: tuple
    scalar_params: tuple

    # -- construction -------------------------------------------------------
    @staticmethod
    def from_primfunc(func, name: str | None = None) -> Signature:
        """The signature of a lowered ``tir.PrimFunc`` (entry symbol ``name``, default func.name)."""
        params = tuple(
            ParamSpec(b.name, b.dtype, tuple(_dim_from_expr(d) for d in b.shape)) for b in func.params
        )
        return Signature(name or func.name, params, tuple(v.name for v in func.scalar_params))

    @staticmethod
    def from_meta_json(text: str) -> Signature:
        """Parse the ``__autosched_meta_<name>`` JSON written by codegen.

        Shape entries are ints, variable names, or expression text such as
        ``"(n + 1)"``/``"floordiv(n, 2)"``.  Raises ``ValueError`` on malformed JSON.
        """
        meta = json.loads(text)
        params = tuple(
            ParamSpec(p["name"], p["dtype"], tuple(_dim_from_meta(d) for d in p["shape"]))
            for p in meta["params"]
        )
        return Signature(meta["name"], params, tuple(meta.get("scalar_params", ())))

    def to_meta_json(self) -> str:
        """The JSON form read by :meth:`from_meta_json`."""
        params = [
            {"name": p.name, "dtype": p.dtype, "shape": [d if isinstance(d, (int, str)) else d.text for d in p.shape]}
            for p in self.params
        ]
        return json.dumps({"name": self.name, "params": params, "scalar_params": list(self.scalar_params)})

    # -- argument checking --------------------------------------------------
    def bind(self, args: tuple, device_kind: str = "cpu") -> tuple[list, list]:
        """Check ``args`` against the signature; return (data pointers, int32 scalar values).

        ``args``: one NDArray or numpy array per buffer parameter, optionally
        followed by one int per scalar parameter (otherwise inferred from shapes).
        Raises ``RuntimeArgumentError`` naming the argument, e.g.
        ``"argument 2 (C): expected shape (1024, 1024), got (1024, 512)"``.
        """
        n_buf, n_sym = len(self.params), len(self.scalar_params)
        if len(args) not in (n_buf, n_buf + n_sym):
            raise RuntimeArgumentError(self._count_message(len(args)))
        arrays = [_host_array(i, p, a, device_kind) for i, (p, a) in enumerate(zip(self.params, args))]
        bound: dict = {}
        origin: dict = {}
        for i, (p, arr) in enumerate(zip(self.params, arrays)):
            _check_layout(i, p, arr)
            _bind_dims(i, p, arr.shape, bound, origin)
        self._merge_explicit(args[n_buf:], bound)
        for i, (p, arr) in enumerate(zip(self.params, arrays)):
            _check_computed_dims(i, p, arr.shape, bound)
        return [arr.ctypes.data for arr in arrays], self._scalar_values(bound)

    def _merge_explicit(self, explicit: tuple, bound: dict) -> None:
        """Add sizes passed after the arrays to ``bound``; they must agree with the shapes."""
        for k, (name, given) in enumerate(zip(self.scalar_params, explicit)):
            where = f"argument {len(self.params) + k} ({name})"
            if isinstance(given, bool) or not isinstance(given, (int, np.integer)):
                raise RuntimeArgumentError(f"{where}: expected an int, got {type(given).__name__}")
            if name in bound and int(given) != bound[name]:
                raise RuntimeArgumentError(
                    f"{where}: {int(given)} contradicts {name} = {bound[name]} from the array shapes")
            bound[name] = int(given)

    def _scalar_values(self, bound: dict) -> list:
        values = []
        for name in self.scalar_params:
            if name not in bound:
                raise RuntimeArgumentError(
                    f"symbolic size {name} is used by no argument shape; pass it after the arrays")
            if not 0 <= bound[name] <= INT32_MAX:
                raise RuntimeArgumentError(f"symbolic size {name} = {bound[name]} does not fit an int32")
            values.append(bound[name])
        return values

    def _count_message(self, got: int) -> str:
        names = ", ".join(p.name for p in self.params)
        extra = f" (optionally followed by {', '.join(self.scalar_params)})" if self.scalar_params else ""
        return f"{self.name} takes {len(self.params)} array arguments ({names}){extra}, got {got}"

    def c_prototype(self) -> str:
        """The C declaration of the entry, e.g. ``int32_t f(float* A, float* B, int32_t n)``."""
        names = c_identifiers([p.name for p in self.params] + list(self.scalar_params))
        parts = [f"{C_ELEMENT_TYPES[p.dtype]}* {nm}" for p, nm in zip(self.params, names)]
        parts += [f"int32_t {nm}" for nm in names[len(self.params):]]
        return f"int32_t {self.name}({', '.join(parts) or 'void'})"


# ---------------------------------------------------------------------------
# dims
# ---------------------------------------------------------------------------

def _dim_from_expr(d) -> int | str | ComputedDim:
    """A PrimFunc shape Expr (or int) as a dim."""
    value = ES.const_value(d)
    if isinstance(value, int):
        return value
    if isinstance(d, E.Var):
        return d.name
    variables = EF.free_vars(d)

    def evaluate(bound: dict, d=d, variables=variables) -> int:
        mapping = {v: E.IntImm(bound[v.name], v.dtype) for v in variables}
        result = ES.const_value(EF.substitute(d, mapping))
        if not isinstance(result, int):
            raise RuntimeArgumentError(f"shape expression {d} did not evaluate to an int")
        return result

    return ComputedDim(str(d), evaluate)


def _dim_from_meta(d) -> int | str | ComputedDim:
    """A meta JSON shape entry as a dim (expression text is parsed, never eval'ed)."""
    if isinstance(d, int):
        return d
    text = str(d).strip()
    if _IDENT.match(text):
        return text
    tree = ast.parse(text, mode="eval").body
    return ComputedDim(text, lambda bound: _eval_ast(tree, bound))


_AST_BINOPS: dict[type[ast.operator], Callable[[int, int], int]] = {
    ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
    ast.FloorDiv: lambda a, b: a // b, ast.Div: lambda a, b: a // b, ast.Mod: lambda a, b: a % b,
}
_AST_CALLS: dict[str, Callable[..., int]] = {
    "floordiv": lambda a, b: a // b, "floormod": lambda a, b: a % b, "min": min, "max": max,
}


def _eval_ast(node: ast.AST, bound: dict) -> int:
    """Evaluate integer shape arithmetic: names, ints, + - * // % and floordiv/floormod/min/max."""
    if isinstance(node, ast.Constant) and isinstance(node.value, int):
        return node.value
    if isinstance(node, ast.Name):
        return bound[node.id]
    if isinstance(node, ast.BinOp) and type(node.op) in _AST_BINOPS:
        return _AST_BINOPS[type(node.op)](_eval_ast(node.left, bound), _eval_ast(node.right, bound))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_eval_ast(node.operand, bound)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _AST_CALLS:
        return _AST_CALLS[node.func.id](*(_eval_ast(a, bound) for a in node.args))
    raise RuntimeArgumentError(f"unsupported shape expression {ast.unparse(node)!r}")


def _shape_text(shape: tuple, bound: dict) -> str:
    """Expected shape with every resolvable dim as a number, e.g. ``(1024, n)`` or ``(7,)``."""
    items = []
    for d in shape:
        if isinstance(d, str):
            items.append(str(bound.get(d, d)))
        elif isinstance(d, ComputedDim):
            try:
                items.append(str(d.evaluate(bound)))
            except (KeyError, RuntimeArgumentError, ZeroDivisionError):
                items.append(d.text)
        else:
            items.append(str(d))
    return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"


# ---------------------------------------------------------------------------
# per-argument checks
# ---------------------------------------------------------------------------

def _host_array(i: int, p: ParamSpec, arg, device_kind: str) -> np.ndarray:
    """The numpy array behind argument ``i``; its device must be ``device_kind``."""
    if isinstance(arg, NDArray):
        if arg.device.kind != device_kind:
            raise RuntimeArgumentError(
                f"argument {i} ({p.name}): array is on {arg.device}, the function runs on {device_kind}")
        return arg.host_view()
    if isinstance(arg, np.ndarray):
        return arg
    raise RuntimeArgumentError(
        f"argument {i} ({p.name}): expected an NDArray or numpy.ndarray, got {type(arg).__name__}")


def _check_layout(i: int, p: ParamSpec, arr: np.ndarray) -> None:
    if arr.dtype != p.np_dtype:
        raise RuntimeArgumentError(f"argument {i} ({p.name}): expected dtype {p.dtype}, got {arr.dtype}")
    if arr.ndim != len(p.shape):
        raise RuntimeArgumentError(
            f"argument {i} ({p.name}): expected {len(p.shape)} dimensions, got {arr.ndim} (shape {arr.shape})")
    if not arr.flags.c_contiguous:
        raise RuntimeArgumentError(
            f"argument {i} ({p.name}): array is not C-contiguous; pass numpy.ascontiguousarray(...)")


def _bind_dims(i: int, p: ParamSpec, shape: tuple, bound: dict, origin: dict) -> None:
    """Bind symbolic dims from ``shape`` and check constant and already-bound ones."""
    for axis, (d, got) in enumerate(zip(p.shape, shape)):
        if isinstance(d, str) and d not in bound:
            bound[d], origin[d] = got, (i, p.name, axis)
        elif isinstance(d, str) and bound[d] != got:
            src_i, src_name, src_axis = origin[d]
            raise RuntimeArgumentError(
                f"argument {i} ({p.name}): expected shape {_shape_text(p.shape, bound)}, got {shape}"
                f" ({d} = {bound[d]} from axis {src_axis} of argument {src_i} ({src_name}))")
        elif isinstance(d, int) and d != got:
            raise RuntimeArgumentError(
                f"argument {i} ({p.name}): expected shape {_shape_text(p.shape, bound)}, got {shape}")


def _check_computed_dims(i: int, p: ParamSpec, shape: tuple, bound: dict) -> None:
    for d, got in zip(p.shape, shape):
        if not isinstance(d, ComputedDim):
            continue
        try:
            want = d.evaluate(bound)
        except KeyError as missing:
            raise RuntimeArgumentError(
                f"argument {i} ({p.name}): shape entry {d.text} uses {missing} which no argument shape binds") from None
        if want != got:
            raise RuntimeArgumentError(
                f"argument {i} ({p.name}): expected shape {_shape_text(p.shape, bound)}, got {shape}")

