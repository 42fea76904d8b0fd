"""Vector math through glibc's libmvec (the x86-64 vector function ABI).

LLVM expands a vector ``llvm.exp.v8f32`` into eight scalar ``expf`` calls; glibc
(2.22+, most functions 2.35+) ships vector versions such as
``_ZGVdN8v_expf`` (AVX2, 8 floats) and ``_ZGVbN4v_expf`` (SSE, 4 floats), with
errors within 4 ulp.  For a float32/float64 vector whose lane count is 1, 2, 4
or 8 times the native width, :func:`mvec_call` splits it into native chunks,
calls libmvec and concatenates; otherwise it returns ``None`` and the caller
falls back to LLVM intrinsics / per-lane libm calls.  This is the route of
LLVM's ``-vector-library=LIBMVEC`` done by hand (TVM does the same for SVML).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools

import llvmlite.binding as llvm
from llvmlite import ir

from scheduler_core.base.target import host_features

from . import llvm_types as L

FUNCS = ("exp", "log", "sin", "cos", "tanh", "erf", "exp2", "log2", "log10", "pow")


@functools.cache
def _libmvec():
    """The loaded libmvec (visible to the JIT), or ``None`` when it is missing."""
    path = ctypes.util.find_library("mvec") or "libmvec.so.1"
    try:
        lib = ctypes.CDLL(path)
        llvm.load_library_permanently(path)
    except (OSError, RuntimeError):
        return None
    return lib


def _symbol(name: str, dtype: str) -> tuple | None:
    """``(symbol, native lanes)`` of the libmvec function, or ``None``."""
    lib = _libmvec()
    if lib is None:
        return None
    avx2 = "+avx2" in host_features().split(",")
    lanes = (8 if avx2 else 4) if dtype == "float32" else (4 if avx2 else 2)
    isa = "d" if avx2 else "b"
    params = "vv" if name == "pow" else "v"
    sym = f"_ZGV{isa}N{lanes}{params}_{name}{'f' if dtype == 'float32' else ''}"
    return (sym, lanes) if hasattr(lib, sym) else None


def mvec_call(em, name: str, args: list, dtype: str):
    """Emit ``name(args)`` on vectors with libmvec, or return ``None`` if not possible.

    em: the emitter (``builder``, ``module``).  args: LLVM vectors of ``dtype``.
    """
    lanes = L.lanes_of(args[0])
    if name not in FUNCS or dtype not in ("float32", "float64") or lanes == 1:
        return None
    found = _symbol(name, dtype)
    if found is None:
        return None
    sym, width = found
    chunks = lanes // width
    if lanes % width or chunks not in (1, 2, 4, 8):
        return None
    vt = ir.VectorType(L.scalar_type(dtype), width)
    fn = L.declare(em.module, sym, vt, [vt] * len(args))
    bld = em.builder
    parts = []
    for c in range(chunks):
        if chunks == 1:
            parts.append(bld.call(fn, args))
            continue
        mask = ir.Constant(ir.VectorType(L.I32, width),
                           [ir.Constant(L.I32, c * width + k) for k in range(width)])
        sub = [bld.shuffle_vector(a, ir.Constant(a.type, ir.Undefined), mask) for a in args]
        parts.append(bld.call(fn, sub))
    while len(parts) > 1:
        parts = [_concat(bld, parts[i], parts[i + 1]) for i in range(0, len(parts), 2)]
    return parts[0]


def _concat(bld, a, b):
    n = a.type.count * 2
    mask = ir.Constant(ir.VectorType(L.I32, n), [ir.Constant(L.I32, k) for k in range(n)])
    return bld.shuffle_vector(a, b, mask)
