"""GPU emulation on the CPU (MCUDA-style): hand-built kernel-form programs checked against numpy.

The kernels follow docs/gpu_kernel_form.md: block loops, shared Allocates, thread loops,
per-thread code with barriers.  ``emulate`` compiles the CPU form with the LLVM backend.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from scheduler_core.base.errors import LoweringError
from scheduler_core.driver.build_module import run_passes
from scheduler_core.driver.cuda_build import emulate
from scheduler_core.ir import expr as E
from scheduler_core.ir import tir as T
from scheduler_core.passes.gpu_emulation import (
    RACE_PARAM,
    RaceConditionError,
    gpu_to_cpu,
    is_barrier,
)
from tests.scheduler_core.gpu import gpu_schedules as G

Barrier = T.Barrier
RNG = np.random.default_rng(0)
GPU_KINDS = ("blockIdx.x", "blockIdx.y", "blockIdx.z", "threadIdx.x", "threadIdx.y", "threadIdx.z", "vthread")


def loop(var, extent, body, kind="serial"):
    return T.For(var, E.const(0), E.as_expr(extent), kind, body)


def load(buf, idx, lanes=1):
    return E.BufferLoad(buf, idx, buf.dtype, lanes)


def buf(name, shape, dtype="float32", scope="global"):
    return T.Buffer(name, dtype, tuple(E.as_expr(s) for s in shape), scope)


def func(name, params, body, scalars=()):
    return T.PrimFunc(name, tuple(params), tuple(scalars), body, {"target_kind": "cuda"})


def rand(*shape):
    return RNG.standard_normal(shape).astype("float32")


# -- kernels -------------------------------------------------------------------------

def vector_add(n, threads=128):
    """C = A + B, one element per thread, guarded tail; ``n`` an int or a scalar param Var."""
    A, B, C = (buf(x, (n,)) for x in "ABC")
    bx, tx = E.Var("blockIdx.x"), E.Var("threadIdx.x")
    i = bx * threads + tx
    body = T.IfThenElse(i < n, T.Store(C, i, load(A, i) + load(B, i)), likely=True)
    grid = (n + threads - 1) // threads
    scalars = (n,) if isinstance(n, E.Var) else ()
    return func("vadd", (A, B, C), loop(bx, grid, loop(tx, threads, body, "threadIdx.x"), "blockIdx.x"), scalars)


def tiled_matmul(M, N, K, barrier_after_fill=True, barrier_at_end=True, vector_j=False):
    """C = A @ B: 32x32 block tiles, 16x16 threads computing 2x2 each in a local
    accumulator, A/B tiles of depth 16 filled cooperatively into shared memory."""
    BM = BN = 32
    BK = 16
    A, B, C = buf("A", (M, K)), buf("B", (K, N)), buf("C", (M, N))
    As = buf("A_shared", (BM, BK), scope="shared")
    Bs = buf("B_shared", (BK, BN), scope="shared")
    Cl = buf("C_local", (2, 2), scope="local")
    by, bx = E.Var("blockIdx.y"), E.Var("blockIdx.x")
    ty, tx = E.Var("threadIdx.y"), E.Var("threadIdx.x")
    ko, ki, f, i, j = (E.Var(x) for x in ("ko", "ki", "f", "i", "j"))
    row0 = E.Var("row0")  # thread-dependent, defined before the barriers, used after them
    e = f * 256 + ty * 16 + tx
    fill_a = loop(f, 2, T.Store(As, e, load(A, (by * BM + e // BK) * K + ko * BK + e % BK)))
    fill_b = loop(f, 2, T.Store(Bs, e, load(B, (ko * BK + e // BN) * N + bx * BN + e % BN)))
    acc = T.Store(Cl, i * 2 + j, load(Cl, i * 2 + j)
                  + load(As, (ty * 2 + i) * BK + ki) * load(Bs, ki * BN + tx * 2 + j))
    jkind = "vectorized" if vector_j else "serial"
    compute = loop(ki, BK, loop(i, 2, loop(j, 2, acc, jkind)))
    kbody = T.seq(fill_a, fill_b, Barrier() if barrier_after_fill else None, compute,
                  Barrier() if barrier_at_end else None)
    init = loop(i, 2, loop(j, 2, T.Store(Cl, i * 2 + j, E.const(0.0))))
    write = loop(i, 2, loop(j, 2, T.Store(C, (row0 + i) * N + bx * BN + tx * 2 + j, load(Cl, i * 2 + j))))
    per_thread = T.LetStmt(row0, by * BM + ty * 2,
                           T.Allocate(Cl, T.seq(init, loop(ko, K // BK, kbody), write)))
    threads = loop(ty, 16, loop(tx, 16, per_thread, "threadIdx.x"), "threadIdx.y")
    kernel = loop(by, M // BM, loop(bx, N // BN, T.Allocate(As, T.Allocate(Bs, threads)), "blockIdx.x"),
                  "blockIdx.y")
    return func("matmul", (A, B, C), kernel)


def block_reduce_kernel(A, out, nb, barrier_in_loop=True):
    """out[b] = sum(A[b*256 : (b+1)*256]): a tree reduction in shared memory, barriers in a
    uniform loop whose stride is a uniform LetStmt."""
    S = buf("S_red", (256,), scope="shared")
    bx, tx, s = E.Var("blockIdx.x"), E.Var("threadIdx.x"), E.Var("s")
    stride = E.Var("stride")
    step = T.LetStmt(stride, E.const(128) // E.binary("pow", 2, s), T.seq(
        T.IfThenElse(tx < stride, T.Store(S, tx, load(S, tx) + load(S, tx + stride))),
        Barrier() if barrier_in_loop else None))
    body = T.seq(T.Store(S, tx, load(A, bx * 256 + tx)), Barrier(), loop(s, 8, step),
                 T.IfThenElse(tx == 0, T.Store(out, bx, load(S, E.const(0)))))
    return loop(bx, nb, T.Allocate(S, loop(tx, 256, body, "threadIdx.x")), "blockIdx.x")


def block_reduce(nb, barrier_in_loop=True):
    A, out = buf("A", (nb * 256,)), buf("out", (nb,))
    return func("reduce", (A, out), block_reduce_kernel(A, out, nb, barrier_in_loop))


def two_kernel_sum(nb):
    """Kernel 0: per-block partial sums into an intermediate global buffer; kernel 1 (one
    thread): their total."""
    A, out = buf("A", (nb * 256,)), buf("out", (1,))
    partial = buf("partial", (nb,))
    bx, tx, i = E.Var("blockIdx.x"), E.Var("threadIdx.x"), E.Var("i")
    zero = E.const(0)
    total = T.seq(T.Store(out, zero, E.const(0.0)),
                  loop(i, nb, T.Store(out, zero, load(out, zero) + load(partial, i))))
    k1 = loop(bx, 1, loop(tx, 1, total, "threadIdx.x"), "blockIdx.x")
    body = T.Allocate(partial, T.seq(block_reduce_kernel(A, partial, nb), k1))
    return func("sum2", (A, out), body)


def reverse_blocks(nb, barrier=True):
    """B[b*64 + k] = A[b*64 + 63 - k]: 16 threads store 4-lane vectors into shared memory,
    then read back another thread's elements."""
    A, B = buf("A", (nb * 64,)), buf("B", (nb * 64,))
    S = buf("S_rev", (64,), scope="shared")
    bx, tx, j = E.Var("blockIdx.x"), E.Var("threadIdx.x"), E.Var("j")
    vstore = T.Store(S, E.Ramp(tx * 4, E.const(1), 4), load(A, E.Ramp(bx * 64 + tx * 4, E.const(1), 4), 4))
    back = loop(j, 4, T.Store(B, bx * 64 + tx * 4 + j, load(S, 63 - (tx * 4 + j))))
    body = T.seq(vstore, Barrier() if barrier else None, back)
    return func("rev", (A, B), loop(bx, nb, T.Allocate(S, loop(tx, 16, body, "threadIdx.x")), "blockIdx.x"))


