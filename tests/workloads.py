"""Workload constructors shared by the tests: each takes sizes, returns the tensor list.

Sizes may be ints or ``te.var`` symbols.  The returned list is the workload's
argument list (inputs, then outputs), ready for ``ComputeDAG(tensors)``.
Workloads follow the seeds (000 matmul+bias, 001 scans, 003 RGB->YUV) and
TOPI's definitions (conv2d NCHW with a padding stage, softmax, layer norm, Winograd
conv2d NHWC with its numpy helpers).
"""

from __future__ import annotations

import numpy as np

from scheduler_core import te


def matmul(n, m, l, dtype="float32"):
    """``C[i, j] = sum_k A[i, k] * B[k, j]``; A (n, l), B (l, m), C (n, m)."""
    A = te.placeholder((n, l), dtype, name="A")
    B = te.placeholder((l, m), dtype, name="B")
    k = te.reduce_axis((0, l), name="k")
    C = te.compute((n, m), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="matmul")
    return [A, B, C]


def matmul_add(n, l, m, dtype="float32"):
    """Seed 000: ``out = A @ B + C``; A (n, l), B (l, m), C (n, m)."""
    A = te.placeholder((n, l), dtype, name="A")
    B = te.placeholder((l, m), dtype, name="B")
    C = te.placeholder((n, m), dtype, name="C")
    k = te.reduce_axis((0, l), name="k")
    mm = te.compute((n, m), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="matmul",
                    attrs={"layout_free_placeholders": [B]})
    out = te.compute((n, m), lambda i, j: mm[i, j] + C[i, j], name="out")
    return [A, B, C, out]


def matmul_bias_relu(n, m, l, dtype="float32"):
    """``out = relu(A @ B + bias)``; A (n, l), B (l, m), bias (m,), out (n, m)."""
    A, B, mm = matmul(n, m, l, dtype)
    bias = te.placeholder((m,), dtype, name="bias")
    out = te.compute((n, m), lambda i, j: te.max(mm[i, j] + bias[j], te.const(0, dtype)),
                     name="relu")
    return [A, B, bias, out]


def conv2d_nchw(n, ci, h, w, co, kh, kw, stride=1, pad=1, dtype="float32"):
    """conv2d NCHW + bias + ReLU, padding as a separate if_then_else stage (TOPI).

    data (n, ci, h, w), kernel (co, ci, kh, kw), bias (co,),
    out (n, co, (h + 2*pad - kh)//stride + 1, (w + 2*pad - kw)//stride + 1).
    """
    data = te.placeholder((n, ci, h, w), dtype, name="data")
    kernel = te.placeholder((co, ci, kh, kw), dtype, name="kernel")
    bias = te.placeholder((co,), dtype, name="bias")
    ph, pw = h + 2 * pad, w + 2 * pad
    padded = te.compute(
        (n, ci, ph, pw),
        lambda b, c, y, x: te.if_then_else(
            te.all(y >= pad, y < h + pad, x >= pad, x < w + pad),
            data[b, c, y - pad, x - pad], te.const(0, dtype)),
        name="pad")
    oh, ow = (ph - kh) // stride + 1, (pw - kw) // stride + 1
    rc = te.reduce_axis((0, ci), name="rc")
    ry = te.reduce_axis((0, kh), name="ry")
    rx = te.reduce_axis((0, kw), name="rx")
    conv = te.compute(
        (n, co, oh, ow),
        lambda b, f, y, x: te.sum(
            padded[b, rc, y * stride + ry, x * stride + rx] * kernel[f, rc, ry, rx],
            axis=[rc, ry, rx]),
        name="conv2d")
    out = te.compute((n, co, oh, ow),
                     lambda b, f, y, x: te.max(conv[b, f, y, x] + bias[f], te.const(0, dtype)),
                     name="bias_relu")
    return [data, kernel, bias, out]


def softmax(n, m, dtype="float32"):
    """Row softmax of A (n, m): max reduce, exp, sum reduce, divide."""
    A = te.placeholder((n, m), dtype, name="A")
    k1 = te.reduce_axis((0, m), name="k1")
    mx = te.compute((n,), lambda i: te.max(A[i, k1], axis=k1), name="row_max")
    e = te.compute((n, m), lambda i, j: te.exp(A[i, j] - mx[i]), name="exp")
    k2 = te.reduce_axis((0, m), name="k2")
    s = te.compute((n,), lambda i: te.sum(e[i, k2], axis=k2), name="row_sum")
    out = te.compute((n, m), lambda i, j: e[i, j] / s[i], name="softmax")
    return [A, out]


