"""C text of CUDA types and constants.

    c_type("float16") -> "half"        int_literal(-2**31, "int32") -> "(-2147483647 - 1)"
    float_literal(0.1, "float32") -> "0.1f"     paren("a + b") -> "(a + b)"

Constants print as the shortest decimal that reads back as the same value, infinities and
NaN through bit patterns (``__int_as_float``), the most negative integers as an expression
(``-2147483648`` is not an int literal in C).  As TVM's ``PrintConst`` in
``src/target/source/codegen_cuda.cc``.
"""

from __future__ import annotations

import math

import numpy as np

from scheduler_core.base.errors import BuildError

from .cuda_int_range import INT32_MIN

__all__ = ["CTYPES", "c_type", "int_literal", "float_literal", "paren"]

CTYPES = {
    "bool": "bool", "int8": "signed char", "int16": "short", "int32": "int", "int64": "long long",
    "uint8": "unsigned char", "uint16": "unsigned short", "uint32": "unsigned int",
    "uint64": "unsigned long long", "float16": "half", "float32": "float", "float64": "double",
}


def c_type(dtype: str) -> str:
    """The C type of ``dtype``; BuildError for a dtype CUDA code generation does not know."""
    try:
        return CTYPES[dtype]
    except KeyError:
        raise BuildError(f"CUDA codegen has no C type for dtype {dtype!r}") from None


def int_literal(v: int, dtype: str) -> str:
    """An integer constant of ``dtype`` as C text."""
    v = int(v)
    if dtype == "bool":
        return "true" if v else "false"
    if dtype == "int64":
        return "(-9223372036854775807LL - 1)" if v == -(2 ** 63) else f"{v}LL"
    if dtype == "uint64":
        return f"{v}ULL"
    if dtype == "uint32":
        return f"{v}u"
    if dtype == "int32":
        return "(-2147483647 - 1)" if v == INT32_MIN else str(v)
    return f"(({c_type(dtype)}){v})"


def float_literal(v: float, dtype: str) -> str:
    """A float constant of ``dtype`` as C text: the shortest decimal that reads back as the
    same value (float32: as a float32), infinities and NaN through bit patterns."""
    v = float(v)
    if dtype == "float16":
        return f"((half){float_literal(v, 'float32')})"
    if math.isnan(v):
        return "__int_as_float(0x7fc00000)" if dtype == "float32" else \
            "__longlong_as_double(0x7ff8000000000000LL)"
    if math.isinf(v):
        if dtype == "float32":
            return f"__int_as_float({'0xff800000' if v < 0 else '0x7f800000'})"
        return f"__longlong_as_double({'0xfff0000000000000LL' if v < 0 else '0x7ff0000000000000LL'})"
    if dtype == "float32":
        text = str(np.float32(v))  # the shortest decimal that reads back as this float32
        if "e" not in text and "." not in text:
            text += ".0"
        return text + "f"
    text = repr(v)
    if "e" not in text and "." not in text:
        text += ".0"
    return text


def paren(text: str) -> str:
    """``text`` in parentheses, unless one pair already encloses all of it."""
    return text if text.startswith("(") and _balanced_outer(text) else f"({text})"


def _balanced_outer(text: str) -> bool:
    """Whether the first ``(`` of ``text`` closes at its last character."""
    depth = 0
    for i, ch in enumerate(text):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth == 0:
                return i == len(text) - 1
    return False
