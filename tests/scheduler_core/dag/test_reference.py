"""The numpy reference evaluator against direct numpy, on the seeds' workloads."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numpy.lib.stride_tricks import sliding_window_view

import scheduler_core.dag.reference as ref
from scheduler_core import ComputeDAG, InvalidWorkloadError, te
from scheduler_core.dag.reference import evaluate, evaluate_dict, resolve_bindings
from scheduler_core.ir.expr import call
from tests import workloads as W


def rand(rng, *shape, dtype="float32"):
    return rng.standard_normal(shape).astype(dtype)


@pytest.fixture
def rng():
    return np.random.default_rng(0)


def run(tensors, *arrays, **kw):
    return evaluate(ComputeDAG(tensors), list(arrays), **kw)


def conv2d_ref(x, w, stride, pad):
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    kh, kw = w.shape[-2:]
    win = sliding_window_view(xp, (kh, kw), axis=(2, 3))[:, :, ::stride, ::stride]
    return win, xp


# -- dense workloads -----------------------------------------------------------

def test_matmul_add_seed000(rng):
    a, b, c = rand(rng, 32, 24), rand(rng, 24, 16), rand(rng, 32, 16)
    (out,) = run(W.matmul_add(32, 24, 16), a, b, c)
    assert out.dtype == np.float32 and out.shape == (32, 16)
    np.testing.assert_allclose(out, a @ b + c, rtol=1e-5, atol=1e-5)


def test_matmul_bias_relu(rng):
    a, b, bias = rand(rng, 20, 30), rand(rng, 30, 10), rand(rng, 10)
    (out,) = run(W.matmul_bias_relu(20, 10, 30), a, b, bias)
    np.testing.assert_allclose(out, np.maximum(a @ b + bias, 0), rtol=1e-5, atol=1e-5)


def test_matmul_256_cube_in_chunks(rng):
    """A 256^3 matmul is 2**24 grid points: it runs chunked, and quickly."""
    a, b = rand(rng, 256, 256), rand(rng, 256, 256)
    (out,) = run(W.matmul(256, 256, 256), a, b)
    np.testing.assert_allclose(out, a @ b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("stride", [1, 2])
def test_conv2d_nchw_pad_bias_relu(rng, stride):
    x, w, bias = rand(rng, 2, 3, 9, 8), rand(rng, 4, 3, 3, 3), rand(rng, 4)
    (out,) = run(W.conv2d_nchw(2, 3, 9, 8, 4, 3, 3, stride=stride, pad=1), x, w, bias)
    win, _ = conv2d_ref(x, w, stride, 1)
    ref = np.maximum(np.einsum("ncyxhw,fchw->nfyx", win, w) + bias[:, None, None], 0)
    assert out.shape == ref.shape and out.dtype == np.float32
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)


def test_conv2d_pad_stage_is_zero_padding(rng):
    x = rand(rng, 1, 2, 5, 5)
    tensors = W.conv2d_nchw(1, 2, 5, 5, 2, 3, 3)
    pad = next(op for op in ComputeDAG(tensors).ops if op.name == "pad").output(0)
    (padded,) = evaluate(ComputeDAG([tensors[0], pad]), [x])
    np.testing.assert_array_equal(padded, np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1))))


def test_depthwise_conv2d_inline_padding(rng):
    x, w = rand(rng, 2, 3, 7, 6), rand(rng, 3, 3, 3)
    (out,) = run(W.depthwise_conv2d(2, 3, 7, 6, 3, 3), x, w)
    win, _ = conv2d_ref(x, w, 1, 1)
    np.testing.assert_allclose(out, np.einsum("ncyxhw,chw->ncyx", win, w), rtol=1e-4, atol=1e-5)


def test_softmax(rng):
    a = rand(rng, 6, 50) * 10
    (out,) = run(W.softmax(6, 50), a)
    e = np.exp(a - a.max(axis=1, keepdims=True))
    np.testing.assert_allclose(out, e / e.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-7)


def test_layer_norm_symbolic_row_length(rng):
    n, m = te.var("n"), te.var("m")
    a, g, b = rand(rng, 5, 40), rand(rng, 40), rand(rng, 40)
    (out,) = run(W.layer_norm(n, m), a, g, b)
    ref = (a - a.mean(1, keepdims=True)) / np.sqrt(a.var(1, keepdims=True) + 1e-5) * g + b
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)


def test_batch_matmul_and_transpose(rng):
    a, b = rand(rng, 3, 5, 7), rand(rng, 3, 7, 4)
    (out,) = run(W.batch_matmul(3, 5, 4, 7), a, b)
    np.testing.assert_allclose(out, a @ b, rtol=1e-5, atol=1e-5)
    (t,) = run(W.transpose(5, 7), a[0])
    np.testing.assert_array_equal(t, a[0].T)


def test_rgb_to_yuv_seed003(rng):
    x = rng.uniform(size=(19, 11, 3)).astype(np.float32)
    (out,) = run(W.rgb_to_yuv(19, 11), x)
    mat = np.array([[0.257, -0.148, 0.439], [0.504, -0.291, -0.368], [0.098, 0.439, -0.071]],
                   np.float32)
    np.testing.assert_allclose(out, x.dot(mat), rtol=1e-5, atol=1e-6)


# -- scans (seed 001) ------------------------------------------------------------

def test_cumsum_scan_symbolic():
    m, n = te.var("m"), te.var("n")
    x = np.random.default_rng(1).uniform(size=(10, 33)).astype(np.float32)
    X, s_scan = W.cumsum_scan(m, n)
    doubled = te.compute((m, n), lambda t, i: s_scan[t, i] * 2, name="doubled")
    out, out2 = run([X, s_scan, doubled], x)
    np.testing.assert_allclose(out, np.cumsum(x, axis=0), rtol=1e-6)
    np.testing.assert_allclose(out2, 2 * np.cumsum(x, axis=0), rtol=1e-6)


def test_two_stage_scan():
    m, n = te.var("m"), te.var("n")
    x = np.random.default_rng(2).uniform(size=(6, 5)).astype(np.float32)
    (out,) = run(W.two_stage_scan(m, n), x)
    ref = x.copy()
    for t in range(1, 6):
        ref[t] = ref[t - 1] * 2 + x[t]
    np.testing.assert_allclose(out, ref, rtol=1e-6)


def test_two_state_scan_needs_l_binding():
    m, n, l = te.var("m"), te.var("n"), te.var("l")
    x = np.random.default_rng(3).uniform(size=(7, 4)).astype(np.float32)
    dag = ComputeDAG(W.two_state_scan(m, n, l))
    with pytest.raises(InvalidWorkloadError, match="no value for symbolic variable.*l"):
        evaluate(dag, [x])
    s1, s2 = evaluate(dag, [x], bindings={"l": 3})
    np.testing.assert_allclose(s1, np.cumsum(x, axis=0), rtol=1e-6)
    ref2 = np.zeros((7, 3), np.float32)
    for t in range(1, 7):
        ref2[t] = ref2[t - 1] + s1[t - 1, 0]
    np.testing.assert_allclose(s2, ref2, rtol=1e-6)
    assert s2.shape == (7, 3) and s2.dtype == np.float32


def test_scan_with_two_init_steps_fibonacci():
    X = te.placeholder((2, 3), "int64", name="X")
    state = te.placeholder((10, 3), "int64", name="state")
    init = te.compute((2, 3), lambda t, i: X[t, i], name="init")
    update = te.compute((10, 3), lambda t, i: state[t - 1, i] + state[t - 2, i], name="update")
    fib = te.scan(init, update, state, inputs=[X])
    (out,) = run([X, fib], np.array([[0, 1, 2], [1, 1, 3]], np.int64))
    ref = [[0, 1, 2], [1, 1, 3]]
    for _ in range(8):
        ref.append([a + b for a, b in zip(ref[-1], ref[-2])])
    np.testing.assert_array_equal(out, np.array(ref))


def test_rnn_scan_with_reduction_in_update(rng):
    """A scan whose update stage is a reduction: h[t] = tanh(h[t-1] @ Wh + X[t])."""
    T, H = 5, 4
    X = te.placeholder((T, H), name="X")
    Wh = te.placeholder((H, H), name="Wh")
    state = te.placeholder((T, H), name="h_state")
    init = te.compute((1, H), lambda _, i: te.tanh(X[0, i]), name="h_init")
    k = te.reduce_axis((0, H), name="k")
    mm = te.compute((T, H), lambda t, i: te.sum(state[t - 1, k] * Wh[k, i], axis=k), name="mm")
    update = te.compute((T, H), lambda t, i: te.tanh(mm[t, i] + X[t, i]), name="h_update")
    h = te.scan(init, update, state, inputs=[X, Wh], name="rnn")
    x, wh = rand(rng, T, H), rand(rng, H, H)
    (out,) = run([X, Wh, h], x, wh)
    ref = [np.tanh(x[0])]
    for t in range(1, T):
        ref.append(np.tanh(ref[-1] @ wh + x[t]))
    np.testing.assert_allclose(out, np.array(ref), rtol=1e-5, atol=1e-6)


# -- reductions, dtypes, intrinsics ---------------------------------------------

def test_reduction_with_where(rng):
    a = rand(rng, 6, 6)
    A = te.placeholder((6, 6), name="A")
    k = te.reduce_axis((0, 6), name="k")
    low = te.compute((6,), lambda i: te.sum(A[i, k], axis=k, where=k <= i), name="low")
    k2 = te.reduce_axis((0, 6), name="k2")
    big = te.compute((6,), lambda i: te.max(A[i, k2], axis=k2, where=k2 > i), name="big")
    out_low, out_big = run([A, low, big], a)
    np.testing.assert_allclose(out_low, np.tril(a).sum(1), rtol=1e-5, atol=1e-6)
    ref_big = [a[i, i + 1:].max() for i in range(5)] + [np.finfo(np.float32).min]
    np.testing.assert_allclose(out_big, ref_big, rtol=1e-6)  # empty row: te.min_value


def test_where_guards_out_of_range_loads(rng):
    a = rand(rng, 5)
    A = te.placeholder((5,), name="A")
    k = te.reduce_axis((0, 8), name="k")
    s = te.compute((), lambda: te.sum(A[k], axis=k, where=k < 5), name="s")
    (out,) = run([A, s], a)
    assert out.shape == () and math.isclose(float(out), float(a.sum()), rel_tol=1e-5)


def test_integer_floordiv_floormod_python_semantics():
    a = np.arange(-9, 10, dtype=np.int32)
    A = te.placeholder((19,), "int32", name="A")
    q = te.compute((19,), lambda i: te.floordiv(A[i], 4) + te.floordiv(A[i], -3), name="q")
    r = te.compute((19,), lambda i: te.floormod(A[i], 4) * 10 + A[i] % -3, name="r")
    h = te.compute((10,), lambda i: A[te.floordiv(i * 19, 10)] + A[(i * 7) % 19], name="h")
    oq, orr, oh = run([A, q, r, h], a)
    assert oq.dtype == orr.dtype == oh.dtype == np.int32
    np.testing.assert_array_equal(oq, a // 4 + a // -3)
    np.testing.assert_array_equal(orr, (a % 4) * 10 + a % -3)
    i = np.arange(10)
    np.testing.assert_array_equal(oh, a[i * 19 // 10] + a[(i * 7) % 19])


def test_dtypes_are_kept(rng):
    a64 = rng.standard_normal(8)
    A = te.placeholder((8,), "float64", name="A")
    B = te.compute((8,), lambda i: A[i] * 0.1 + 1, name="B")
    C = te.compute((8,), lambda i: (B[i] * 100).astype("int16"), name="C")
    D = te.compute((8,), lambda i: C[i].astype("float32") / 3, name="D")
    b, c, d = run([A, B, C, D], a64)
    assert (b.dtype, c.dtype, d.dtype) == (np.float64, np.int16, np.float32)
    np.testing.assert_allclose(b, a64 * 0.1 + 1, rtol=1e-12)
    np.testing.assert_array_equal(c, np.trunc(b * 100).astype(np.int16))
    np.testing.assert_allclose(d, c.astype(np.float32) / np.float32(3), rtol=1e-7)


INTRINSICS = {
    "exp": np.exp, "log": np.log, "sqrt": np.sqrt, "rsqrt": lambda x: 1 / np.sqrt(x),
    "tanh": np.tanh, "sigmoid": lambda x: 1 / (1 + np.exp(-x)), "fabs": np.abs,
    "erf": np.vectorize(math.erf), "floor": np.floor, "ceil": np.ceil, "round": np.rint,
    "sin": np.sin, "cos": np.cos, "exp2": np.exp2, "log2": np.log2, "log10": np.log10,
    "trunc": np.trunc,
}


@pytest.mark.parametrize("name", sorted(INTRINSICS))
def test_intrinsics(name):
    x = np.array([0.3, 0.5, 1.5, 2.5, 3.7, 0.01, 7.25], np.float32)
    A = te.placeholder((7,), name="A")
    B = te.compute((7,), lambda i: call(name, A[i] * 1.0), name="B")
    (out,) = run([A, B], x)
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, INTRINSICS[name](x.astype(np.float64)), rtol=2e-6, atol=1e-7)


def test_pow_min_max_abs_and_logic(rng):
    a = rand(rng, 9)
    A = te.placeholder((9,), name="A")
    B = te.compute((9,), lambda i: te.pow(te.abs(A[i]), 1.5) + te.min(A[i], 0.25)
                   - te.max(A[i], -0.5), name="B")
    C = te.compute((9,), lambda i: te.if_then_else(te.any(A[i] > 1.0, ~(A[i] > -1.0)), 1, 0),
                   name="C")
    b, c = run([A, B, C], a)
    ref = np.abs(a) ** 1.5 + np.minimum(a, 0.25) - np.maximum(a, -0.5)
    np.testing.assert_allclose(b, ref, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(c, (np.abs(a) > 1).astype(np.int32))


# -- laziness, chunking, symbolic shapes ------------------------------------------

def test_short_circuit_and_guards_load(rng):
    a = rand(rng, 6)
    A = te.placeholder((6,), name="A")
    B = te.compute((6,), lambda i: te.if_then_else(te.all(i > 0, A[i - 1] > 0), A[i], 0.0), name="B")
    (out,) = run([A, B], a)
    prev = np.concatenate([[-1.0], a[:-1]])
    np.testing.assert_array_equal(out, np.where(prev > 0, a, 0))


def test_taken_out_of_range_load_raises():
    A = te.placeholder((4,), name="A")
    B = te.compute((4,), lambda i: te.if_then_else(i < 3, A[i + 1], A[i + 2]), name="B")
    with pytest.raises(InvalidWorkloadError, match=r"B: load of A out of range: index 0 is 5"):
        run([A, B], np.zeros(4, np.float32))


def test_integer_division_by_zero_on_taken_path_raises():
    A = te.placeholder((3,), "int32", name="A")
    ok = te.compute((3,), lambda i: te.if_then_else(A[i] != 0, te.floordiv(6, A[i]), -1), name="ok")
    (out,) = run([A, ok], np.array([2, 0, -4], np.int32))
    np.testing.assert_array_equal(out, [3, -1, -2])
    bad = te.compute((3,), lambda i: te.floormod(6, A[i]), name="bad")
    with pytest.raises(InvalidWorkloadError, match="division by zero"):
        run([A, bad], np.array([2, 0, -4], np.int32))


@pytest.mark.parametrize("limit", [1, 7, 300])
def test_small_chunks_agree(rng, limit):
    """Chunks over the outer spatial axis and, when a row is too big, over the reduce axis."""
    a, b = rand(rng, 9, 40), rand(rng, 40, 6)
    tensors = W.matmul(9, 6, 40)
    (out,) = run(tensors, a, b, max_chunk_elements=limit)
    np.testing.assert_allclose(out, a @ b, rtol=1e-5, atol=1e-5)
    (sm,) = run(W.softmax(9, 40), a, max_chunk_elements=limit)
    (ref,) = run(W.softmax(9, 40), a)
    np.testing.assert_allclose(sm, ref, rtol=1e-6)


@settings(max_examples=20, deadline=None)
@given(n=st.integers(1, 2), ci=st.integers(1, 3), h=st.integers(1, 7), w=st.integers(1, 7),
       co=st.integers(1, 3), k=st.integers(1, 3), stride=st.integers(1, 2), pad=st.integers(0, 2),
       limit=st.sampled_from([1, 5, 64, 2 ** 22]))
def test_conv2d_any_shape_and_chunking(n, ci, h, w, co, k, stride, pad, limit):
    if h + 2 * pad < k or w + 2 * pad < k:
        return
    rng = np.random.default_rng(h * 7 + w)
    x, wt, bias = rand(rng, n, ci, h, w), rand(rng, co, ci, k, k), rand(rng, co)
    tensors = W.conv2d_nchw(n, ci, h, w, co, k, k, stride=stride, pad=pad)
    (out,) = run(tensors, x, wt, bias, max_chunk_elements=limit)
    win, _ = conv2d_ref(x, wt, stride, pad)
    ref = np.maximum(np.einsum("ncyxhw,fchw->nfyx", win, wt) + bias[:, None, None], 0)
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)


def test_symbolic_matmul_bound_by_inputs(rng):
    n, m, l = te.var("n"), te.var("m"), te.var("l")
    dag = ComputeDAG(W.matmul(n, m, l))
    for shape in [(3, 4, 5), (7, 2, 1)]:
        a, b = rand(rng, shape[0], shape[2]), rand(rng, shape[2], shape[1])
        (out,) = evaluate(dag, [a, b])
        np.testing.assert_allclose(out, a @ b, rtol=1e-5, atol=1e-6)
    bound = resolve_bindings(dag, [a, b])
    assert {v.name: k for v, k in bound.items()} == {"n": 7, "m": 2, "l": 1}


def test_symbolic_expression_shape(rng):
    n = te.var("n")
    A = te.placeholder((n + 1,), name="A")
    B = te.compute((n,), lambda i: A[i + 1] - A[i], name="diff")
    a = rand(rng, 6)
    (out,) = evaluate(ComputeDAG([A, B]), [a], bindings={n: 5})
    np.testing.assert_allclose(out, np.diff(a), rtol=1e-6)
    with pytest.raises(InvalidWorkloadError, match=r"input A has shape \(6,\), expected \(5,\)"):
        evaluate(ComputeDAG([A, B]), [a], bindings={"n": 4})


def test_dict_inputs_and_evaluate_dict(rng):
    tensors = W.matmul_add(4, 3, 2)
    a, b, c = rand(rng, 4, 3), rand(rng, 3, 2), rand(rng, 4, 2)
    out = evaluate_dict(ComputeDAG(tensors), {"A": a, tensors[1]: b, "C": c})
    assert list(out) == ["out"]
    np.testing.assert_allclose(out["out"], a @ b + c, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("arrays, bindings, message", [
    (lambda a, b: [a.astype(np.float64), b], None, "input A has dtype float64, expected float32"),
    (lambda a, b: [a[None], b], None, "input A has 3 dimensions"),
    (lambda a, b: [a], None, "the DAG has 2 inputs"),
    (lambda a, b: [a, b[:2]], None, "conflicting values for l: 3 from dimension 1 of input A, 2"),
    (lambda a, b: [a, b], {"n": 5}, "conflicting values for n: 5 from bindings, 4"),
    (lambda a, b: {"A": a, "B": b, "Z": a}, None, r"arrays given for \['Z'\]"),
    (lambda a, b: {"A": a}, None, "no array given for input B"),
    (lambda a, b: [a, b], {"m": 2.0}, "binding of m is 2.0, not an integer"),
])
def test_bad_inputs_raise(rng, arrays, bindings, message):
    n, m, l = te.var("n"), te.var("m"), te.var("l")
    dag = ComputeDAG(W.matmul(n, m, l))
    a, b = rand(rng, 4, 3), rand(rng, 3, 2)
    with pytest.raises(InvalidWorkloadError, match=message):
        evaluate(dag, arrays(a, b), bindings)


def _generic(dag, inputs):
    """The reference evaluator without its product-sum (einsum) path."""
    saved = ref._DagEvaluator._product_sum
    ref._DagEvaluator._product_sum = lambda self, *a: None
    try:
        return ref.evaluate(dag, inputs)
    finally:
        ref._DagEvaluator._product_sum = saved


def test_product_sum_path_agrees_with_the_general_path():
    rng = np.random.default_rng(0)
    A = te.placeholder((3, 5, 7), name="A")
    B = te.placeholder((7, 4), name="B")
    k = te.reduce_axis((0, 7), name="k")
    # batch x matmul with B shared over the batch, and an output axis (r) that no load names
    C = te.compute((3, 5, 4, 2), lambda b, i, j, r: te.sum(A[b, i, k] * B[k, j], axis=k), name="C")
    dag = ComputeDAG([A, B, C])
    xs = [rng.standard_normal((3, 5, 7)).astype("float32"), rng.standard_normal((7, 4)).astype("float32")]
    fast, slow = evaluate(dag, xs), _generic(dag, xs)
    np.testing.assert_allclose(fast[-1], slow[-1], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(fast[-1][..., 1], np.einsum("bik,kj->bij", *xs), rtol=1e-5, atol=1e-6)