def layer_norm(n, m, eps=1e-5, dtype="float32"):
    """Layer norm over the last axis of A (n, m) with gamma, beta (m,)."""
    A = te.placeholder((n, m), dtype, name="A")
    gamma = te.placeholder((m,), dtype, name="gamma")
    beta = te.placeholder((m,), dtype, name="beta")
    mf = te.const(m).astype(dtype)  # the row length as a float (m may be symbolic)
    k1 = te.reduce_axis((0, m), name="k1")
    total = te.compute((n,), lambda i: te.sum(A[i, k1], axis=k1), name="total")
    mean = te.compute((n,), lambda i: total[i] / mf, name="mean")
    k2 = te.reduce_axis((0, m), name="k2")
    sq = te.compute((n,), lambda i: te.sum((A[i, k2] - mean[i]) * (A[i, k2] - mean[i]), axis=k2),
                    name="sqsum")
    out = te.compute(
        (n, m),
        lambda i, j: (A[i, j] - mean[i]) * te.rsqrt(sq[i] / mf + eps) * gamma[j] + beta[j],
        name="layer_norm")
    return [A, gamma, beta, out]


def batch_matmul(b, n, m, l, dtype="float32"):
    """``C[p, i, j] = sum_k A[p, i, k] * B[p, k, j]``; A (b, n, l), B (b, l, m)."""
    A = te.placeholder((b, n, l), dtype, name="A")
    B = te.placeholder((b, l, m), dtype, name="B")
    k = te.reduce_axis((0, l), name="k")
    C = te.compute((b, n, m), lambda p, i, j: te.sum(A[p, i, k] * B[p, k, j], axis=k),
                   name="batch_matmul")
    return [A, B, C]


def depthwise_conv2d(n, c, h, w, kh, kw, stride=1, pad=1, dtype="float32"):
    """Depthwise conv2d NCHW: data (n, c, h, w), kernel (c, kh, kw), zero padding inline."""
    data = te.placeholder((n, c, h, w), dtype, name="data")
    kernel = te.placeholder((c, kh, kw), dtype, name="kernel")
    oh, ow = (h + 2 * pad - kh) // stride + 1, (w + 2 * pad - kw) // stride + 1
    ry = te.reduce_axis((0, kh), name="ry")
    rx = te.reduce_axis((0, kw), name="rx")

    def body(b, ch, y, x):
        iy, ix = y * stride + ry - pad, x * stride + rx - pad
        inside = te.all(iy >= 0, iy < h, ix >= 0, ix < w)
        return te.sum(te.if_then_else(inside, data[b, ch, iy, ix], te.const(0, dtype))
                      * kernel[ch, ry, rx], axis=[ry, rx])

    out = te.compute((n, c, oh, ow), body, name="depthwise_conv2d")
    return [data, kernel, out]


def transpose(n, m, dtype="float32"):
    """``B[j, i] = A[i, j]``; A (n, m), B (m, n)."""
    A = te.placeholder((n, m), dtype, name="A")
    B = te.compute((m, n), lambda j, i: A[i, j], name="transpose")
    return [A, B]


def rgb_to_yuv(w, h, c=3):
    """Seed 003: RGB (w, h, 3) float32 -> YUV (w, h, 3) through nested if_then_else."""
    rgb = te.placeholder((w, h, c), name="rgb")

    def y(i, j):
        return rgb[i, j, 0] * 0.257 + rgb[i, j, 1] * 0.504 + rgb[i, j, 2] * 0.098

    def u(i, j):
        return rgb[i, j, 0] * -0.148 + rgb[i, j, 1] * -0.291 + rgb[i, j, 2] * 0.439

    def v(i, j):
        return rgb[i, j, 0] * 0.439 + rgb[i, j, 1] * -0.368 + rgb[i, j, 2] * -0.071

    yuv = te.compute((w, h, c), lambda i, j, k: te.if_then_else(
        k == 0, y(i, j), te.if_then_else(k == 1, u(i, j), v(i, j))), name="yuv")
    return [rgb, yuv]


