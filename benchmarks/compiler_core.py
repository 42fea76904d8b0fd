"""Benchmark of the compiler core: hand-written schedules vs numpy, in one process.

W1: matmul+bias 1024^3 float32 with a packed-B layout stage, a 4x16 register
    tile (cache_write accumulators), vectorized inner loop, parallel outer loop.
W2: conv2d 1x64x56x56 3x3 pad 1 + bias + ReLU (tests.workloads.conv2d_nchw, as in
    compare.py): Ansor's CPU tiling by hand, a register tile of 4 output channels x one
    output row of 56 (vectorized: 32 + 16 + 8 lanes) under the whole reduction
    (rc, ry, rx), the bias+ReLU epilogue reading the tile, the padding at the root;
    timed beside PyTorch's conv2d (2 threads) when PyTorch is installed.
W4: RGB->YUV 1920x1080x3 (seed 003) with split/fuse/parallel/vectorize/unroll.

Usage:  python benchmarks/compiler_core.py [--workloads W1,W2,W4] [--out benchmarks/results/compiler_core.json]
Prints each kernel's time beside numpy's (and W2's beside PyTorch's) and writes the
figures to a JSON file.  Only ratios measured in the same run mean anything on a shared
2-core machine; the load average is recorded beside them.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np
from bench_util import best_of, median_time_s  # same folder

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import scheduler_core as sc  # noqa: E402
from scheduler_core import te  # noqa: E402
from tests.workloads import conv2d_nchw, conv2d_register_tile_schedule  # noqa: E402  (the test suite's DAG library)

try:
    import torch
    import torch.nn.functional as F
except ImportError:  # PyTorch is an optional baseline
    torch = None


def matmul_bias_packed(n: int, bn: int):
    """matmul+bias whose B is repacked into [n/bn, n, bn] panels by a layout stage."""
    A = te.placeholder((n, n), name="A")
    B = te.placeholder((n, n), name="B")
    C = te.placeholder((n, n), name="C")
    packed = te.compute((n // bn, n, bn), lambda jo, k, ji: B[k, jo * bn + ji], name="packedB")
    k = te.reduce_axis((0, n), name="k")
    mm = te.compute((n, n), lambda i, j: te.sum(A[i, k] * packed[j // bn, k, j % bn], axis=k),
                    name="matmul")
    out = te.compute((n, n), lambda i, j: mm[i, j] + C[i, j], name="out")
    return [A, B, C, out], packed, mm


def schedule_w1(n: int = 1024, ti: int = 4, bn: int = 16, rows: int = 64, kc: int = 256):
    """Register tile ti x bn, panel of ``rows`` rows per parallel task, k blocked by ``kc``."""
    args, packed, mm = matmul_bias_packed(n, bn)
    out = args[-1]
    s = te.create_schedule(out.op)
    # Layout stage: parallel over panels, vectorized copy.
    jo, kk, ji = s[packed].op.axis
    s[packed].parallel(jo)
    s[packed].vectorize(ji)
    # Output tile: (rows x bn) per inner step; the parallel loop runs over row blocks.
    i, j = s[out].op.axis
    io, ii = s[out].split(i, factor=rows)
    jo2, ji2 = s[out].split(j, factor=bn)
    s[out].reorder(io, jo2, ii, ji2)
    iio, iii = s[out].split(ii, factor=ti)
    s[out].parallel(io)
    s[out].vectorize(ji2)
    s[mm].compute_at(s[out], iio)
    mi, mj = s[mm].op.axis
    (mk,) = s[mm].op.reduce_axis
    s[mm].reorder(mk, mi, mj)
    s[mm].unroll(mi)
    s[mm].vectorize(mj)
    del kc, iii
    return s, args


def schedule_w2(fi: int = 4, xi: int = 56):
    """conv2d + bias + ReLU (1x64x56x56, 64 filters 3x3): output tiles of ``fi`` channels x
    ``xi`` columns of one row, one parallel iteration per (channel block, row); the conv2d
    tile is computed at the tile's loop with the reduction outside its (unrolled channels,
    vectorized columns) register tile; the padding stage is computed at the root, parallel
    over channels.  Returns ``(schedule, args)``."""
    args = conv2d_nchw(1, 64, 56, 56, 64, 3, 3)
    return conv2d_register_tile_schedule(args, fi, xi), args


def rgb_to_yuv(w: int, h: int):
    rgb = te.placeholder((w, h, 3), name="rgb")
    y = lambda i, j: rgb[i, j, 0] * 0.257 + rgb[i, j, 1] * 0.504 + rgb[i, j, 2] * 0.098  # noqa: E731
    u = lambda i, j: rgb[i, j, 0] * -0.148 + rgb[i, j, 1] * -0.291 + rgb[i, j, 2] * 0.439  # noqa: E731
    v = lambda i, j: rgb[i, j, 0] * 0.439 + rgb[i, j, 1] * -0.368 + rgb[i, j, 2] * -0.071  # noqa: E731
    yuv = te.compute((w, h, 3), lambda i, j, k: te.if_then_else(
        k == 0, y(i, j), te.if_then_else(k == 1, u(i, j), v(i, j))), name="yuv")
    return rgb, yuv


def schedule_w4(w: int = 1920, h: int = 1080, factor: int = 8):
    rgb, yuv = rgb_to_yuv(w, h)
    s = te.create_schedule(yuv.op)
    x, y, c = s[yuv].op.axis
    yo, yi = s[yuv].split(y, factor=factor)
    xy = s[yuv].fuse(x, yo)
    s[yuv].parallel(xy)
    s[yuv].vectorize(yi)
    s[yuv].unroll(c)
    return s, [rgb, yuv]


def bench_w1(n: int = 1024) -> dict:
    s, args = schedule_w1(n)
    t0 = time.perf_counter()
    f = sc.build(s, args, "llvm")
    build_s = time.perf_counter() - t0
    rng = np.random.default_rng(0)
    a, b, c = (rng.random((n, n), dtype=np.float32) for _ in range(3))
    out = np.empty((n, n), np.float32)
    f(a, b, c, out)
    ref = a @ b + c
    np.testing.assert_allclose(out, ref, rtol=1e-3, atol=1e-3)
    ours = float(np.median(f.time_evaluator(f.entry_name, sc.cpu(), number=3, repeat=7)(a, b, c, out).results))
    numpy_s = best_of(lambda: np.add(a @ b, c))
    flops = 2.0 * n ** 3 + n * n
    return {"workload": f"W1 matmul+bias {n}^3 float32", "ours_ms": ours * 1e3, "numpy_ms": numpy_s * 1e3,
            "ours_gflops": flops / ours / 1e9, "numpy_gflops": flops / numpy_s / 1e9,
            "speed_vs_numpy": numpy_s / ours, "build_s": build_s}


def bench_w2() -> dict:
    s, args = schedule_w2()
    f = sc.build(s, args, "llvm")
    rng = np.random.default_rng(0)
    data, kernel, bias = (rng.random(tuple(int(d) for d in t.shape), dtype=np.float32) for t in args[:-1])
    out = np.zeros(tuple(int(d) for d in args[-1].shape), np.float32)
    f(data, kernel, bias, out)
    p = np.pad(data, ((0, 0), (0, 0), (1, 1), (1, 1)))
    cols = np.lib.stride_tricks.sliding_window_view(p, (3, 3), axis=(2, 3))
    ref = np.einsum("nchwyx,fcyx->nfhw", cols, kernel, optimize=True) + bias[None, :, None, None]
    np.testing.assert_allclose(out, np.maximum(ref, 0), rtol=1e-3, atol=1e-3)
    flops = 2.0 * 64 * 64 * 9 * 56 * 56
    row = {"workload": "W2 conv2d 1x64x56x56 3x3 +bias+relu float32", "load_avg": os.getloadavg()}
    ours = median_time_s(lambda: f(data, kernel, bias, out))
    row.update({"ours_ms": ours * 1e3, "ours_gflops": flops / ours / 1e9})
    numpy_s = best_of(lambda: np.einsum("nchwyx,fcyx->nfhw", cols, kernel, optimize=True), number=1)
    row.update({"numpy_ms": numpy_s * 1e3, "numpy_gflops": flops / numpy_s / 1e9, "speed_vs_numpy": numpy_s / ours})
    if torch is not None:
        torch.set_num_threads(2)
        tin = [torch.from_numpy(a) for a in (data, kernel, bias)]
        with torch.no_grad():
            torch_s = median_time_s(lambda: F.relu(F.conv2d(tin[0], tin[1], tin[2], padding=1)))
        row.update({"torch_ms": torch_s * 1e3, "speed_vs_torch": torch_s / ours})
    return row


def bench_w4(w: int = 1920, h: int = 1080) -> dict:
    s, args = schedule_w4(w, h)
    f = sc.build(s, args, "llvm")
    rng = np.random.default_rng(0)
    a = rng.random((w, h, 3), dtype=np.float32)
    m = np.array([[0.257, -0.148, 0.439], [0.504, -0.291, -0.368], [0.098, 0.439, -0.071]], np.float32)
    out = np.empty_like(a)
    f(a, out)
    np.testing.assert_allclose(out, a @ m, rtol=1e-4, atol=1e-5)
    ours = float(np.median(f.time_evaluator(f.entry_name, sc.cpu(), number=10, repeat=7)(a, out).results))
    numpy_s = best_of(lambda: a @ m, number=5)
    return {"workload": f"W4 RGB->YUV {w}x{h}x3 float32", "ours_ms": ours * 1e3, "numpy_ms": numpy_s * 1e3,
            "speed_vs_numpy": numpy_s / ours}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="benchmarks/results/compiler_core.json")
    ap.add_argument("--n", type=int, default=1024)
    ap.add_argument("--workloads", default="W1,W2,W4")
    opts = ap.parse_args()
    benches = {"W1": lambda: bench_w1(opts.n), "W2": bench_w2, "W4": bench_w4}
    rows = [benches[w]() for w in opts.workloads.split(",")]
    for r in rows:
        extra = f"  ({r['ours_gflops']:.1f} vs {r['numpy_gflops']:.1f} GFLOP/s)" if "ours_gflops" in r else ""
        if "torch_ms" in r:
            extra += f"; torch {r['torch_ms']:.3f} ms, speed vs torch {r['speed_vs_torch']:.2f}x"
        print(f"{r['workload']}: ours {r['ours_ms']:.3f} ms, numpy {r['numpy_ms']:.3f} ms, "
              f"speed vs numpy {r['speed_vs_numpy']:.2f}x{extra}")
    Path(opts.out).parent.mkdir(parents=True, exist_ok=True)
    meta = {"machine": platform.processor() or platform.machine(), "cores": os.cpu_count(),
            "numpy": np.__version__, "when": time.strftime("%Y-%m-%d %H:%M:%S")}
    Path(opts.out).write_text(json.dumps({"meta": meta, "results": rows}, indent=2))
    print(f"wrote {opts.out}")


if __name__ == "__main__":
    main()
