"""Hand-written GPU schedules shared by the GPU tests (lowering, CUDA codegen, emulator).

Each function builds a fresh schedule and returns a :class:`GpuCase`: the schedule, its
argument tensors, numpy inputs and the numpy reference of its outputs.  Sizes are small by
default so that emulating a case on the CPU takes well under a second.

    from tests.scheduler_core.gpu.gpu_schedules import ALL_CASES, matmul_shared

    case = matmul_shared()
    func = case.kernel_form()                 # lower_state + lower_for_gpu("cuda")
    arrays = case.arrays()                    # one numpy array per arg (outputs zeroed)
    emulate(func, *arrays, *case.scalar_args) # or a CUDA module: same arrays
    case.check(arrays)                        # outputs against numpy

The cases (what each exercises in the kernel form):

==========================  ===============================================================
``vector_add``              seed 004: symbolic ``n``, grid ceil(n/64), block 64, tail guard
``scan_cumsum``             seed 001: scan on cuda, a host loop over time launching a kernel
``rgb_yuv``                 seed 003's GPU schedule: split axis 1 by 64, blockIdx/threadIdx
``rgb_yuv_fused``           seed 003's autotvm GPU template: fuse(x, y), split, unroll c
``matmul_shared``           tiled matmul: cache_read shared (A, B) at the reduction outer
                            loop, cooperative fetching on threadIdx.x, cache_write local
``matmul_shared_guarded``   as above, 2-D blocks (threadIdx.y/x), vthread, fetches with
                            fewer threads than the block (guards) and non-divisible tails
``transpose_shared``        a shared tile filled at block level by threadIdx.y/x loops and
                            read by sibling thread loops (barrier between them)
``two_kernels``             two root stages: two kernels and a global intermediate
``row_sum_unbound``         a reduction with no GPU binding: a one-thread kernel
==========================  ===============================================================
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

import scheduler_core as tvm
from scheduler_core import te
from scheduler_core.ir import tir as T
from scheduler_core.lowering.gpu import lower_for_gpu
from scheduler_core.lowering.lower import lower_state
from scheduler_core.schedule.schedule_api import Schedule


@dataclass
class GpuCase:
    """A GPU schedule with its data.

    name : str, the case (and PrimFunc) name
    sch : Schedule (``sch.state`` is the State)
    args : list of Tensor, the function's arguments in call order
    make_inputs : rng -> list of numpy arrays, one per arg (outputs zeroed)
    reference : list of arrays -> list of the expected output arrays (``outputs`` order)
    outputs : indices into ``args`` of the outputs
    scalar_args : values of the symbolic shape variables, in the PrimFunc's ``scalar_params``
        order (bound from the shapes anyway; given for explicit calls)
    rtol, atol : tolerances of :meth:`check`
    """

    name: str
    sch: Schedule
    args: list
    make_inputs: Callable[[np.random.Generator], list]
    reference: Callable[[list], list]
    outputs: tuple
    scalar_args: tuple = ()
    rtol: float = 1e-5
    atol: float = 1e-6
    notes: dict = field(default_factory=dict)

    @property
    def state(self):
        return self.sch.state

    def lower(self) -> T.PrimFunc:
        """The loop program of ``lower_state`` (GPU loops still as loops, no passes)."""
        return lower_state(self.state, self.args, self.name)

    def kernel_form(self, target: str = "cuda") -> T.PrimFunc:
        """``lower_for_gpu(lower(), target)``: the kernel form (docs/gpu_kernel_form.md)."""
        return lower_for_gpu(self.lower(), target)

    def arrays(self, seed: int = 0) -> list:
        """Fresh inputs: one numpy array per arg, outputs zeroed."""
        return self.make_inputs(np.random.default_rng(seed))

    def expected(self, arrays: list) -> list:
        return self.reference(arrays)

    def check(self, arrays: list) -> None:
        """Assert the output arrays of ``arrays`` (after a run) match the reference."""
        for k, want in zip(self.outputs, self.reference(arrays)):
            got = arrays[k].numpy() if hasattr(arrays[k], "numpy") else arrays[k]
            np.testing.assert_allclose(got, want, rtol=self.rtol, atol=self.atol,
                                       err_msg=f"{self.name}: output {self.args[k].name}")


def _uniform(rng, shape, dtype="float32"):
    return rng.uniform(-1.0, 1.0, size=shape).astype(dtype)


# --------------------------------------------------------------------- seed 004
def vector_add(n: int = 1000, factor: int = 64) -> GpuCase:
    """Seed 004: ``C = A + B`` with symbolic ``n``, split by ``factor``, bx/tx bound.

    Kernel: grid ``floordiv(n + 63, 64)``, block 64, ``likely(bx*64 + tx < n)`` guard.
    """
    nv = te.var("n")
    A = te.placeholder((nv,), name="A")
    B = te.placeholder((nv,), name="B")
    C = te.compute(A.shape, lambda i: A[i] + B[i], name="C")
    s = te.create_schedule(C.op)
    bx, tx = s[C].split(C.op.axis[0], factor=factor)
    s[C].bind(bx, te.thread_axis("blockIdx.x"))
    s[C].bind(tx, te.thread_axis("threadIdx.x"))

    def make(rng):
        return [_uniform(rng, n), _uniform(rng, n), np.zeros(n, "float32")]

    return GpuCase("myadd", s, [A, B, C], make, lambda a: [a[0] + a[1]], (2,), (n,))


# --------------------------------------------------------------------- seed 001
def scan_cumsum(m: int = 10, n: int = 1000, num_thread: int = 256) -> GpuCase:
    """Seed 001: cumulative sum over the rows of ``X`` (m, n symbolic) with ``te.scan``;
    the init and update stages split axis 1 by ``num_thread`` and bind bx/tx.

    Kernel form: kernel 0 (init), then a host loop over ``scan.idx`` launching kernel 1.
    """
    mv, nv = te.var("m"), te.var("n")
    X = te.placeholder((mv, nv), name="X")
    s_state = te.placeholder((mv, nv))
    s_init = te.compute((1, nv), lambda _, i: X[0, i])
    s_update = te.compute((mv, nv), lambda t, i: s_state[t - 1, i] + X[t, i])
    s_scan = tvm.te.scan(s_init, s_update, s_state, inputs=[X])
    s = te.create_schedule(s_scan.op)
    block_x = te.thread_axis("blockIdx.x")
    thread_x = te.thread_axis("threadIdx.x")
    for stage in (s_init, s_update):
        xo, xi = s[stage].split(stage.op.axis[1], factor=num_thread)
        s[stage].bind(xo, block_x)
        s[stage].bind(xi, thread_x)

    def make(rng):
        return [_uniform(rng, (m, n)), np.zeros((m, n), "float32")]

    return GpuCase("myscan", s, [X, s_scan], make, lambda a: [np.cumsum(a[0], axis=0)], (1,), (m, n),
                   rtol=1e-5, atol=1e-5)


# --------------------------------------------------------------------- seed 003
_YUV = np.array([[0.257, -0.148, 0.439], [0.504, -0.291, -0.368], [0.098, 0.439, -0.071]], dtype=np.float32)


def _rgb_yuv_compute(w: int, h: int, c: int = 3):
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
    return rgb, yuv


def _rgb_yuv_case(name, s, rgb, yuv, w, h, c) -> GpuCase:
    def make(rng):
        return [rng.uniform(size=(w, h, c)).astype("float32"), np.zeros((w, h, c), "float32")]

    return GpuCase(name, s, [rgb, yuv], make, lambda a: [a[0].dot(_YUV)], (1,), rtol=1e-3, atol=1e-6)


def rgb_yuv(w: int = 24, h: int = 100, factor: int = 64) -> GpuCase:
    """Seed 003's default GPU schedule: ``split(yuv.op.axis[1], factor=64)``, bind bx/tx.

    The split is of the *second* axis (``h``), so ``x`` (axis 0) and ``c`` stay serial loops
    around the kernel: a host loop over x launches one kernel per x.  With ``h`` not a
    multiple of ``factor`` the store is guarded.
    """
    rgb, yuv = _rgb_yuv_compute(w, h)
    s = te.create_schedule(yuv.op)
    bx, tx = s[yuv].split(yuv.op.axis[1], factor=factor)
    s[yuv].bind(bx, te.thread_axis("blockIdx.x"))
    s[yuv].bind(tx, te.thread_axis("threadIdx.x"))
    return _rgb_yuv_case("rgb2yuv", s, rgb, yuv, w, h, 3)


def rgb_yuv_fused(w: int = 24, h: int = 100, factor: int = 80) -> GpuCase:
    """Seed 003's autotvm GPU template with a fixed split: ``fuse(x, y)``, split by
    ``factor``, bind bx/tx, ``unroll(c)``: one kernel of ceil(w*h/factor) blocks."""
    rgb, yuv = _rgb_yuv_compute(w, h)
    s = te.create_schedule(yuv.op)
    x, y = yuv.op.axis[0], yuv.op.axis[1]
    xy = s[yuv].fuse(x, y)
    bx, tx = s[yuv].split(xy, factor=factor)
    s[yuv].bind(bx, te.thread_axis("blockIdx.x"))
    s[yuv].bind(tx, te.thread_axis("threadIdx.x"))
    s[yuv].unroll(yuv.op.axis[2])
    return _rgb_yuv_case("rgb2yuv_fused", s, rgb, yuv, w, h, 3)


# --------------------------------------------------------------------- matmul
def _matmul_compute(M: int, N: int, K: int):
    A = te.placeholder((M, K), name="A")
    B = te.placeholder((K, N), name="B")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return A, B, C


def _matmul_make(M, N, K):
    def make(rng):
        return [_uniform(rng, (M, K)), _uniform(rng, (K, N)), np.zeros((M, N), "float32")]
    return make


def matmul_shared(M: int = 64, N: int = 64, K: int = 64, tile: int = 16, step: int = 2,
                  kt: int = 8, fetch_threads: int = 64) -> GpuCase:
    """Tiled matmul ``C = A @ B`` with shared and local caches (TVM's classic GPU schedule).

    Each block computes a ``tile x tile`` tile of C (blockIdx.y, blockIdx.x); its
    ``(tile/step)^2`` threads (threadIdx.x, the fused thread rows and columns) each compute a
    ``step x step`` sub-tile in ``C.local`` (``cache_write(C, "local")`` at the thread loop).
    The reduction is split by ``kt``; at its outer loop ``k.0`` the A and B tiles
    (``tile x kt`` and ``kt x tile``) are fetched into shared memory cooperatively: each fetch
    fuses its axes, splits by ``fetch_threads`` and binds the inner loop to threadIdx.x.

    Defaults: grid (4, 4), block 64, shared 2 * 512 bytes; kernel form: barrier after the
    fetches and at the end of the ``k.0`` body.
    """
    A, B, C = _matmul_compute(M, N, K)
    s = te.create_schedule(C.op)
    AA = s.cache_read(A, "shared", [C])
    BB = s.cache_read(B, "shared", [C])
    CL = s.cache_write(C, "local")
    i, j = s[C].op.axis
    io, ii = s[C].split(i, factor=tile)
    jo, ji = s[C].split(j, factor=tile)
    ti, iii = s[C].split(ii, factor=step)
    tj, jjj = s[C].split(ji, factor=step)
    s[C].reorder(io, jo, ti, tj, iii, jjj)
    s[C].bind(io, te.thread_axis("blockIdx.y"))
    s[C].bind(jo, te.thread_axis("blockIdx.x"))
    t = s[C].fuse(ti, tj)
    s[C].bind(t, te.thread_axis("threadIdx.x"))
    s[CL].compute_at(s[C], t)
    ci, cj = s[CL].op.axis
    (kk,) = s[CL].op.reduce_axis
    ko, ki = s[CL].split(kk, factor=kt)
    s[CL].reorder(ko, ki, ci, cj)
    for S in (AA, BB):
        s[S].compute_at(s[CL], ko)
        fused = s[S].fuse(*s[S].op.axis)
        _, fi = s[S].split(fused, factor=fetch_threads)
        s[S].bind(fi, te.thread_axis("threadIdx.x"))
    return GpuCase("matmul", s, [A, B, C], _matmul_make(M, N, K), lambda a: [a[0] @ a[1]], (2,),
                   rtol=1e-4, atol=1e-4,
                   notes={"block": (tile // step) ** 2, "grid": (N // tile, M // tile),
                          "shared_bytes": 2 * tile * kt * 4})


def matmul_shared_guarded(M: int = 50, N: int = 40, K: int = 36) -> GpuCase:
    """A harder tiled matmul: non-divisible sizes, 2-D thread blocks, a vthread, and
    cooperative fetches that use fewer threads than the block.

    Each block (blockIdx.y, blockIdx.x) computes a 16 x 16 tile of C: a vthread of 2 over
    its rows, threads (threadIdx.y, threadIdx.x) = (4, 8), each a 2 x 2 sub-tile in
    ``C.local``.  K is split by 6.  The A/B fetches at ``k.0`` fuse their axes, split by 6
    on threadIdx.x (6 < 8: guarded by ``threadIdx.x < 6``) and by 4 on threadIdx.y.  The
    tiles past the edges of C are guarded by ``likely`` conditions.  Kernel form: grid
    (3, 4), block (8, 4), the vthread a serial loop inside the thread loops.
    """
    A, B, C = _matmul_compute(M, N, K)
    s = te.create_schedule(C.op)
    AA = s.cache_read(A, "shared", [C])
    BB = s.cache_read(B, "shared", [C])
    CL = s.cache_write(C, "local")
    i, j = s[C].op.axis
    io, ii = s[C].split(i, factor=16)
    jo, ji = s[C].split(j, factor=16)
    vi, ii2 = s[C].split(ii, nparts=2)
    ty, iii = s[C].split(ii2, factor=2)
    tx, jjj = s[C].split(ji, factor=2)
    s[C].reorder(io, jo, vi, ty, tx, iii, jjj)
    s[C].bind(io, te.thread_axis("blockIdx.y"))
    s[C].bind(jo, te.thread_axis("blockIdx.x"))
    s[C].bind(vi, te.thread_axis("vthread"))
    s[C].bind(ty, te.thread_axis("threadIdx.y"))
    s[C].bind(tx, te.thread_axis("threadIdx.x"))
    s[CL].compute_at(s[C], tx)
    ci, cj = s[CL].op.axis
    (kk,) = s[CL].op.reduce_axis
    ko, ki = s[CL].split(kk, factor=6)
    s[CL].reorder(ko, ki, ci, cj)
    for S in (AA, BB):
        s[S].compute_at(s[CL], ko)
        fused = s[S].fuse(*s[S].op.axis)
        fo, fx = s[S].split(fused, factor=6)   # 6 < 8 threads on x: guarded by threadIdx.x < 6
        _, fy = s[S].split(fo, factor=4)
        s[S].bind(fy, te.thread_axis("threadIdx.y"))
        s[S].bind(fx, te.thread_axis("threadIdx.x"))
    return GpuCase("matmul_guarded", s, [A, B, C], _matmul_make(M, N, K), lambda a: [a[0] @ a[1]], (2,),
                   rtol=1e-4, atol=1e-4)


# --------------------------------------------------------------------- transpose
def transpose_shared(n: int = 48, m: int = 40, tile: int = 16) -> GpuCase:
    """``B[i, j] = A[j, i]`` through a shared tile.

    ``A.shared`` is computed at B's ``blockIdx.x`` loop (block level, outside B's thread
    loops) and its own loops are bound to threadIdx.y/x; B's ``threadIdx.y/x`` loops read it:
    the kernel form has one thread loop per tag, the fetch and the compute as siblings
    in it, and a barrier between them.
    """
    A = te.placeholder((m, n), name="A")
    B = te.compute((n, m), lambda i, j: A[j, i], name="B")
    s = te.create_schedule(B.op)
    AS = s.cache_read(A, "shared", [B])
    i, j = s[B].op.axis
    io, ii = s[B].split(i, factor=tile)
    jo, ji = s[B].split(j, factor=tile)
    s[B].reorder(io, jo, ii, ji)
    s[B].bind(io, te.thread_axis("blockIdx.y"))
    s[B].bind(jo, te.thread_axis("blockIdx.x"))
    s[B].bind(ii, te.thread_axis("threadIdx.y"))
    s[B].bind(ji, te.thread_axis("threadIdx.x"))
    s[AS].compute_at(s[B], jo)
    ai, aj = s[AS].op.axis
    s[AS].bind(ai, te.thread_axis("threadIdx.y"))
    s[AS].bind(aj, te.thread_axis("threadIdx.x"))

    def make(rng):
        return [_uniform(rng, (m, n)), np.zeros((n, m), "float32")]

    return GpuCase("transpose", s, [A, B], make, lambda a: [a[0].T.copy()], (1,))


# --------------------------------------------------------------------- several kernels
def two_kernels(n: int = 1000, factor: int = 128) -> GpuCase:
    """``B = A * 2`` then ``C = B + 1``, both at root and bound: two kernels, ``B`` a global
    intermediate allocated in host code."""
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] * 2.0, name="B")
    C = te.compute((n,), lambda i: B[i] + 1.0, name="C")
    s = te.create_schedule(C.op)
    for T_ in (B, C):
        bx, tx = s[T_].split(T_.op.axis[0], factor=factor)
        s[T_].bind(bx, te.thread_axis("blockIdx.x"))
        s[T_].bind(tx, te.thread_axis("threadIdx.x"))

    def make(rng):
        return [_uniform(rng, n), np.zeros(n, "float32")]

    return GpuCase("two_kernels", s, [A, C], make, lambda a: [a[0] * 2.0 + 1.0], (1,))


def row_sum_unbound(m: int = 8, n: int = 33) -> GpuCase:
    """``B[i] = sum_k A[i, k]`` with no GPU binding at all: a one-thread kernel."""
    A = te.placeholder((m, n), name="A")
    k = te.reduce_axis((0, n), name="k")
    B = te.compute((m,), lambda i: te.sum(A[i, k], axis=k), name="B")
    s = te.create_schedule(B.op)

    def make(rng):
        return [_uniform(rng, (m, n)), np.zeros(m, "float32")]

    return GpuCase("row_sum", s, [A, B], make, lambda a: [a[0].sum(axis=1)], (1,), rtol=1e-5, atol=1e-5)


ALL_CASES = {
    "vector_add": vector_add,
    "scan_cumsum": scan_cumsum,
    "rgb_yuv": rgb_yuv,
    "rgb_yuv_fused": rgb_yuv_fused,
    "matmul_shared": matmul_shared,
    "matmul_shared_guarded": matmul_shared_guarded,
    "transpose_shared": transpose_shared,
    "two_kernels": two_kernels,
    "row_sum_unbound": row_sum_unbound,
}
"""Case name -> function building it with its default sizes."""


__all__ = ["GpuCase", "ALL_CASES", *ALL_CASES]


# --------------------------------------------------------------------- cross-thread reductions
# A reduce loop bound to threadIdx.x (Ansor's RuleCrossThreadReduction): lowered as TVM's
# thread allreduce (per-thread partials, a shared slot per thread, a tree reduction with
# barriers, the result stored by thread 0 -- or kept by every thread for a local buffer).

def _reduce_rows(combiner: str, m: int, n: int):
    A = te.placeholder((m, n), name="A")
    k = te.reduce_axis((0, n), name="k")
    B = te.compute((m,), lambda i: getattr(te, combiner)(A[i, k], axis=k), name="B")
    return A, k, B


_NP_REDUCE = {"sum": np.sum, "min": np.min, "max": np.max, "prod": np.prod}


def row_reduce_cross_thread(combiner: str = "sum", m: int = 6, n: int = 100, threads: int = 32,
                            rows_per_block: int = 1, rows_inside: bool = False,
                            rows_on_threads_y: bool = False) -> GpuCase:
    """``B[i] = combiner_k A[i, k]``, rows on blockIdx.x, k split by ``threads`` with the inner
    part on threadIdx.x (a non-power-of-two ``threads`` pads the tree; ``n`` not a multiple of
    ``threads`` guards the tail).  ``rows_per_block`` > 1 splits the rows: the inner part is a
    serial loop around the reduce loops, or inside them (``rows_inside``: one partial per row
    and thread), or bound to threadIdx.y (``rows_on_threads_y``: a slot row per y)."""
    A, k, B = _reduce_rows(combiner, m, n)
    s = te.create_schedule(B.op)
    (i,) = s[B].op.axis
    ko, ki = s[B].split(k, factor=threads)
    if rows_per_block == 1:
        s[B].bind(i, te.thread_axis("blockIdx.x"))
    else:
        io, ii = s[B].split(i, factor=rows_per_block)
        s[B].bind(io, te.thread_axis("blockIdx.x"))
        if rows_inside:
            s[B].reorder(io, ko, ii, ki)
        elif rows_on_threads_y:
            s[B].bind(ii, te.thread_axis("threadIdx.y"))
    s[B].bind(ki, te.thread_axis("threadIdx.x"))

    def make(rng):
        return [_uniform(rng, (m, n)), np.zeros(m, "float32")]

    return GpuCase(f"row_{combiner}_xthread", s, [A, B], make,
                   lambda a: [_NP_REDUCE[combiner](a[0], axis=1)], (1,), rtol=1e-5, atol=1e-5)


def softmax_cross_thread(m: int = 4, n: int = 100, red_threads: int = 32, threads: int = 64) -> GpuCase:
    """Row softmax: ``exp`` inlined, rows on blockIdx.x, softmax's columns split by
    ``threads`` (threadIdx.x); row_max and row_sum computed at the row loop, each with its
    reduce axis split by ``red_threads`` on threadIdx.x (fewer than the block: guarded).
    Both reduced values are local: every thread keeps the result for the division."""
    A = te.placeholder((m, n), name="A")
    k1 = te.reduce_axis((0, n), name="k1")
    mx = te.compute((m,), lambda i: te.max(A[i, k1], axis=k1), name="row_max")
    e = te.compute((m, n), lambda i, j: te.exp(A[i, j] - mx[i]), name="exp")
    k2 = te.reduce_axis((0, n), name="k2")
    sm = te.compute((m,), lambda i: te.sum(e[i, k2], axis=k2), name="row_sum")
    out = te.compute((m, n), lambda i, j: e[i, j] / sm[i], name="softmax")
    s = te.create_schedule(out.op)
    s[e].compute_inline()
    i, j = s[out].op.axis
    s[out].bind(i, te.thread_axis("blockIdx.x"))
    _, ji = s[out].split(j, factor=threads)
    s[out].bind(ji, te.thread_axis("threadIdx.x"))
    for R in (sm, mx):  # row_sum first: row_max's consumer must be there before it
        s[R].compute_at(s[out], i)
        _, ki = s[R].split(s[R].op.reduce_axis[0], factor=red_threads)
        s[R].bind(ki, te.thread_axis("threadIdx.x"))

    def make(rng):
        return [_uniform(rng, (m, n)) * 4, np.zeros((m, n), "float32")]

    def ref(a):
        x = np.exp(a[0] - a[0].max(axis=1, keepdims=True))
        return [x / x.sum(axis=1, keepdims=True)]

    return GpuCase("softmax_xthread", s, [A, out], make, ref, (1,), rtol=1e-5, atol=1e-6)


def zero_rank_sum_cross_thread(n: int = 200, threads: int = 32) -> GpuCase:
    """``B[] = sum_k A[k]``: no spatial loop, k split by ``threads`` on threadIdx.x; the
    init is host-level code, so init and reduce make one kernel (one block)."""
    A = te.placeholder((n,), name="A")
    k = te.reduce_axis((0, n), name="k")
    B = te.compute((), lambda: te.sum(A[k], axis=k), name="B")
    s = te.create_schedule(B.op)
    _, ki = s[B].split(k, factor=threads)
    s[B].bind(ki, te.thread_axis("threadIdx.x"))

    def make(rng):
        return [_uniform(rng, n), np.zeros((), "float32")]

    return GpuCase("zero_rank_xthread", s, [A, B], make, lambda a: [np.asarray(a[0].sum(), "float32")], (1,),
                   rtol=1e-5, atol=1e-5)


def matmul_small_cross_thread(M: int = 8, N: int = 8, K: int = 1024, threads: int = 32) -> GpuCase:
    """``C = A @ B`` with a small output: i, j fused on blockIdx.x, k split by ``threads``
    with k.1 on threadIdx.x (TVM's cross-thread-reduction sketch of matmul 8x8x1024)."""
    A, B, C = _matmul_compute(M, N, K)
    s = te.create_schedule(C.op)
    f = s[C].fuse(*s[C].op.axis)
    s[C].bind(f, te.thread_axis("blockIdx.x"))
    _, ki = s[C].split(s[C].op.reduce_axis[0], factor=threads)
    s[C].bind(ki, te.thread_axis("threadIdx.x"))
    return GpuCase("matmul_xthread", s, [A, B, C], _matmul_make(M, N, K), lambda a: [a[0] @ a[1]], (2,),
                   rtol=1e-4, atol=1e-4)


CROSS_THREAD_CASES = {
    "row_sum_cross_thread": row_reduce_cross_thread,
    "row_min_cross_thread_100": lambda: row_reduce_cross_thread("min", threads=100, n=250),
    "softmax_cross_thread": softmax_cross_thread,
    "zero_rank_sum_cross_thread": zero_rank_sum_cross_thread,
    "matmul_small_cross_thread": matmul_small_cross_thread,
}
ALL_CASES.update(CROSS_THREAD_CASES)
__all__ += ["CROSS_THREAD_CASES", "row_reduce_cross_thread", "softmax_cross_thread",
            "zero_rank_sum_cross_thread", "matmul_small_cross_thread"]