def cumsum_scan(m, n):
    """Seed 001: cumulative sum of X (m, n) over axis 0 as a scan."""
    X = te.placeholder((m, n), name="X")
    s_state = te.placeholder((m, n), name="s_state")
    s_init = te.compute((1, n), lambda _, i: X[0, i], name="s_init")
    s_update = te.compute((m, n), lambda t, i: s_state[t - 1, i] + X[t, i], name="s_update")
    s_scan = te.scan(s_init, s_update, s_state, inputs=[X], name="scan")
    return [X, s_scan]


def two_stage_scan(m, n):
    """Seed 001: ``s[t] = 2 * s[t-1] + X[t]`` through an intermediate stage s1."""
    X = te.placeholder((m, n), name="X")
    s_state = te.placeholder((m, n), name="s_state")
    s_init = te.compute((1, n), lambda _, i: X[0, i], name="s_init")
    s1 = te.compute((m, n), lambda t, i: s_state[t - 1, i] * 2, name="s1")
    s2 = te.compute((m, n), lambda t, i: s1[t, i] + X[t, i], name="s2")
    s_scan = te.scan(s_init, s2, s_state, inputs=[X], name="scan")
    return [X, s_scan]


def two_state_scan(m, n, l):
    """Seed 001: states s1 (m, n) = cumsum of X and s2 (m, l) accumulating s1[t-1, 0]."""
    X = te.placeholder((m, n), name="X")
    s_state1 = te.placeholder((m, n), name="s_state1")
    s_state2 = te.placeholder((m, l), name="s_state2")
    s_init1 = te.compute((1, n), lambda _, i: X[0, i], name="s_init1")
    s_init2 = te.compute((1, l), lambda _, i: 0.0, name="s_init2")
    s_update1 = te.compute((m, n), lambda t, i: s_state1[t - 1, i] + X[t, i], name="s_update1")
    s_update2 = te.compute((m, l), lambda t, i: s_state2[t - 1, i] + s_state1[t - 1, 0],
                           name="s_update2")
    s_scan1, s_scan2 = te.scan([s_init1, s_init2], [s_update1, s_update2],
                               [s_state1, s_state2], inputs=[X], name="scan")
    return [X, s_scan1, s_scan2]


# Small instances of the test set of DAGs, shared by the property tests
# (tests/scheduler_core/test_random_schedules.py) and the sketch sampling tests.
SMALL_DAGS = {
    "matmul": lambda: matmul(17, 24, 9),
    "matmul_bias_relu": lambda: matmul_bias_relu(12, 10, 7),
    "conv2d_nchw": lambda: conv2d_nchw(1, 3, 10, 10, 4, 3, 3, pad=1),
    "softmax": lambda: softmax(8, 33),
    "layer_norm": lambda: layer_norm(6, 20),
    "batch_matmul": lambda: batch_matmul(2, 5, 7, 6),
    "depthwise_conv2d": lambda: depthwise_conv2d(1, 3, 9, 9, 3, 3, pad=1),
    "transpose": lambda: transpose(13, 7),
    "rgb_to_yuv": lambda: rgb_to_yuv(11, 6),
    "cumsum_scan": lambda: cumsum_scan(9, 10),
}


# -- Winograd convolution (appended; TOPI's conv2d_winograd_nhwc) ---------------------
WINOGRAD_POINTS = (0.0, 1.0, -1.0, 2.0, -2.0, 0.5, -0.5, 3.0, -3.0)


def winograd_transform_matrices(m, r, dtype="float32"):
    """The Winograd F(m x m, r x r) matrices ``(A, B, G)`` as numpy arrays, TOPI's
    ``winograd_transform_matrices`` layout: A (alpha, m), B (alpha, alpha), G (alpha, r)
    with ``alpha = m + r - 1``, so that for a tile d (alpha, alpha) and a kernel g (r, r)
    ``A.T @ ((G @ g @ G.T) * (B.T @ d @ B)) @ A`` is their (m, m) correlation.

    Toom-Cook with the points 0, 1, -1, 2, -2, 1/2, ... and infinity (Lavin & Gray,
    "Fast Algorithms for Convolutional Neural Networks", 2016): A evaluates at the
    points, G evaluates the kernel scaled by the Lagrange denominators, B interpolates.
    Raises ValueError when ``alpha - 1`` exceeds the points listed (``m + r > 10``).
    """
    alpha = m + r - 1
    if m < 1 or r < 1 or alpha - 1 > len(WINOGRAD_POINTS):
        raise ValueError(f"no Winograd matrices for F({m}, {r})")
    pts = WINOGRAD_POINTS[:alpha - 1]
    A = np.zeros((alpha, m))
    B = np.zeros((alpha, alpha))
    G = np.zeros((alpha, r))
    for j, p in enumerate(pts):
        others = [q for q in pts if q != p]
        A[j] = [p ** i for i in range(m)]
        G[j] = [p ** k / np.prod([p - q for q in others]) for k in range(r)]
        coeffs = np.poly(others)[::-1] if others else np.ones(1)  # prod (x - q), low first
        B[:len(coeffs), j] = coeffs
    A[alpha - 1, m - 1] = 1.0
    G[alpha - 1, r - 1] = 1.0
    B[:, alpha - 1] = np.poly(pts)[::-1]
    return A.astype(dtype), B.astype(dtype), G.astype(dtype)


