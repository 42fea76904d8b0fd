"""Vector widths that are not powers of two, and loads with a small constant stride.

A vectorized loop of 28 lanes becomes vectors of 16, 8 and 4 lanes (the x86 back end
re-packs a ``<28 x float>`` lane by lane around every loop-carried value: a conv2d tile of
28 lanes ran at 4 GFLOP/s); a vectorized reduce loop of such a width is strip-mined into
power-of-two chunks.  A load of stride 2 or 4 (a stride-2 convolution's input) is one
masked load of the span and a shuffle instead of a gather.  Results agree with numpy.
"""

import ctypes
import re

import numpy as np
import pytest

from scheduler_core import te
from scheduler_core.codegen import compile_primfunc as compile_passed
from scheduler_core.driver.build_module import build, run_passes
from scheduler_core.ir import expr as E
from scheduler_core.ir import tir as T
from scheduler_core.passes import vectorize_loops
from scheduler_core.passes.vectorize import pow2_pieces
from tests import workloads as W

RNG = np.random.default_rng(11)


def _float_vector_widths(llvm_ir: str) -> set:
    return {int(n) for n in re.findall(r"<(\d+) x (?:float|double)>", llvm_ir)}


def _pow2(n: int) -> bool:
    return n & (n - 1) == 0


def test_pow2_pieces():
    assert pow2_pieces(28) == [(0, 16), (16, 8), (24, 4)]
    assert pow2_pieces(7) == [(0, 4), (4, 2), (6, 1)]
    assert pow2_pieces(56) == [(0, 32), (32, 16), (48, 8)]
    assert pow2_pieces(16) == [(0, 16)]
    assert pow2_pieces(3) == [(0, 2), (2, 1)]


def test_non_pow2_loop_becomes_pow2_groups():
    """for j vectorized(7): C[i*7 + j] = A[i*7 + j] + 1 -> stores of 4 and 2 lanes and a
    scalar store, at offsets 0, 4 and 6."""
    A, C = T.Buffer("A", "float32", (70,)), T.Buffer("C", "float32", (70,))
    i, j = E.Var("i"), E.Var("j")
    body = T.Store(C, i * 7 + j, E.BufferLoad(A, i * 7 + j, "float32") + E.const(1.0))
    loop = T.For(j, E.const(0), E.const(7), "vectorized", body)
    s = vectorize_loops(T.For(i, E.const(0), E.const(10), "serial", loop))
    stores = [x for x in T.walk_stmts(s) if isinstance(x, T.Store)]
    assert [x.index.lanes if isinstance(x.index, E.Ramp) else 1 for x in stores] == [4, 2, 1]
    assert isinstance(stores[1].index, E.Ramp) and "4" in str(stores[1].index.base)
    assert "6" in str(stores[2].index)


@pytest.mark.parametrize("width", [3, 7, 12, 28, 56])
def test_non_pow2_elementwise_widths_match_numpy(width):
    A = te.placeholder((6, width * 3), name="A")
    B = te.compute((6, width * 3), lambda i, j: A[i, j] * 3.0 + 1.0, name="B")
    s = te.create_schedule(B.op)
    _, ji = s[B].split(s[B].op.axis[1], factor=width)
    s[B].vectorize(ji)
    mod = build(s, [A, B])
    a = RNG.standard_normal((6, width * 3)).astype("float32")
    b = np.zeros_like(a)
    mod(a, b)
    np.testing.assert_allclose(b, a * 3.0 + 1.0, rtol=1e-6, atol=1e-6)  # FMA-contracted
    widths = _float_vector_widths(mod.get_source("ll"))
    assert widths and all(_pow2(w) for w in widths)


def _conv_reference(data, kernel, bias, stride):
    n, c, h, w = data.shape
    co, _, kh, kw = kernel.shape
    p = np.pad(data, ((0, 0), (0, 0), (1, 1), (1, 1)))
    oh, ow = (h + 2 - kh) // stride + 1, (w + 2 - kw) // stride + 1
    out = np.zeros((n, co, oh, ow), np.float64)
    for ry in range(kh):
        for rx in range(kw):
            win = p[:, :, ry:ry + stride * oh:stride, rx:rx + stride * ow:stride]
            out += np.einsum("nchw,fc->nfhw", win, kernel[:, :, ry, rx])
    return np.maximum(out + bias[None, :, None, None], 0).astype(np.float32)