# -- tests ---------------------------------------------------------------------------

def _kinds(f):
    return {s.kind for s in T.walk_stmts(f.body) if isinstance(s, T.For)}


def test_vector_add_with_guard():
    n = 1000
    a, b, c = rand(n), rand(n), np.zeros(n, "float32")
    emulate(vector_add(n), a, b, c, check_races=True)
    np.testing.assert_allclose(c, a + b, rtol=1e-6)


def test_vector_add_symbolic_size():
    n = E.Var("n")
    f = vector_add(n)
    for size in (1, 130):
        a, b, c = rand(size), rand(size), np.zeros(size, "float32")
        emulate(f, a, b, c, check_races=True)
        np.testing.assert_allclose(c, a + b, rtol=1e-6)
    a, b, c = rand(77), rand(77), np.zeros(77, "float32")
    emulate(f, a, b, c, 77)  # scalar params may follow the arrays
    np.testing.assert_allclose(c, a + b, rtol=1e-6)


def test_cpu_form_has_no_gpu_loops_or_barriers_and_expands_per_thread_values():
    f = gpu_to_cpu(tiled_matmul(64, 64, 64))
    assert not _kinds(f) & set(GPU_KINDS)
    assert not any(is_barrier(s) for s in T.walk_stmts(f.body))
    allocs = {s.buffer.name: s.buffer for s in T.walk_stmts(f.body) if isinstance(s, T.Allocate)}
    # local accumulator and the let var crossing the barriers: one copy per thread (256 threads)
    assert [int(x.value) for x in allocs["C_local"].shape] == [256, 2, 2]
    assert [int(x.value) for x in allocs["row0_per_thread"].shape] == [256]
    # shared tiles: one per block
    assert [int(x.value) for x in allocs["A_shared"].shape] == [32, 16]
    assert [p.name for p in f.params] == ["A", "B", "C"]
    checked = gpu_to_cpu(tiled_matmul(64, 64, 64), check_races=True)
    assert checked.params[-1].name == RACE_PARAM
    assert checked.attrs["race_buffers"] == ["A_shared", "B_shared"]


