"""The GPU lowering (``lowering/gpu.py``): kernel-form structure, launch descriptions, errors;
``tir.Barrier``; the cuda target's options and HardwareParams.

The schedules come from ``gpu_schedules.py`` (shared with the codegen and emulator tests).
These tests check structure only: no device, no compilation.
"""

from __future__ import annotations

import shutil

import pytest

from scheduler_core import te
from scheduler_core.base.errors import InvalidTargetError, LoweringError
from scheduler_core.base.gpu_spec import BLOCK_TAGS, GPU_TAGS, THREAD_TAGS
from scheduler_core.base.target import CUDA_ARCHS, HardwareParams, Target, arch_of_compute_capability, default_cuda_arch
from scheduler_core.ir import tir as T
from scheduler_core.ir.expr import BufferLoad, IntImm, Var
from scheduler_core.lowering.gpu import lower_for_gpu
from scheduler_core.lowering.lower import lower_state
from tests.scheduler_core.gpu import gpu_schedules as G

# ----------------------------------------------------------------------------- helpers


def kernels_of(func: T.PrimFunc) -> list:
    """The kernels of a kernel-form function: host items that are GPU-tagged For loops."""
    out: list = []

    def host(s):
        if isinstance(s, T.For) and s.kind in GPU_TAGS:
            out.append(s)
            return
        for c in T.stmt_children(s):
            host(c)

    host(func.body)
    return out


def split_kernel(k: T.For) -> tuple:
    """``(block loops, shared allocs, thread loops, per-thread body)`` of one kernel,
    asserting the kernel form's shape on the way."""
    blocks, shared, threads = [], [], []
    s: T.Stmt = k
    while isinstance(s, T.For) and s.kind in BLOCK_TAGS:
        blocks.append(s)
        s = s.body
    while isinstance(s, T.Allocate) and s.buffer.scope == "shared":
        shared.append(s.buffer)
        s = s.body
    while isinstance(s, T.For) and s.kind in THREAD_TAGS:
        threads.append(s)
        s = s.body
    order = [f.kind for f in blocks]
    assert order == sorted(order, reverse=True), f"block loops z, y, x outermost first: {order}"
    order = [f.kind for f in threads]
    assert order == sorted(order, reverse=True), f"thread loops z, y, x outermost first: {order}"
    for loop in blocks + threads:
        assert isinstance(loop.min, IntImm) and loop.min.value == 0
        assert loop.loop_var.name == loop.kind
    for n in T.walk_stmts(s):
        assert not (isinstance(n, T.For) and n.kind in GPU_TAGS + ("vthread", "parallel")), n.kind
        assert not (isinstance(n, T.Allocate) and n.buffer.scope != "local"), n.buffer
    return blocks, shared, threads, s


def barrier_paths(body: T.Stmt) -> list:
    """For each barrier: the loop variable names of the serial loops enclosing it."""
    out: list = []

    def go(s, loops):
        if isinstance(s, T.Barrier):
            out.append(tuple(loops))
        for c in T.stmt_children(s):
            go(c, loops + [s.loop_var.name] if isinstance(s, T.For) else loops)

    go(body, [])
    return out


def stores_to(body: T.Stmt, name: str) -> list:
    return [n for n in T.walk_stmts(body) if isinstance(n, T.Store) and n.buffer.name == name]


# ----------------------------------------------------------------------------- Barrier


def test_barrier_is_a_printed_leaf():
    b = T.Barrier()
    assert T.stmt_children(b) == ()
    assert list(T.walk_stmts(T.seq(b, b))) [1:] == [b, b]
    assert str(b) == "__syncthreads()"
    loop = T.For(Var("i"), IntImm(0), IntImm(2), "serial", b)
    assert "  __syncthreads()" in str(loop)


# ----------------------------------------------------------------------------- seed 004


