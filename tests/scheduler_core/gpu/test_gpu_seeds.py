"""The seeds' GPU programs with ``tgt = "cuda"``, as users run them (only imports changed).

Seed 004 (vector add bound to blockIdx/threadIdx, its CUDA source printed from
``fadd.imported_modules[0].get_source()``), seed 001 (a cumsum scan on cuda) and seed 003's
default GPU schedule of RGB->YUV (its AutoTVM template is ``scheduler_core.autotvm``'s).  Where a
CUDA device and pycuda are present the arrays live on ``tvm.context("cuda", 0)`` as in the
seeds; elsewhere (CI) the same module runs with CUDA's semantics on the CPU
(``fadd.emulate``), which is the only change to the seeds' code.
"""

from __future__ import annotations

import re

import numpy as np

import scheduler_core as tvm
from scheduler_core import te
from scheduler_core.driver.nvcc import nvcc_available

tgt_host = "llvm"
tgt = "cuda"
ON_GPU = tvm.cuda(0).exist
NO_NVCC = nvcc_available()


def _run(func, *host_arrays) -> list:
    """Call ``func`` as the seed does: on the GPU when there is one, else emulated on the CPU."""
    if ON_GPU:
        ctx = tvm.context(tgt, 0)
        dev = [tvm.nd.array(a, ctx) for a in host_arrays]
        func(*dev)
        return [d.asnumpy() for d in dev]
    arrays = [np.array(a) for a in host_arrays]
    func.emulate(*arrays)
    return arrays


def test_seed004_vector_add_on_cuda_prints_its_kernel_and_adds():
    n = te.var("n")
    A = te.placeholder((n,), name="A")
    B = te.placeholder((n,), name="B")
    C = te.compute(A.shape, lambda i: A[i] + B[i], name="C")
    s = te.create_schedule(C.op)
    bx, tx = s[C].split(C.op.axis[0], factor=64)
    if tgt == "cuda" or tgt == "rocm" or tgt.startswith("opencl"):
        s[C].bind(bx, te.thread_axis("blockIdx.x"))
        s[C].bind(tx, te.thread_axis("threadIdx.x"))
    fadd = tvm.build(s, [A, B, C], tgt, target_host=tgt_host, name="myadd")
    for size in (1024, 1000, 1):
        a = np.random.uniform(size=size).astype(A.dtype)
        b = np.random.uniform(size=size).astype(B.dtype)
        _, _, c = _run(fadd, a, b, np.zeros(size, dtype=C.dtype))
        tvm.testing.assert_allclose(c, a + b)
    dev_module = fadd.imported_modules[0]
    source = dev_module.get_source()
    assert re.search(r'extern "C" __global__ void .*myadd_kernel0\(', source)
    assert "blockIdx.x" in source and "threadIdx.x" in source and "< n" in source.replace(")", "")
    if NO_NVCC is None:
        assert b".entry myadd_kernel0" in dev_module.ptx()


def test_seed001_cumsum_scan_on_cuda():
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
    fscan = tvm.build(s, [X, s_scan], tgt, name="myscan")
    n, m = 1024, 10
    a_np = np.random.uniform(size=(m, n)).astype(s_scan.dtype)
    _, b = _run(fscan, a_np, np.zeros((m, n), dtype=s_scan.dtype))
    tvm.testing.assert_allclose(b, np.cumsum(a_np, axis=0))
    assert len(fscan.imported_modules[0].launches) == 2  # the init kernel, then the update per step


def test_seed003_rgb_to_yuv_default_gpu_schedule():
    """Seed 003's ``default_schedule`` with ``target = 'cuda'`` (a smaller image): the image's
    column axis split by 64 onto blockIdx.x/threadIdx.x, the row loop outside the kernel."""
    w, h, c = 24, 200, 3
    target = "cuda"
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
    if target == "opencl" or target == "cuda":
        bx, tx = s[yuv].split(yuv.op.axis[1], factor=64)
        s[yuv].bind(bx, te.thread_axis("blockIdx.x"))
        s[yuv].bind(tx, te.thread_axis("threadIdx.x"))
    func = tvm.build(s, [rgb, yuv], target=target, name="rgb2yuv")
    a_np = np.random.uniform(size=(w, h, c)).astype(np.float32)
    b_np = np.array([[0.257, -0.148, 0.439], [0.504, -0.291, -0.368], [0.098, 0.439, -0.071]]).astype(np.float32)
    c_np = a_np.dot(b_np)
    _, got = _run(func, a_np, np.zeros(c_np.shape, dtype=np.float32))
    # atol: a channel near zero is a cancellation of float32 terms summed in another order
    tvm.testing.assert_allclose(c_np, got, rtol=1e-3, atol=1e-6)
    source = func.imported_modules[0].get_source()
    assert "blockIdx.x" in source and "threadIdx.x" in source
    if NO_NVCC is None:
        assert b".entry rgb2yuv_kernel0" in func.imported_modules[0].ptx()
