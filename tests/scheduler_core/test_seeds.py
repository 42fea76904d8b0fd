"""The CPU parts of the seed tutorials, with only imports and target changed.

Seed 000: matmul+bias with the schedule its ``print_best`` printed.
Seed 001: scan (cumsum), multi-stage scan, multi-state scan; built for "llvm".
Seed 003: RGB->YUV, default schedule and the template's split/fuse/parallel/
          vectorize/unroll schedule with a fixed factor.
Seed 004: vector add with symbolic n, split, reorder, tile, vectorize.
"""

import numpy as np
import pytest

import scheduler_core as tvm  # the seeds say ``import tvm``
from scheduler_core import te

tgt = "llvm"


# --------------------------------------------------------------------- seed 000
def matmul_add(N, L, M, dtype):
    A = te.placeholder((N, L), name="A", dtype=dtype)
    B = te.placeholder((L, M), name="B", dtype=dtype)
    C = te.placeholder((N, M), name="C", dtype=dtype)
    k = te.reduce_axis((0, L), name="k")
    matmul = te.compute((N, M), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="matmul",
                        attrs={"layout_free_placeholders": [B]})
    out = te.compute((N, M), lambda i, j: matmul[i, j] + C[i, j], name="out")
    return [A, B, C, out]


def _seed000_best_text() -> str:
    """The schedule text printed by seed 000's print_best (kept in examples/)."""
    import importlib.util
    from pathlib import Path
    path = Path(__file__).resolve().parents[2] / "examples" / "matmul_schedule.py"
    spec = importlib.util.spec_from_file_location("matmul_schedule_example", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.SEED000_BEST


SEED000_BEST = _seed000_best_text()


def test_seed000_print_best_schedule_matches_numpy():
    N = L = M = 1024
    A, B, C, out = matmul_add(N, L, M, "float32")
    matmul = out.op.input_tensors()[0]
    s = te.create_schedule(out.op)
    exec(SEED000_BEST, {"s": s, "te": te, "matmul": matmul, "out": out})  # the seed's own text
    args = [A, B, C, out]
    text = str(tvm.lower(s, args, simple_mode=True))
    assert '"parallel"' in text and "ramp(" in text
    func = tvm.build(s, args, tgt)
    a_np = np.random.uniform(size=(N, L)).astype(np.float32)
    b_np = np.random.uniform(size=(L, M)).astype(np.float32)
    c_np = np.random.uniform(size=(N, M)).astype(np.float32)
    out_np = a_np.dot(b_np) + c_np
    dev = tvm.cpu()
    a_tvm = tvm.nd.array(a_np, device=dev)
    b_tvm = tvm.nd.array(b_np, device=dev)
    c_tvm = tvm.nd.array(c_np, device=dev)
    out_tvm = tvm.nd.empty(out_np.shape, device=dev)
    func(a_tvm, b_tvm, c_tvm, out_tvm)
    np.testing.assert_allclose(out_np, out_tvm.numpy(), rtol=1e-3)
    evaluator = func.time_evaluator(func.entry_name, dev, min_repeat_ms=50)
    assert np.median(evaluator(a_tvm, b_tvm, c_tvm, out_tvm).results) > 0


# --------------------------------------------------------------------- seed 001
def _run_scan(s, args, n=1024, m=10, extra_out=False):
    fscan = tvm.build(s, args, tgt, name="myscan")
    dev = tvm.cpu(0)
    a_np = np.random.uniform(size=(m, n)).astype(args[1].dtype)
    a = tvm.nd.array(a_np, dev)
    outs = [tvm.nd.array(np.zeros(t.shape_np if hasattr(t, "shape_np") else (m, n), dtype=args[1].dtype), dev)
            for t in args[1:]]
    fscan(a, *outs)
    return a_np, [o.numpy() for o in outs]


def test_seed001_cumsum_scan_with_thread_binding_built_for_llvm():
    m = te.var("m")
    n = te.var("n")
    X = te.placeholder((m, n), name="X")
    s_state = te.placeholder((m, n))
    s_init = te.compute((1, n), lambda _, i: X[0, i])
    s_update = te.compute((m, n), lambda t, i: s_state[t - 1, i] + X[t, i])
    s_scan = tvm.te.scan(s_init, s_update, s_state, inputs=[X])
    s = te.create_schedule(s_scan.op)
    num_thread = 256
    block_x = te.thread_axis("blockIdx.x")
    thread_x = te.thread_axis("threadIdx.x")
    xo, xi = s[s_init].split(s_init.op.axis[1], factor=num_thread)
    s[s_init].bind(xo, block_x)
    s[s_init].bind(xi, thread_x)
    xo, xi = s[s_update].split(s_update.op.axis[1], factor=num_thread)
    s[s_update].bind(xo, block_x)
    s[s_update].bind(xi, thread_x)
    text = str(tvm.lower(s, [X, s_scan], simple_mode=True))
    assert "blockIdx.x" in text and "likely" in text
    a_np, (b,) = _run_scan(s, [X, s_scan], n=1000)
    tvm.testing.assert_allclose(b, np.cumsum(a_np, axis=0), rtol=1e-5)


def test_seed001_multi_stage_scan():
    m = te.var("m")
    n = te.var("n")
    X = te.placeholder((m, n), name="X")
    s_state = te.placeholder((m, n))
    s_init = te.compute((1, n), lambda _, i: X[0, i])
    s_update_s1 = te.compute((m, n), lambda t, i: s_state[t - 1, i] * 2, name="s1")
    s_update_s2 = te.compute((m, n), lambda t, i: s_update_s1[t, i] + X[t, i], name="s2")
    s_scan = tvm.te.scan(s_init, s_update_s2, s_state, inputs=[X])
    s = te.create_schedule(s_scan.op)
    xo, xi = s[s_update_s2].split(s_update_s2.op.axis[1], factor=32)
    s[s_update_s1].compute_at(s[s_update_s2], xo)
    text = str(tvm.lower(s, [X, s_scan], simple_mode=True))
    assert "allocate(s1, float32, [32])" in text
    a_np, (b,) = _run_scan(s, [X, s_scan], n=1000)
    expect = np.zeros_like(a_np)
    expect[0] = a_np[0]
    for t in range(1, a_np.shape[0]):
        expect[t] = expect[t - 1] * 2 + a_np[t]
    tvm.testing.assert_allclose(b, expect, rtol=1e-5)


def test_seed001_multi_state_scan():
    m = te.var("m")
    n = te.var("n")
    l = te.var("l")  # noqa: E741 - the seed's name
    X = te.placeholder((m, n), name="X")
    s_state1 = te.placeholder((m, n))
    s_state2 = te.placeholder((m, l))
    s_init1 = te.compute((1, n), lambda _, i: X[0, i])
    s_init2 = te.compute((1, l), lambda _, i: 0.0)
    s_update1 = te.compute((m, n), lambda t, i: s_state1[t - 1, i] + X[t, i])
    s_update2 = te.compute((m, l), lambda t, i: s_state2[t - 1, i] + s_state1[t - 1, 0])
    s_scan1, s_scan2 = tvm.te.scan([s_init1, s_init2], [s_update1, s_update2], [s_state1, s_state2], inputs=[X])
    s = te.create_schedule(s_scan1.op)
    text = str(tvm.lower(s, [X, s_scan1, s_scan2], simple_mode=True))
    assert "scan.idx" in text
    func = tvm.build(s, [X, s_scan1, s_scan2], tgt)
    mm, nn, ll = 10, 64, 7
    x = np.random.uniform(size=(mm, nn)).astype("float32")
    o1 = tvm.nd.empty((mm, nn))
    o2 = tvm.nd.empty((mm, ll))
    func(tvm.nd.array(x), o1, o2)
    e1 = np.cumsum(x, axis=0)
    e2 = np.zeros((mm, ll), "float32")
    for t in range(1, mm):
        e2[t] = e2[t - 1] + e1[t - 1, 0]
    tvm.testing.assert_allclose(o1.numpy(), e1, rtol=1e-5)
    tvm.testing.assert_allclose(o2.numpy(), e2, rtol=1e-5)


# --------------------------------------------------------------------- seed 003
w, h, c = 1920, 1080, 3


def rgb_yuv_schedule(w, h, c=3):
    rgb = te.placeholder((w, h, c), name="rgb")

    def rgb2y(i, j, k):
        return rgb[i, j, 0] * 0.257 + rgb[i, j, 1] * 0.504 + rgb[i, j, 2] * 0.098

    def rgb2u(i, j, k):
        return rgb[i, j, 0] * -0.148 + rgb[i, j, 1] * -0.291 + rgb[i, j, 2] * 0.439

    def rgb2v(i, j, k):
        return rgb[i, j, 0] * 0.439 + rgb[i, j, 1] * -0.368 + rgb[i, j, 2] * -0.071

    rgb2yuv = lambda i, j, k: te.if_then_else(k == 0, rgb2y(i, j, k), te.if_then_else(k == 1, rgb2u(i, j, k), rgb2v(i, j, k)))  # noqa: E731,E501
    yuv = te.compute((w, h, c), rgb2yuv, name="yuv")
    s = te.create_schedule(yuv.op)
    return s, [rgb, yuv]


def bench_tvm_func(func, tmp_path, name="rgb2yuv"):
    a_np = np.random.uniform(size=(w, h, c)).astype(np.float32)
    b_np = np.array([[0.257, -0.148, 0.439], [0.504, -0.291, -0.368], [0.098, 0.439, -0.071]]).astype(np.float32)
    c_np = a_np.dot(b_np)
    ctx = tvm.context(tgt, 0)
    a_tvm = tvm.nd.array(a_np, ctx=ctx)
    c_tvm = tvm.nd.empty(c_np.shape, ctx=ctx)
    func(a_tvm, c_tvm)
    # The seed checks rtol=1e-3 only; outputs near zero (u, v cancel) also need an atol,
    # since numpy's dot sums in another order (differences seen: ~4e-8).
    tvm.testing.assert_allclose(c_np, c_tvm.asnumpy(), rtol=1e-3, atol=1e-6)
    evaluator = func.time_evaluator(func.entry_name, ctx, number=4)
    assert evaluator(a_tvm, c_tvm).mean > 0
    func.save(str(tmp_path / f"{name}.o"))
    assert (tmp_path / f"{name}.o").stat().st_size > 0


def test_seed003_default_schedule(tmp_path):
    s, (rgb, yuv) = rgb_yuv_schedule(w, h)
    func = tvm.build(s, [rgb, yuv], target=tgt, name="rgb2yuv")
    bench_tvm_func(func, tmp_path, "rgb2yuv_default")


@pytest.mark.parametrize("factor", [4, 12, 180])
def test_seed003_template_schedule_fixed_factor(tmp_path, factor):
    s, (rgb, yuv) = rgb_yuv_schedule(w, h, c)
    x, y = yuv.op.axis[0], yuv.op.axis[1]
    yo, yi = s[yuv].split(y, factor=factor)
    xy = s[yuv].fuse(x, yo)
    s[yuv].parallel(xy)
    s[yuv].vectorize(yi)
    s[yuv].unroll(yuv.op.axis[2])
    func = tvm.build(s, [rgb, yuv], target=tgt, name="rgb2yuv")
    bench_tvm_func(func, tmp_path)


# --------------------------------------------------------------------- seed 004
def test_seed004_vector_add_symbolic_n():
    n = te.var("n")
    A = te.placeholder((n,), name="A")
    B = te.placeholder((n,), name="B")
    C = te.compute(A.shape, lambda i: A[i] + B[i], name="C")
    s = te.create_schedule(C.op)
    bx, tx = s[C].split(C.op.axis[0], factor=64)
    s[C].bind(bx, te.thread_axis("blockIdx.x"))
    s[C].bind(tx, te.thread_axis("threadIdx.x"))
    fadd = tvm.build(s, [A, B, C], tgt, target_host="llvm", name="myadd")
    ctx = tvm.context(tgt, 0)
    for size in (1024, 1000, 1):
        a = tvm.nd.array(np.random.uniform(size=size).astype(A.dtype), ctx)
        b = tvm.nd.array(np.random.uniform(size=size).astype(B.dtype), ctx)
        c = tvm.nd.array(np.zeros(size, dtype=C.dtype), ctx)
        fadd(a, b, c)
        tvm.testing.assert_allclose(c.asnumpy(), a.asnumpy() + b.asnumpy())
    assert "myadd" in fadd.get_source()


def test_seed004_split_reduce_axis():
    n = 1024
    A = te.placeholder((n,), name="A")
    k = te.reduce_axis((0, n), name="k")
    B = te.compute((1,), lambda i: te.sum(A[k], axis=k), name="B")
    s = te.create_schedule(B.op)
    ko, ki = s[B].split(B.op.reduce_axis[0], factor=32)
    text = str(tvm.lower(s, [A, B], simple_mode=True))
    assert "k.0" in text and "k.1" in text
    f = tvm.build(s, [A, B], tgt)
    a = np.random.uniform(size=n).astype("float32")
    b = tvm.nd.empty((1,))
    f(tvm.nd.array(a), b)
    tvm.testing.assert_allclose(b.numpy(), [a.sum()], rtol=1e-4)


def _add2d(n=1024):
    A = te.placeholder((n, n), name="A")
    B = te.placeholder((n, n), name="B")
    C = te.compute((n, n), lambda i, j: A[i, j] + B[i, j], name="C")
    return A, B, C


def _check2d(s, A, B, C, n=1024):
    f = tvm.build(s, [A, B, C], tgt)
    a = np.random.uniform(size=(n, n)).astype("float32")
    b = np.random.uniform(size=(n, n)).astype("float32")
    c = tvm.nd.empty((n, n))
    f(tvm.nd.array(a), tvm.nd.array(b), c)
    tvm.testing.assert_allclose(c.numpy(), a + b)


def test_seed004_split_and_reorder():
    A, B, C = _add2d()
    s = te.create_schedule(C.op)
    xo, xi = s[C].split(s[C].op.axis[0], factor=32)
    yo, yi = s[C].split(s[C].op.axis[1], factor=32)
    s[C].reorder(xo, yo, yi, xi)
    _check2d(s, A, B, C)


def test_seed004_tile_matmul_and_vectorize():
    n = 256
    A = te.placeholder((n, n), name="A")
    B = te.placeholder((n, n), name="B")
    K = te.reduce_axis((0, n), name="K")
    C = te.compute((n, n), lambda i, j: te.sum(A[i, K] * B[K, j], axis=K), name="C")
    s = te.create_schedule(C.op)
    xo, yo, xi, yi = s[C].tile(C.op.axis[0], C.op.axis[1], 32, 32)
    text = str(tvm.lower(s, [A, B, C], simple_mode=True))
    assert "i.0" in text and "j.1" in text
    f = tvm.build(s, [A, B, C], tgt)
    a = np.random.uniform(size=(n, n)).astype("float32")
    b = np.random.uniform(size=(n, n)).astype("float32")
    c = tvm.nd.empty((n, n))
    f(tvm.nd.array(a), tvm.nd.array(b), c)
    tvm.testing.assert_allclose(c.numpy(), a @ b, rtol=1e-4)

    A2, B2, C2 = _add2d()
    s2 = te.create_schedule(C2.op)
    xo, yo, xi, yi = s2[C2].tile(C2.op.axis[0], C2.op.axis[1], 32, 32)
    s2[C2].vectorize(yi)
    assert "ramp(" in str(tvm.lower(s2, [A2, B2, C2], simple_mode=True))
    _check2d(s2, A2, B2, C2)