def winograd_kernel_pack(weight, tile_size=2):
    """numpy: a conv2d kernel HWIO (r, r, ci, co) in the Winograd domain,
    ``(alpha, alpha, co, ci)`` = G g G^T per channel pair (TOPI's pre-computed layout)."""
    r = weight.shape[0]
    _, _, G = winograd_transform_matrices(tile_size, r, "float64")
    packed = np.einsum("ak,klio,bl->aboi", G, weight.astype("float64"), G)
    return np.ascontiguousarray(packed.astype(weight.dtype))


def conv2d_nhwc_reference(data, weight, pad=1):
    """numpy direct conv2d NHWC (stride 1): data (n, h, w, ci), weight HWIO (r, r, ci, co)."""
    n, h, w, _ = data.shape
    r = weight.shape[0]
    padded = np.pad(data.astype("float64"), ((0, 0), (pad, pad), (pad, pad), (0, 0)))
    oh, ow = h + 2 * pad - r + 1, w + 2 * pad - r + 1
    out = np.zeros((n, oh, ow, weight.shape[3]))
    for ky in range(r):
        for kx in range(r):
            out += np.einsum("nyxi,io->nyxo", padded[:, ky:ky + oh, kx:kx + ow, :],
                             weight[ky, kx].astype("float64"))
    return out.astype(data.dtype)