def test_vector_add_symbolic_n_kernel_form():
    case = G.vector_add()
    func = case.kernel_form()
    assert func.attrs["target_kind"] == "cuda"
    (k,) = kernels_of(func)
    assert func.body is k  # nothing on the host but the launch
    blocks, shared, threads, body = split_kernel(k)
    assert [b.kind for b in blocks] == ["blockIdx.x"] and [t.kind for t in threads] == ["threadIdx.x"]
    assert shared == [] and T.expr_str(blocks[0].extent) == "floordiv((n + 63), 64)"
    assert threads[0].extent.value == 64
    # the tail guard of n not a multiple of 64
    assert isinstance(body, T.IfThenElse) and body.likely
    assert T.expr_str(body.cond) == "(((blockIdx.x*64) + threadIdx.x) < n)"
    (launch,) = func.attrs["kernels"]
    assert launch == {"name": "myadd_kernel0", "grid": ["floordiv((n + 63), 64)", 1, 1], "block": [64, 1, 1],
                      "shared_bytes": 0, "params": ["A", "B", "C", "n"]}
    assert k.annotations["kernel"] == "myadd_kernel0"
    assert [b.name for b in func.params] == ["A", "B", "C"] and [v.name for v in func.scalar_params] == ["n"]


def test_vector_add_divisible_constant_n_has_no_guard():
    n = 1024
    A = te.placeholder((n,), name="A")
    B = te.placeholder((n,), name="B")
    C = te.compute((n,), lambda i: A[i] + B[i], name="C")
    s = te.create_schedule(C.op)
    bx, tx = s[C].split(C.op.axis[0], factor=64)
    s[C].bind(bx, te.thread_axis("blockIdx.x"))
    s[C].bind(tx, te.thread_axis("threadIdx.x"))
    func = lower_for_gpu(lower_state(s.state, [A, B, C]), "cuda -arch=sm_90")
    (k,) = kernels_of(func)
    _, _, _, body = split_kernel(k)
    assert isinstance(body, T.Store)
    assert func.attrs["kernels"][0]["grid"] == [16, 1, 1] and func.attrs["kernels"][0]["params"] == ["A", "B", "C"]


def test_lowering_is_idempotent_and_needs_cuda():
    func = G.vector_add().kernel_form()
    assert lower_for_gpu(func, "cuda") is func
    with pytest.raises(LoweringError, match="cuda target"):
        lower_for_gpu(G.vector_add().lower(), "llvm")
    with pytest.raises(InvalidTargetError, match="arch"):
        lower_for_gpu(G.vector_add().lower(), "cuda -arch=sm_1")


# ----------------------------------------------------------------------------- seed 001


def test_scan_on_cuda_host_loop_launches_a_kernel_per_step():
    func = G.scan_cumsum().kernel_form()
    body = func.body
    assert isinstance(body, T.SeqStmt) and len(body.seq) == 2
    init, time_loop = body.seq
    assert isinstance(init, T.For) and init.kind == "blockIdx.x"
    assert isinstance(time_loop, T.For) and time_loop.kind == "serial" and time_loop.loop_var.name == "scan.idx"
    assert isinstance(time_loop.body, T.For) and time_loop.body.kind == "blockIdx.x"
    k0, k1 = kernels_of(func)
    for k in (k0, k1):
        _, shared, threads, _ = split_kernel(k)
        assert shared == [] and threads[0].extent.value == 256
    launches = func.attrs["kernels"]
    assert [x["name"] for x in launches] == ["myscan_kernel0", "myscan_kernel1"]
    assert launches[0]["grid"] == ["floordiv((n + 255), 256)", 1, 1]
    # the update kernel reads the host's time step
    assert launches[0]["params"] == ["X", "scan", "n"] and launches[1]["params"] == ["X", "scan", "n", "scan.idx"]


# ----------------------------------------------------------------------------- seed 003


