"""Vector math through glibc's libmvec (the x86-64 vector function ABI).

LLVM expands a vector ``llvm.exp.v8f32`` into eight scalar ``expf`` calls; glibc
(2.22+, most functions 2.35+) ships vector versions such as
``_ZGVeN16v_expf`` (AVX-512, 16 floats), ``_ZGVdN8v_expf`` (AVX2, 8 floats) and
``_ZGVbN4v_expf`` (SSE, 4 floats) -- the widest the host has is used -- with
errors within 4 ulp.  For a float32/float64 vector of any lane count,
:func:`mvec_call` pads it with undefined lanes to a multiple of the native width
(a 20-lane or 4-lane vector of an AVX2 build is 3 or 1 chunks of 8), splits it
into native chunks, calls libmvec, concatenates and drops the padding; without
libmvec (or the function) it returns ``None`` and the caller falls back to LLVM
intrinsics / per-lane libm calls.  This is the route of
LLVM's ``-vector-library=LIBMVEC`` done by hand (TVM does the same for SVML).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools

import llvmlite.binding as llvm
from llvmlite import ir

from scheduler_core.base.llvm_cpu import host_features
from scheduler_core.ir.intrinsics import Intrinsic

from . import llvm_types as L

MAX_CHUNKS = 64  # wider vectors go to the per-lane fallback (code size)


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


def _symbol(libm: str, dtype: str, max_vector_bytes: int = 64, arity: int = 1) -> tuple | None:
    """``(symbol, native lanes)`` of the libmvec version of the libm function ``libm`` (double
    name) of ``arity`` vector arguments, or ``None``.

    max_vector_bytes: the widest vector the code may use (the build target's vector unit:
    an export for an AVX2 CPU built on an AVX-512 host must not call the AVX-512 variant).
    """
    lib = _libmvec()
    if lib is None:
        return None
    features = host_features().split(",")
    suffix = f"{'v' * arity}_{libm}{'f' if dtype == 'float32' else ''}"
    # Widest first: AVX-512 ("e", 512-bit), AVX2 ("d", 256-bit), SSE ("b", 128-bit).
    for isa, bits, need in (("e", 512, "+avx512f"), ("d", 256, "+avx2"), ("b", 128, None)):
        if (need is not None and need not in features) or bits > 8 * max_vector_bytes:
            continue
        lanes = bits // (32 if dtype == "float32" else 64)
        sym = f"_ZGV{isa}N{lanes}{suffix}"
        if hasattr(lib, sym):
            return sym, lanes
    return None


def mvec_call(em, row: Intrinsic, args: list, dtype: str):
    """Emit the intrinsic ``row`` (ir/intrinsics.py) on vectors with libmvec, or return
    ``None`` if not possible (a scalar, float16, a row without ``mvec``, no such symbol).

    em: the emitter (``builder``, ``module``; ``ctx.vector_bytes``, the build target's vector
    unit in bytes, bounds the variant chosen).  args: LLVM vectors of ``dtype``.
    """
    lanes = L.lanes_of(args[0])
    if not row.mvec or row.libm is None or dtype not in ("float32", "float64") or lanes == 1:
        return None
    vector_bytes = getattr(getattr(em, "ctx", None), "vector_bytes", 64)
    found = _symbol(row.libm, dtype, vector_bytes, row.arity)
    if found is None:
        return None
    sym, width = found
    chunks = -(-lanes // width)
    if chunks > MAX_CHUNKS:
        return None
    vt = ir.VectorType(L.scalar_type(dtype), width)
    fn = L.declare(em.module, sym, vt, [vt] * len(args))
    bld = em.builder
    parts = []
    for c in range(chunks):
        if chunks == 1 and lanes == width:
            parts.append(bld.call(fn, args))
            continue
        # Lanes past the end of the argument read as undefined (padding).
        idx = [ir.Constant(L.I32, c * width + k if c * width + k < lanes else lanes) for k in range(width)]
        mask = ir.Constant(ir.VectorType(L.I32, width), idx)
        sub = [bld.shuffle_vector(a, ir.Constant(a.type, ir.Undefined), mask) for a in args]
        parts.append(bld.call(fn, sub))
    while len(parts) > 1:
        nxt = [_concat(bld, parts[i], parts[i + 1]) for i in range(0, len(parts) - 1, 2)]
        if len(parts) % 2:
            last = parts[-1]
            nxt.append(_concat(bld, last, ir.Constant(last.type, ir.Undefined)))
        parts = nxt
    out = parts[0]
    if out.type.count == lanes:
        return out
    keep = ir.Constant(ir.VectorType(L.I32, lanes), [ir.Constant(L.I32, k) for k in range(lanes)])
    return bld.shuffle_vector(out, ir.Constant(out.type, ir.Undefined), keep)


def _concat(bld, a, b):
    n = a.type.count * 2
    mask = ir.Constant(ir.VectorType(L.I32, n), [ir.Constant(L.I32, k) for k in range(n)])
    return bld.shuffle_vector(a, b, mask)