@pytest.mark.parametrize("stride,xi", [(1, 14), (1, 28), (2, 7), (2, 14)])
def test_conv_register_tile_of_non_pow2_width(stride, xi):
    """A conv2d register tile whose row is 7, 14 or 28 lanes (16 + 8 + 4 ...), with stride-2
    input loads for stride 2: exact against numpy, no vector of another width in the IR
    and no gather."""
    args = W.conv2d_nchw(1, 8, 28, 28, 8, 3, 3, stride)
    s = W.conv2d_register_tile_schedule(args, 2, xi)
    mod = build(s, args)
    data, kernel, bias = (RNG.standard_normal(tuple(int(d) for d in t.shape)).astype("float32")
                          for t in args[:-1])
    out = np.zeros(tuple(int(d) for d in args[-1].shape), "float32")
    mod(data, kernel, bias, out)
    np.testing.assert_allclose(out, _conv_reference(data, kernel, bias, stride), rtol=1e-4, atol=1e-4)
    ir = mod.get_source("ll")
    assert all(_pow2(w) for w in _float_vector_widths(ir))
    assert "masked.gather" not in ir


@pytest.mark.parametrize("width", [12, 28])
def test_non_pow2_vectorized_reduction(width):
    """A row sum whose reduce axis is split by a width that is not a power of two and
    vectorized: power-of-two accumulators, the sum as numpy's."""
    m = width * 4
    A = te.placeholder((5, m), name="A")
    k = te.reduce_axis((0, m), name="k")
    S = te.compute((5,), lambda i: te.sum(A[i, k], axis=k), name="S")
    s = te.create_schedule(S.op)
    _, ki = s[S].split(s[S].op.reduce_axis[0], factor=width)
    s[S].vectorize(ki)
    mod = build(s, [A, S])
    a = RNG.standard_normal((5, m)).astype("float32")
    out = np.zeros(5, "float32")
    mod(a, out)
    np.testing.assert_allclose(out, a.astype(np.float64).sum(axis=1), rtol=1e-4, atol=1e-4)
    assert all(_pow2(w) for w in _float_vector_widths(mod.get_source("ll")))


@pytest.mark.parametrize("stride,lanes", [(2, 8), (2, 16), (4, 8)])
def test_strided_load_is_a_masked_load_and_shuffle(stride, lanes):
    n = lanes * 5
    A = te.placeholder((n * stride,), name="A")
    B = te.compute((n,), lambda i: A[i * stride] + A[i * stride + 1] * 2.0, name="B")
    s = te.create_schedule(B.op)
    _, ii = s[B].split(s[B].op.axis[0], factor=lanes)
    s[B].vectorize(ii)
    mod = build(s, [A, B])
    a = RNG.standard_normal(n * stride).astype("float32")
    b = np.zeros(n, "float32")
    mod(a, b)
    np.testing.assert_allclose(b, a[::stride] + a[1::stride] * 2.0, rtol=1e-6)
    ir = mod.get_source("ll")
    assert "masked.gather" not in ir and "masked.load" in ir


def test_strided_load_with_a_tail_guard():
    """A non-divisible split: the tail's lanes are masked in the strided load too."""
    n = 21
    A = te.placeholder((2 * n,), name="A")
    B = te.compute((n,), lambda i: A[2 * i] * 2.0, name="B")
    s = te.create_schedule(B.op)
    _, ii = s[B].split(s[B].op.axis[0], factor=8)
    s[B].vectorize(ii)
    mod = build(s, [A, B])
    a = RNG.standard_normal(2 * n).astype("float32")
    b = np.zeros(n, "float32")
    mod(a, b)
    np.testing.assert_allclose(b, a[::2] * 2.0, rtol=1e-6)


def test_strided_load_reads_no_element_past_the_last_lane():
    """``C[i] = A[2*i]`` for 16 lanes with A's last read element the last float before a
    PROT_NONE page: the span load's 32nd element (past A's end) is masked off."""
    lanes = 16
    A = T.Buffer("A", "float32", (2 * lanes - 1,))
    C = T.Buffer("C", "float32", (lanes,))
    i = E.Var("i")
    loop = T.For(i, E.const(0), E.const(lanes), "vectorized",
                 T.Store(C, i, E.BufferLoad(A, i * 2, "float32") + E.const(1.0)))
    cf = compile_passed(run_passes(T.PrimFunc("strided_edge", (A, C), (), loop)), "llvm")
    assert "masked.gather" not in cf.llvm_ir
    page = 4096
    raw = (ctypes.c_char * (3 * page))()
    base = (ctypes.addressof(raw) + page - 1) // page * page
    libc = ctypes.CDLL(None)
    libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    guard = base + page
    assert libc.mprotect(guard, page, 0) == 0  # PROT_NONE after the first page
    try:
        a_ptr = guard - (2 * lanes - 1) * 4
        a = np.ctypeslib.as_array((ctypes.c_float * (2 * lanes - 1)).from_address(a_ptr))
        a[:] = np.arange(2 * lanes - 1, dtype="float32")
        c = np.zeros(lanes, "float32")
        assert cf.ctypes_function(a_ptr, c.ctypes.data) == 0
        np.testing.assert_allclose(c, np.arange(0, 2 * lanes, 2, dtype="float32") + 1.0)
    finally:
        libc.mprotect(guard, page, 3)