def test_rgb_yuv_seed_schedule_host_loop_over_the_unbound_outer_axis():
    func = G.rgb_yuv().kernel_form()
    host = func.body
    assert isinstance(host, T.For) and host.kind == "serial" and host.loop_var.name == "i"
    (k,) = kernels_of(func)
    blocks, _, threads, body = split_kernel(k)
    assert blocks[0].extent.value == 2 and threads[0].extent.value == 64  # ceil(100 / 64)
    assert isinstance(body, T.For) and body.loop_var.name == "k"  # the channel loop, per thread
    assert func.attrs["kernels"][0]["params"] == ["rgb", "yuv", "i"]


def test_rgb_yuv_fused_template_one_kernel():
    func = G.rgb_yuv_fused().kernel_form()
    (k,) = kernels_of(func)
    assert func.body is k
    blocks, _, threads, body = split_kernel(k)
    assert blocks[0].extent.value == 30 and threads[0].extent.value == 80  # 24*100 / 80
    assert isinstance(body, T.For) and body.kind == "unrolled"
    assert func.attrs["kernels"][0]["block"] == [80, 1, 1]


# ----------------------------------------------------------------------------- matmul


def test_matmul_shared_local_cooperative_fetch_kernel_form():
    case = G.matmul_shared()
    func = case.kernel_form()
    (k,) = kernels_of(func)
    blocks, shared, threads, body = split_kernel(k)
    assert [b.kind for b in blocks] == ["blockIdx.y", "blockIdx.x"]
    assert [b.extent.value for b in blocks] == [4, 4]
    # shared allocs hoisted between the block and the thread loops, in program order
    assert [b.name for b in shared] == ["A_shared", "B_shared"]
    assert [T.expr_str(b.shape[0]) for b in shared] == ["128", "128"]
    # one threadIdx.x loop: the fetch loops bound to threadIdx.x use the same variable
    assert [t.kind for t in threads] == ["threadIdx.x"] and threads[0].extent.value == 64
    tx = threads[0].loop_var
    assert sum(isinstance(n, T.For) and n.kind == "threadIdx.x" for n in T.walk_stmts(k)) == 1
    for name in ("A_shared", "B_shared"):
        (st,) = stores_to(body, name)
        assert any(v is tx for v in _vars(st.index))
    # the local cache stays per thread
    assert isinstance(body, T.Allocate) and body.buffer.name == "C_local" and body.buffer.scope == "local"
    # barriers: after the fetches (before the compute) and at the end of the k.0 body
    assert barrier_paths(body) == [("k.0",), ("k.0",)]
    (ko,) = [n for n in T.walk_stmts(body) if isinstance(n, T.For) and n.loop_var.name == "k.0"]
    seq = ko.body.seq
    assert isinstance(seq[-1], T.Barrier)
    first = next(i for i, c in enumerate(seq) if isinstance(c, T.Barrier))
    assert all(stores_to(c, "A_shared") or stores_to(c, "B_shared") for c in seq[:first])
    assert any(stores_to(c, "C_local") for c in seq[first + 1:-1])
    assert func.attrs["kernels"] == [{"name": "matmul_kernel0", "grid": [4, 4, 1], "block": [64, 1, 1],
                                      "shared_bytes": 1024, "params": ["A", "B", "C"]}]


def test_matmul_lowering_shared_scope_relaxes_thread_indices():
    """lower_state gives the shared cache a block-wide region (threads relaxed) and
    keeps the local cache per thread."""
    text = str(G.matmul_shared().lower())
    assert "allocate(A_shared, float32, [128]), storage_scope = shared" in text
    assert "allocate(B_shared, float32, [128]), storage_scope = shared" in text
    assert "allocate(C_local, float32, [4]), storage_scope = local" in text