def test_unroll_pragma_scopes_per_thread_code():
    """auto_unroll_max_step on the block loop unrolls the per-thread loop, not the thread loop."""
    n = 4 * 128 * 3
    A, B = buf("A", (n,)), buf("B", (n,))
    bx, tx, v = E.Var("blockIdx.x"), E.Var("threadIdx.x"), E.Var("v")
    i = (bx * 128 + tx) * 4 + v
    body = loop(v, 4, T.Store(B, i, load(A, i) * 2.0))
    kernel = T.For(bx, E.const(0), E.const(3), "blockIdx.x", loop(tx, 128, body, "threadIdx.x"),
                   {"auto_unroll_max_step": 512})
    f = func("scale", (A, B), kernel)
    extents = sorted(int(s.extent.value) for s in T.walk_stmts(run_passes(gpu_to_cpu(f)).body)
                     if isinstance(s, T.For))
    assert extents == [3, 128]
    a, b = rand(n), np.zeros(n, "float32")
    emulate(f, a, b)
    np.testing.assert_allclose(b, 2 * a)


@pytest.mark.parametrize("vector_j", [False, True])
@pytest.mark.parametrize("check_races", [False, True])
def test_tiled_matmul_shared_tiles(check_races, vector_j):
    M, N, K = 64, 96, 48
    a, b, c = rand(M, K), rand(K, N), np.zeros((M, N), "float32")
    emulate(tiled_matmul(M, N, K, vector_j=vector_j), a, b, c, check_races=check_races)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)


def test_block_tree_reduction():
    nb = 5
    a, out = rand(nb * 256), np.zeros(nb, "float32")
    emulate(block_reduce(nb), a, out, check_races=True)
    np.testing.assert_allclose(out, a.reshape(nb, 256).sum(axis=1), rtol=1e-4, atol=1e-4)


def test_two_kernels_with_intermediate_buffer():
    nb = 7
    a, out = rand(nb * 256), np.zeros(1, "float32")
    emulate(two_kernel_sum(nb), a, out, check_races=True)
    np.testing.assert_allclose(out[0], a.sum(), rtol=1e-4, atol=1e-3)


def test_vector_shared_store():
    nb = 3
    a, b = rand(nb * 64), np.zeros(nb * 64, "float32")
    emulate(reverse_blocks(nb), a, b, check_races=True)
    np.testing.assert_allclose(b, a.reshape(nb, 64)[:, ::-1].reshape(-1))


def test_race_check_missing_barrier_in_reduction_loop():
    nb = 2
    a, out = rand(nb * 256), np.zeros(nb, "float32")
    with pytest.raises(RaceConditionError, match=r"race on shared buffer 'S_red'"):
        emulate(block_reduce(nb, barrier_in_loop=False), a, out, check_races=True)


