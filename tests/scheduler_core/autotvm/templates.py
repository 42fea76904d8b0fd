"""Templates shared by the autotvm tests: seed 003's RGB->YUV (CPU and GPU branches) and a
small matmul with every kind of knob."""

from __future__ import annotations

import numpy as np

from scheduler_core import autotvm, te

YUV_MATRIX = np.array([[0.257, -0.148, 0.439], [0.504, -0.291, -0.368], [0.098, 0.439, -0.071]], np.float32)


def rgb_yuv_schedule(w, h, c=3):
    rgb = te.placeholder((w, h, c), name="rgb")

    def rgb2y(i, j, k):
        return rgb[i, j, 0] * 0.257 + rgb[i, j, 1] * 0.504 + rgb[i, j, 2] * 0.098

    def rgb2u(i, j, k):
        return rgb[i, j, 0] * -0.148 + rgb[i, j, 1] * -0.291 + rgb[i, j, 2] * 0.439

    def rgb2v(i, j, k):
        return rgb[i, j, 0] * 0.439 + rgb[i, j, 1] * -0.368 + rgb[i, j, 2] * -0.071

    def rgb2yuv(i, j, k):
        return te.if_then_else(k == 0, rgb2y(i, j, k), te.if_then_else(k == 1, rgb2u(i, j, k), rgb2v(i, j, k)))

    yuv = te.compute((w, h, c), rgb2yuv, name="yuv")
    s = te.create_schedule(yuv.op)
    return s, [rgb, yuv]


@autotvm.template("test/rgb_yuv_trans")
def rgb_yuv_trans(w, h, target="llvm"):
    """Seed 003's template; the seed reads a global ``target``, here it is an argument."""
    s, (rgb, yuv) = rgb_yuv_schedule(w, h, 3)
    x, y = yuv.op.axis[0], yuv.op.axis[1]
    cfg = autotvm.get_config()
    if target in ("opencl", "cuda"):
        xy = s[yuv].fuse(x, y)
        cfg.define_split("xy_split", cfg.axis(x.dom.extent.value * y.dom.extent.value), num_outputs=2)
        bx, tx = cfg["xy_split"].apply(s, yuv, xy)
        s[yuv].bind(bx, te.thread_axis("blockIdx.x"))
        s[yuv].bind(tx, te.thread_axis("threadIdx.x"))
        s[yuv].unroll(yuv.op.axis[2])
    else:
        cfg.define_split("tile_y", y, num_outputs=2)
        yo, yi = cfg["tile_y"].apply(s, yuv, y)
        xy = s[yuv].fuse(x, yo)
        s[yuv].parallel(xy)
        s[yuv].vectorize(yi)
        s[yuv].unroll(yuv.op.axis[2])
    return s, [rgb, yuv]


@autotvm.template("test/matmul_knobs")
def matmul_knobs(n, m, k):
    """C = A @ B with a 3-way split of i, a power-of-two split of j, a reorder of (ii, jo, r) and an
    annotation of the innermost ji."""
    A = te.placeholder((n, k), name="A")
    B = te.placeholder((k, m), name="B")
    r = te.reduce_axis((0, k), name="r")
    C = te.compute((n, m), lambda i, j: te.sum(A[i, r] * B[r, j], axis=r), name="C")
    s = te.create_schedule(C.op)
    i, j = C.op.axis
    cfg = autotvm.get_config()
    cfg.define_split("tile_i", i, num_outputs=3)
    cfg.define_split("tile_j", j, num_outputs=2, policy="power2")
    cfg.define_knob("parallel", [0, 1])
    io, im, ii = cfg["tile_i"].apply(s, C, i)
    jo, ji = cfg["tile_j"].apply(s, C, j)
    axes = [im, ii, jo, r, ji]
    cfg.define_reorder("order", axes, policy="interval_all", interval=(1, 4))
    cfg["order"].apply(s, C, axes)
    cfg.define_annotate("ann", [ji], policy="try_unroll_vec")
    cfg["ann"].apply(s, C, [ji])
    if cfg["parallel"].val:
        s[C].parallel(io)
    return s, [A, B, C]


@autotvm.template("test/add_knob")
def add_knob(n):
    """A vector add with a 3-value knob: a space that three trials exhaust."""
    A = te.placeholder((n,), name="A")
    B = te.placeholder((n,), name="B")
    C = te.compute((n,), lambda i: A[i] + B[i], name="C")
    s = te.create_schedule(C.op)
    cfg = autotvm.get_config()
    cfg.define_knob("factor", [4, 8, 16])
    _, inner = s[C].split(C.op.axis[0], factor=cfg["factor"].val)
    s[C].vectorize(inner)
    return s, [A, B, C]


@autotvm.template("test/knob_twice")
def knob_twice(n):
    A = te.placeholder((n,), name="A")
    C = te.compute((n,), lambda i: A[i] * 2.0, name="C")
    s = te.create_schedule(C.op)
    cfg = autotvm.get_config()
    cfg.define_knob("f", [1, 2])
    cfg.define_split("f", C.op.axis[0])
    return s, [A, C]
