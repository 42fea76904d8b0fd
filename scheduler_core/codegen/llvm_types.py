"""LLVM types of the IR's dtypes, constants and small vector helpers.

Registers hold ``bool`` as ``i1``; memory holds it as ``i8`` (numpy's bool).
``float16`` is LLVM ``half``.  Unsigned integers share LLVM's signless ``iN``;
the operations pick the unsigned instructions.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir

from scheduler_core.base.errors import BuildError

I1 = ir.IntType(1)
I8 = ir.IntType(8)
I32 = ir.IntType(32)
I64 = ir.IntType(64)
PTR = ir.PointerType()
VOID = ir.VoidType()

_FLOATS = {"float16": ir.HalfType(), "float32": ir.FloatType(), "float64": ir.DoubleType()}


def is_signed(dtype: str) -> bool:
    return dtype.startswith("int")


def scalar_type(dtype: str) -> ir.Type:
    """The register type of one element of ``dtype`` (bool -> i1).  Raises BuildError."""
    if dtype in _FLOATS:
        return _FLOATS[dtype]
    if dtype == "bool":
        return I1
    if dtype.startswith("int") or dtype.startswith("uint"):
        return ir.IntType(int(dtype.lstrip("uint")))
    raise BuildError(f"unsupported dtype {dtype!r}")


def mem_type(dtype: str) -> ir.Type:
    """The in-memory type of one element of ``dtype`` (bool -> i8)."""
    return I8 if dtype == "bool" else scalar_type(dtype)


def elem_bytes(dtype: str) -> int:
    """Bytes per element of a buffer of ``dtype``."""
    t = mem_type(dtype)
    if isinstance(t, ir.IntType):
        return t.width // 8
    return {"half": 2, "float": 4, "double": 8}[str(t)]


def reg_type(dtype: str, lanes: int = 1) -> ir.Type:
    """The register type of a ``lanes``-wide value of ``dtype``."""
    t = scalar_type(dtype)
    return t if lanes == 1 else ir.VectorType(t, lanes)


def lanes_of(value) -> int:
    """Number of lanes of an LLVM value (1 for scalars)."""
    t = value.type
    return t.count if isinstance(t, ir.VectorType) else 1


def elem_of(t: ir.Type) -> ir.Type:
    return t.element if isinstance(t, ir.VectorType) else t


def is_float_type(t: ir.Type) -> bool:
    return isinstance(elem_of(t), (ir.HalfType, ir.FloatType, ir.DoubleType))


def const(value, dtype: str, lanes: int = 1) -> ir.Constant:
    """An LLVM constant of ``dtype`` (splat over ``lanes``); float16 rounds first."""
    t = scalar_type(dtype)
    if dtype == "float16":
        value = float(np.float16(value))
    elif dtype in _FLOATS:
        value = float(value)
    else:
        value = int(value)
    c = ir.Constant(t, value)
    if lanes == 1:
        return c
    return ir.Constant(ir.VectorType(t, lanes), [c] * lanes)


def splat(builder: ir.IRBuilder, value, lanes: int):
    """A ``lanes``-wide vector of copies of the scalar ``value`` (insertelement + shufflevector)."""
    if lanes == 1 or lanes_of(value) == lanes:
        return value
    if isinstance(value, ir.Constant):
        return ir.Constant(ir.VectorType(value.type, lanes), [value] * lanes)
    vt = ir.VectorType(value.type, lanes)
    one = builder.insert_element(ir.Constant(vt, ir.Undefined), value, ir.Constant(I32, 0))
    return builder.shuffle_vector(one, ir.Constant(vt, ir.Undefined),
                                  ir.Constant(ir.VectorType(I32, lanes), None))


def iota(lanes: int, t: ir.Type = I64) -> ir.Constant:
    """The constant vector ``<0, 1, ..., lanes-1>``."""
    return ir.Constant(ir.VectorType(t, lanes), [ir.Constant(t, i) for i in range(lanes)])


def all_ones(lanes: int) -> ir.Constant:
    """An all-true ``<lanes x i1>`` mask."""
    return ir.Constant(ir.VectorType(I1, lanes), [ir.Constant(I1, 1)] * lanes)


def intrinsic_suffix(t: ir.Type) -> str:
    """LLVM's overload suffix: ``f32``, ``v8f32``, ``i64``, ``v8p0``..."""
    if isinstance(t, ir.VectorType):
        return f"v{t.count}{intrinsic_suffix(t.element)}"
    if isinstance(t, ir.PointerType):
        return "p0"
    if isinstance(t, ir.IntType):
        return f"i{t.width}"
    return {"half": "f16", "float": "f32", "double": "f64"}[str(t)]


def declare(module: ir.Module, name: str, ret: ir.Type, args: list) -> ir.Function:
    """The function ``name`` of ``module``, declared with ``ret(args)`` if missing."""
    fn = module.globals.get(name)
    if fn is None:
        fn = ir.Function(module, ir.FunctionType(ret, args), name)
    return fn