def test_race_check_missing_barrier_at_loop_back_edge():
    """Without the barrier at the end of the k loop, the next fill overwrites a tile other
    threads still read: a write-after-read race across the loop's back edge."""
    a, b, c = rand(64, 32), rand(32, 64), np.zeros((64, 64), "float32")
    with pytest.raises(RaceConditionError, match=r"write-after-read race on shared buffer 'A_shared'"):
        emulate(tiled_matmul(64, 64, 32, barrier_at_end=False), a, b, c, check_races=True)


def test_race_check_missing_barrier_after_fill():
    a, b, c = rand(32, 16), rand(16, 32), np.zeros((32, 32), "float32")
    with pytest.raises(RaceConditionError, match="A_shared"):
        emulate(tiled_matmul(32, 32, 16, barrier_after_fill=False), a, b, c, check_races=True)


def test_race_check_vector_store():
    a, b = rand(64), np.zeros(64, "float32")
    with pytest.raises(RaceConditionError, match="S_rev"):
        emulate(reverse_blocks(1, barrier=False), a, b, check_races=True)


def test_barrier_under_thread_dependent_condition_raises():
    A = buf("A", (64,))
    S = buf("S", (64,), scope="shared")
    bx, tx = E.Var("blockIdx.x"), E.Var("threadIdx.x")
    body = T.seq(T.Store(S, tx, load(A, tx)), T.IfThenElse(tx < 32, Barrier()),
                 T.Store(A, tx, load(S, 63 - tx)))
    f = func("bad", (A,), loop(bx, 1, T.Allocate(S, loop(tx, 64, body, "threadIdx.x")), "blockIdx.x"))
    with pytest.raises(LoweringError, match="thread-dependent condition"):
        gpu_to_cpu(f)


def test_barrier_in_thread_dependent_loop_raises():
    A = buf("A", (64,))
    tx, k = E.Var("threadIdx.x"), E.Var("k")
    body = loop(k, tx, T.seq(T.Store(A, tx, load(A, tx) + 1.0), Barrier()))
    f = func("bad_loop", (A,), loop(tx, 64, body, "threadIdx.x"))
    with pytest.raises(LoweringError, match="depend on the thread"):
        gpu_to_cpu(f)


# -- the lowered GPU schedules (lower_state + lower_for_gpu) ---------------------------

@pytest.mark.parametrize("name", sorted(G.ALL_CASES))
def test_lowered_schedule_matches_reference(name):
    case = G.ALL_CASES[name]()
    func = case.kernel_form()
    arrays = case.arrays()
    emulate(func, *arrays, *case.scalar_args, check_races=True)
    case.check(arrays)
    arrays = case.arrays(seed=1)
    emulate(func, *arrays)
    case.check(arrays)


def drop_barrier(s: T.Stmt, which: int) -> T.Stmt:
    """``s`` without its ``which``-th barrier (pre-order)."""
    count = [0]

    def go(n):
        if isinstance(n, T.Barrier):
            count[0] += 1
            return T.SeqStmt(()) if count[0] - 1 == which else n
        if isinstance(n, T.SeqStmt):
            return T.SeqStmt(tuple(go(c) for c in n.seq))
        if isinstance(n, T.IfThenElse):
            other = None if n.else_case is None else go(n.else_case)
            return replace(n, then_case=go(n.then_case), else_case=other)
        if isinstance(n, (T.For, T.Allocate, T.LetStmt)):
            return replace(n, body=go(n.body))
        return n

    return go(s)


@pytest.mark.parametrize("name", ["matmul_shared", "matmul_shared_guarded", "transpose_shared"])
def test_lowered_schedule_without_a_barrier_races(name):
    """Every barrier the GPU lowering placed is needed: without it the race check fails."""
    case = G.ALL_CASES[name]()
    func = case.kernel_form()
    n = sum(isinstance(s, T.Barrier) for s in T.walk_stmts(func.body))
    assert n >= 1
    shared = {s.buffer.name for s in T.walk_stmts(func.body)
              if isinstance(s, T.Allocate) and s.buffer.scope == "shared"}
    for k in range(n):
        broken = replace(func, body=drop_barrier(func.body, k))
        arrays = case.arrays()
        with pytest.raises(RaceConditionError, match="race on shared buffer") as info:
            emulate(broken, *arrays, check_races=True)
        assert any(f"'{b}'" in str(info.value) for b in shared)