def test_matmul_guarded_fetch_with_fewer_threads_and_vthread():
    func = G.matmul_shared_guarded().kernel_form()
    (k,) = kernels_of(func)
    blocks, shared, threads, body = split_kernel(k)
    assert [t.kind for t in threads] == ["threadIdx.y", "threadIdx.x"]
    assert [t.extent.value for t in threads] == [4, 8]
    assert func.attrs["kernels"][0]["block"] == [8, 4, 1] and func.attrs["kernels"][0]["grid"] == [3, 4, 1]
    assert func.attrs["kernels"][0]["shared_bytes"] == sum(int(b.shape[0].value) * 4 for b in shared)
    # the vthread is a serial loop inside the thread loops
    assert isinstance(body, T.For) and body.kind == "serial" and body.loop_var.name == "i.1.0"
    # the fetches run on threadIdx.x < 6 only
    guards = [n for n in T.walk_stmts(body)
              if isinstance(n, T.IfThenElse) and T.expr_str(n.cond) == "(threadIdx.x < 6)"]
    assert len(guards) == 2
    for g in guards:
        assert stores_to(g, "A_shared") or stores_to(g, "B_shared")
    assert barrier_paths(body) == [("i.1.0", "k.0"), ("i.1.0", "k.0")]


def test_transpose_shared_tile_at_block_level():
    func = G.transpose_shared().kernel_form()
    (k,) = kernels_of(func)
    _, shared, threads, body = split_kernel(k)
    assert [b.name for b in shared] == ["A_shared"] and [t.extent.value for t in threads] == [16, 16]
    assert isinstance(body, T.SeqStmt)
    fetch, barrier, compute = body.seq
    assert stores_to(fetch, "A_shared") and isinstance(barrier, T.Barrier) and stores_to(compute, "B")
    assert func.attrs["kernels"][0]["shared_bytes"] == 16 * 16 * 4


def test_guard_is_pushed_below_barriers():
    """A thread loop smaller than the block whose body needs barriers: the guard wraps the
    barrier-free parts, the barriers stay under uniform control flow."""
    A = te.placeholder((64, 64), name="A")
    V = te.placeholder((64,), name="V")
    k = te.reduce_axis((0, 64), name="k")
    C = te.compute((64,), lambda i: te.sum(A[i, k] * V[k], axis=k), name="C")
    s = te.create_schedule(C.op)
    AS = s.cache_read(A, "shared", [C])
    VS = s.cache_read(V, "shared", [C])
    io, ii = s[C].split(C.op.axis[0], factor=16)
    s[C].bind(io, te.thread_axis("blockIdx.x"))
    s[C].bind(ii, te.thread_axis("threadIdx.x"))  # 16 threads compute
    ko, _ = s[C].split(s[C].op.reduce_axis[0], factor=8)
    s[VS].compute_at(s[C], io)  # the whole V, fetched by 32 threads at block level
    _, vi = s[VS].split(s[VS].op.axis[0], factor=32)
    s[VS].bind(vi, te.thread_axis("threadIdx.x"))
    s[AS].compute_at(s[C], ko)
    fused = s[AS].fuse(*s[AS].op.axis)
    _, fi = s[AS].split(fused, factor=16)
    s[AS].bind(fi, te.thread_axis("threadIdx.x"))
    func = lower_for_gpu(lower_state(s.state, [A, V, C]), "cuda")
    (kern,) = kernels_of(func)
    _, shared, threads, body = split_kernel(kern)
    assert threads[0].extent.value == 32 and [b.name for b in shared] == ["V_shared", "A_shared"]
    guards = [n for n in T.walk_stmts(body)
              if isinstance(n, T.IfThenElse) and T.expr_str(n.cond) == "(threadIdx.x < 16)"]
    assert guards
    for g in guards:
        assert not any(isinstance(x, T.Barrier) for x in T.walk_stmts(g))
    # after the V fetch; after the A fetch and at the end of k.0 (under the pushed-down guard's loop)
    assert barrier_paths(body) == [(), ("k.0",), ("k.0",)]


# ----------------------------------------------------------------------------- several kernels


