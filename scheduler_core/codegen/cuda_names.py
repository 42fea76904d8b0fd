"""C identifiers of the generated CUDA source: user names made distinct from CUDA's own.

    CNames().fresh("A.shared") -> "A_shared"       assign_symbols(kernels): each kernel's
                                                   ``extern "C"`` name

Every name in the generated text (tensor names are user input) goes through
``scheduler_core.base.c_names`` and is made distinct from the identifiers the generated
code uses itself (:data:`RESERVED`), from C++'s reserved forms (``__x``, ``_X``) and from
each other.  TVM's ``CodeGenC`` keeps a name supply for the same purpose
(``src/target/source/codegen_c.cc``).
"""

from __future__ import annotations

from scheduler_core.base.c_names import c_identifier

from .cuda_intrinsics import CUDA_FAST_MATH, CUDA_MATH

__all__ = ["RESERVED", "CNames", "assign_symbols"]

# Identifiers the generated code uses itself (CUDA built-ins, math functions, helpers, C++
# keywords that C lacks): a user name equal to one of them gets a trailing "_".
RESERVED = frozenset(
    "threadIdx blockIdx blockDim gridDim warpSize half half2 __half nv_bfloat16 float2 float4 "
    "make_float2 make_float4 int2 int4 double2 min max abs llabs fminf fmaxf fmin fmax powf pow "
    "floordiv_i32 floormod_i32 floordiv_i64 floormod_i64 checked_index autosched_status main std "
    "class new delete this template typename namespace using private public protected operator "
    "virtual friend try catch throw explicit mutable export and or not xor bitand bitor compl "
    "and_eq or_eq xor_eq not_eq wchar_t char8_t char16_t char32_t decltype noexcept concept "
    "requires co_await co_yield co_return consteval constinit dynamic_cast static_cast "
    "const_cast reinterpret_cast typeid".split()
    + [f + s for f in set(CUDA_MATH.values()) | {"sigmoid"} for s in ("", "f")]
    + list(CUDA_FAST_MATH.values())
)


class CNames:
    """Distinct C identifiers for user names (buffers, variables) and generated temporaries."""

    def __init__(self) -> None:
        self.taken: set = set()

    def fresh(self, name: str) -> str:
        ident = c_identifier(name)
        if ident.startswith("__") or (ident.startswith("_") and ident[1:2].isupper()):
            ident = "v" + ident  # reserved for the implementation in C++
        if ident in RESERVED:
            ident += "_"
        return _distinct(ident, self.taken)


def _distinct(ident: str, taken: set) -> str:
    """``ident``, or ``ident_1``, ``ident_2``... the first not in ``taken`` (then added to it)."""
    base, k = ident, 1
    while ident in taken:
        ident, k = f"{base}_{k}", k + 1
    taken.add(ident)
    return ident


def assign_symbols(kernels: list) -> None:
    """Set ``symbol`` of each CudaKernel: its name as a distinct C identifier."""
    taken: set = set()
    for k in kernels:
        sym = c_identifier(k.name)
        if sym.startswith("__") or sym in RESERVED:
            sym = "k" + sym
        k.symbol = _distinct(sym, taken)