def conv2d_winograd_nhwc(n, h, w, ci, co, kernel_size=3, pad=1, tile_size=2,
                         pre_computed=True, dtype="float32"):
    """conv2d NHWC, stride 1, by Winograd F(m x m, 3 x 3), as TOPI's
    ``_conv2d_winograd_nhwc_impl`` (and TVM's ``conv2d_winograd_nhwc_auto_scheduler_test``):

        data_pad -> input_tile (alpha, alpha, P, ci) -> data_pack = B^T d B (reads B)
        bgemm (alpha, alpha, P, co) = sum_ci data_pack * kernel_pack
        inverse (m, m, P, co) = A^T M A (reads A) -> conv2d_winograd (n, oh, ow, co)

    m = ``tile_size``, alpha = m + kernel_size - 1, P = n * ceil(oh / m) * ceil(ow / m);
    data_pack and inverse carry ``auto_scheduler_simplify_const_tensor_indices`` (their
    constant-matrix axes), A and B are ``te.const_matrix`` stages.  With ``pre_computed``
    the kernel input is ``kernel_pack`` (alpha, alpha, co, ci), already in the Winograd
    domain (see :func:`winograd_kernel_pack`); otherwise it is ``weight`` HWIO
    (k, k, ci, co) and a ``kernel_pack`` stage computes G g G^T (reads G).  The bottom and
    right padding grow so every tile reads inside ``data_pad``.
    Returns ``[data, kernel, out]``, out (n, oh, ow, co) with oh = h + 2*pad - k + 1.
    """
    r, m = kernel_size, tile_size
    alpha = m + r - 1
    mat_a, mat_b, mat_g = winograd_transform_matrices(m, r, dtype)
    oh, ow = h + 2 * pad - r + 1, w + 2 * pad - r + 1
    nh, nw = (oh + m - 1) // m, (ow + m - 1) // m
    P = n * nh * nw
    ph = max(h + 2 * pad, (nh - 1) * m + alpha)
    pw = max(w + 2 * pad, (nw - 1) * m + alpha)
    data = te.placeholder((n, h, w, ci), dtype, name="data")
    data_pad = te.compute(
        (n, ph, pw, ci),
        lambda b, y, x, c: te.if_then_else(
            te.all(y >= pad, y < h + pad, x >= pad, x < w + pad),
            data[b, y - pad, x - pad, c], te.const(0, dtype)),
        name="data_pad")
    B = te.const_matrix(mat_b, name="B")
    if pre_computed:
        kernel = te.placeholder((alpha, alpha, co, ci), dtype, name="kernel_pack")
        kernel_pack = kernel
    else:
        kernel = te.placeholder((r, r, ci, co), dtype, name="weight")
        G = te.const_matrix(mat_g, name="G")
        r_kh = te.reduce_axis((0, r), name="r_kh")
        r_kw = te.reduce_axis((0, r), name="r_kw")
        kernel_pack = te.compute(
            (alpha, alpha, co, ci),
            lambda eps, nu, co, ci: te.sum(
                kernel[r_kh, r_kw, ci, co] * G[eps, r_kh] * G[nu, r_kw], axis=[r_kh, r_kw]),
            name="kernel_pack")
    input_tile = te.compute(
        (alpha, alpha, P, ci),
        lambda eps, nu, p, ci: data_pad[te.floordiv(p, nh * nw),
                                        te.floormod(te.floordiv(p, nw), nh) * m + eps,
                                        te.floormod(p, nw) * m + nu, ci],
        name="input_tile")
    r_a = te.reduce_axis((0, alpha), name="r_a")
    r_b = te.reduce_axis((0, alpha), name="r_b")
    data_pack = te.compute(
        (alpha, alpha, P, ci),
        lambda eps, nu, p, ci: te.sum(input_tile[r_a, r_b, p, ci] * B[r_a, eps] * B[r_b, nu],
                                      axis=[r_a, r_b]),
        name="data_pack",
        attrs={"auto_scheduler_simplify_const_tensor_indices": ["eps", "nu", "r_a", "r_b"]})
    rc = te.reduce_axis((0, ci), name="ci")
    bgemm = te.compute(
        (alpha, alpha, P, co),
        lambda eps, nu, p, co: te.sum(data_pack[eps, nu, p, rc] * kernel_pack[eps, nu, co, rc],
                                      axis=rc),
        name="bgemm")
    A = te.const_matrix(mat_a, name="A")
    r_a2 = te.reduce_axis((0, alpha), name="r_a")
    r_b2 = te.reduce_axis((0, alpha), name="r_b")
    inverse = te.compute(
        (m, m, P, co),
        lambda vh, vw, p, co: te.sum(bgemm[r_a2, r_b2, p, co] * A[r_a2, vh] * A[r_b2, vw],
                                     axis=[r_a2, r_b2]),
        name="inverse",
        attrs={"auto_scheduler_simplify_const_tensor_indices": ["vh", "vw", "r_a", "r_b"]})
    out = te.compute(
        (n, oh, ow, co),
        lambda b, y, x, co: inverse[te.floormod(y, m), te.floormod(x, m),
                                    b * nh * nw + te.floordiv(y, m) * nw + te.floordiv(x, m), co],
        name="conv2d_winograd")
    return [data, kernel, out]


def conv2d_register_tile_schedule(args, fi: int, xi: int):
    """A te schedule of a conv2d + bias + ReLU DAG (``conv2d_nchw``'s tensors): output tiles of
    ``fi`` channels x ``xi`` columns of one row, one parallel iteration per (batch, channel
    block, row); the conv2d tile is computed at the tile's loop with the reduction outside its
    register tile (channels unrolled, columns vectorized); the padding stage at the root,
    parallel over channels.  Shared by the conv codegen tests and benchmarks/compiler_core.py."""
    out = args[-1]
    conv = out.op.input_tensors()[0]
    pad = conv.op.input_tensors()[0]
    s = te.create_schedule(out.op)
    n, f, y, x = s[out].op.axis
    fo, fii = s[out].split(f, factor=fi)
    xo, xii = s[out].split(x, factor=xi)
    s[out].reorder(n, fo, y, xo, fii, xii)
    s[out].parallel(s[out].fuse(n, fo, y))
    s[out].vectorize(xii)
    s[conv].compute_at(s[out], xo)
    cn, cf, cy, cx = s[conv].op.axis
    rc, ry, rx = s[conv].op.reduce_axis
    s[conv].reorder(cn, rc, ry, rx, cf, cy, cx)
    s[conv].unroll(cf)
    s[conv].vectorize(cx)
    s[pad].parallel(s[pad].op.axis[1])
    return s