def test_two_root_stages_two_kernels_and_a_global_intermediate():
    func = G.two_kernels().kernel_form()
    assert isinstance(func.body, T.Allocate) and func.body.buffer.scope == "global" and func.body.buffer.name == "B"
    k0, k1 = kernels_of(func)
    assert stores_to(k0, "B") and stores_to(k1, "C")
    launches = func.attrs["kernels"]
    assert launches[0]["params"] == ["A", "B"] and launches[1]["params"] == ["C", "B"]
    assert [x["name"] for x in launches] == ["two_kernels_kernel0", "two_kernels_kernel1"]


def test_unbound_root_stage_is_a_one_thread_kernel():
    func = G.row_sum_unbound().kernel_form()
    (k,) = kernels_of(func)
    blocks, _, threads, body = split_kernel(k)
    assert [(b.kind, b.extent.value) for b in blocks] == [("blockIdx.x", 1)]
    assert [(t.kind, t.extent.value) for t in threads] == [("threadIdx.x", 1)]
    assert not any(isinstance(n, T.Barrier) for n in T.walk_stmts(body))
    assert func.attrs["kernels"][0]["grid"] == [1, 1, 1] and func.attrs["kernels"][0]["block"] == [1, 1, 1]


def test_every_case_has_one_loop_per_tag_per_kernel():
    for name, make in G.ALL_CASES.items():
        func = make().kernel_form()
        assert len(kernels_of(func)) == len(func.attrs["kernels"]), name
        for k in kernels_of(func):
            tags = [n.kind for n in T.walk_stmts(k) if isinstance(n, T.For) and n.kind in GPU_TAGS]
            assert len(tags) == len(set(tags)), (name, tags)
            split_kernel(k)


# ----------------------------------------------------------------------------- errors


def _vadd(n=256):
    A = te.placeholder((n,), name="A")
    B = te.placeholder((n,), name="B")
    C = te.compute((n,), lambda i: A[i] + B[i], name="C")
    return A, B, C, te.create_schedule(C.op)


def test_error_parallel_loop_on_cuda():
    A, B, C, s = _vadd()
    xo, _ = s[C].split(C.op.axis[0], factor=64)
    s[C].parallel(xo)
    with pytest.raises(LoweringError, match=r"i\.0 is parallel"):
        lower_for_gpu(lower_state(s.state, [A, B, C]), "cuda")


def test_error_fetch_with_more_threads_than_the_consumer_loop():
    case = G.matmul_shared(fetch_threads=128)
    with pytest.raises(LoweringError, match=r"extent 128 inside loop .* threadIdx.x with extent 64"):
        case.kernel_form()


def test_error_block_tag_bound_twice_on_one_path():
    A, B, C, s = _vadd()
    xo, xi = s[C].split(C.op.axis[0], factor=64)
    xio, xii = s[C].split(xi, factor=8)
    s[C].bind(xo, te.thread_axis("blockIdx.x"))
    s[C].bind(xio, te.thread_axis("blockIdx.x"))
    with pytest.raises(LoweringError, match="blockIdx.x is bound twice on one path"):
        lower_for_gpu(lower_state(s.state, [A, B, C]), "cuda")


def _kernel_tir(inner: T.Stmt, buf: T.Buffer | None = None, ext_bx=4, ext_tx=32) -> T.PrimFunc:
    bx, tx = Var("bx"), Var("tx")
    body = inner(bx, tx)
    if buf is not None:
        body = T.Allocate(buf, body)
    out = T.Buffer("Out", "float32", (IntImm(128),))
    return T.PrimFunc("f", (out,), (), T.For(bx, IntImm(0), IntImm(ext_bx), "blockIdx.x",
                                           T.For(tx, IntImm(0), IntImm(ext_tx), "threadIdx.x", body)))


def test_error_two_extents_for_one_block_tag():
    out = T.Buffer("Out", "float32", (IntImm(128),))
    t = Var("t")
    b1, b2 = Var("b1"), Var("b2")
    body = T.For(t, IntImm(0), IntImm(4), "threadIdx.y", T.seq(
        T.For(b1, IntImm(0), IntImm(4), "blockIdx.x", T.Store(out, b1 * 4 + t, IntImm(0).astype("float32"))),
        T.For(b2, IntImm(0), IntImm(8), "blockIdx.x", T.Store(out, b2 * 4 + t, IntImm(0).astype("float32")))))
    with pytest.raises(LoweringError, match=r"b1 \(extent 4\) and b2 \(extent 8\) are both bound to blockIdx.x"):
        lower_for_gpu(T.PrimFunc("f", (out,), (), body), "cuda")


def test_error_barrier_under_thread_dependent_condition():
    sh = T.Buffer("S_shared", "float32", (IntImm(32),), "shared")
    out = T.Buffer("Out", "float32", (IntImm(128),))

    def inner(bx, tx):
        return T.IfThenElse(tx < 16, T.seq(
            T.Store(sh, tx, IntImm(1).astype("float32")),
            T.Store(out, bx * 32 + tx, BufferLoad(sh, 31 - tx, "float32"))))

    func = _kernel_tir(inner, sh)
    func = T.PrimFunc("f", (out,), (), func.body)
    with pytest.raises(LoweringError, match=r"S_shared: a barrier is needed under the thread-dependent condition"):
        lower_for_gpu(func, "cuda")


def test_barrier_needed_under_uniform_condition_is_placed():
    sh = T.Buffer("S_shared", "float32", (IntImm(32),), "shared")
    out = T.Buffer("Out", "float32", (IntImm(128),))

    def inner(bx, tx):
        return T.IfThenElse(bx < 2, T.seq(
            T.Store(sh, tx, IntImm(1).astype("float32")),
            T.Store(out, bx * 32 + tx, BufferLoad(sh, 31 - tx, "float32"))))

    func = _kernel_tir(inner, sh)
    func = lower_for_gpu(T.PrimFunc("f", (out,), (), func.body), "cuda")
    (k,) = kernels_of(func)
    _, shared, _, body = split_kernel(k)
    assert [b.name for b in shared] == ["S_shared"]
    assert isinstance(body, T.IfThenElse) and isinstance(body.then_case.seq[1], T.Barrier)


def test_error_reduction_across_threads_on_threadidx_y():
    A = te.placeholder((16, 64), name="A")
    k = te.reduce_axis((0, 64), name="k")
    B = te.compute((16,), lambda i: te.sum(A[i, k], axis=k), name="B")
    s = te.create_schedule(B.op)
    s[B].bind(B.op.axis[0], te.thread_axis("blockIdx.x"))
    ko, ki = s[B].split(s[B].op.reduce_axis[0], factor=32)
    s[B].bind(ki, te.thread_axis("threadIdx.y"))  # threadIdx.x is lowered as a thread allreduce
    with pytest.raises(LoweringError, match="threadIdx.x only"):
        lower_for_gpu(lower_state(s.state, [A, B]), "cuda")


def test_error_local_buffer_filled_by_threads_outside_its_allocation():
    A, B, C, s = _vadd()
    AL = s.cache_read(A, "local", [C])
    xo, xi = s[C].split(C.op.axis[0], factor=64)
    s[C].bind(xo, te.thread_axis("blockIdx.x"))
    s[C].bind(xi, te.thread_axis("threadIdx.x"))
    s[AL].compute_at(s[C], xo)
    s[AL].bind(s[AL].op.axis[0], te.thread_axis("threadIdx.x"))
    with pytest.raises(LoweringError, match="local buffer A_local is written inside loop"):
        lower_for_gpu(lower_state(s.state, [A, B, C]), "cuda")


def test_error_local_buffer_in_host_code_around_kernels():
    A, B, C, s = _vadd()
    AL = s.cache_read(A, "local", [C])
    xo, xi = s[C].split(C.op.axis[0], factor=64)
    xio, xii = s[C].split(xi, factor=16)
    s[C].bind(xio, te.thread_axis("blockIdx.x"))
    s[C].bind(xii, te.thread_axis("threadIdx.x"))
    s[AL].compute_at(s[C], xo)  # a serial (host) loop around the kernel
    with pytest.raises(LoweringError, match="local buffer A_local is allocated in host code around kernels"):
        lower_for_gpu(lower_state(s.state, [A, B, C]), "cuda")


# ----------------------------------------------------------------------------- target


def test_default_arch_is_the_devices_compute_capability():
    # nvidia-smi's compute_cap column -> the arch; what is not a known arch falls back to sm_80
    assert arch_of_compute_capability("9.0") == "sm_90" and arch_of_compute_capability(" 8.6\n") == "sm_86"
    assert arch_of_compute_capability("12.7") is None and arch_of_compute_capability("N/A") is None
    assert default_cuda_arch() in CUDA_ARCHS
    if shutil.which("nvidia-smi") is None:
        assert default_cuda_arch() == "sm_80"


def test_cuda_target_default_arch_and_limits():
    t = Target.parse("cuda")
    assert t.arch == default_cuda_arch() and str(t) == "cuda"
    hp = HardwareParams.for_target(Target.parse("cuda -arch=sm_80"))
    assert (hp.max_threads_per_block, hp.warp_size, hp.max_shared_memory_per_block) == (1024, 32, 48 * 1024)
    assert hp.max_dynamic_shared_memory_per_block == 163 * 1024 and hp.registers_per_block == 65536
    assert hp.max_vthread_extent == 8 and hp.max_local_memory_per_block == 2 ** 31 - 1
    h90 = HardwareParams.for_target(Target.parse("cuda -arch=sm_90"))
    assert h90.max_dynamic_shared_memory_per_block == 227 * 1024
    cpu = HardwareParams.for_target(Target.parse("llvm -num-cores=2"))
    assert cpu.max_threads_per_block == 0 and cpu.warp_size == 0


def test_cuda_target_options_override_the_arch():
    text = ("cuda -arch=sm_90 -model=h100 -max_threads_per_block=512 -max_shared_memory_per_block=65536 "
            "-thread_warp_size=32 -registers_per_block=32768")
    t = Target.parse(text)
    assert Target.parse(str(t)) == t and str(t) == text
    hp = HardwareParams.for_target(t)
    assert (hp.max_threads_per_block, hp.max_shared_memory_per_block, hp.registers_per_block) == (512, 65536, 32768)
    assert t.cuda_limits()["max_dynamic_shared_memory_per_block"] == 227 * 1024
    assert Target.parse("cuda -max_threads_per_block=0256").option("max_threads_per_block") == "256"


@pytest.mark.parametrize("text, words", [
    ("cuda -arch=sm_81", ["unknown -arch='sm_81'", "sm_80", "sm_90"]),
    ("cuda -num-cores=4", ["unknown option '-num-cores'", "-arch=", "-max_threads_per_block=",
                           "-max_shared_memory_per_block=", "-thread_warp_size=", "-registers_per_block="]),
    ("cuda -max_threads_per_block=lots", ["-max_threads_per_block must be a positive integer"]),
    ("cuda -thread_warp_size=0", ["-thread_warp_size must be a positive integer"]),
    ("cuda -arch=sm_75 -max_shared_memory_per_block=70000", ["exceeds the 65536 bytes", "sm_75"]),
    ("cuda -arch=sm_80 -arch=sm_90", ["given twice"]),
])
def test_cuda_target_rejects(text, words):
    with pytest.raises(InvalidTargetError) as err:
        Target.parse(text)
    for w in words:
        assert w in str(err.value)


def _vars(e) -> list:
    from scheduler_core.ir.expr_functor import free_vars
    return free_vars(e)
