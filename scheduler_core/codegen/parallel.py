"""Parallel loops: outline the body and run its chunks on our thread pool (or libgomp).

    for (i, m, n) "parallel" { body }
        -->  closure = {m, n, err, next, captured values...}    (stack of the caller)
             pool:  launch(name_parN, &closure, n, num_threads, k)    (thread_pool, the default)
             gomp:  GOMP_parallel(name_parN, &closure, num_threads, 0)
             if (closure.err) return 1

    pool:  void name_parN(i8* closure, i64 c, i64 C)   -- chunk c of C, on whichever thread claimed it
               lo = n*c/C; hi = n*(c+1)/C
               err = name_parN_body(captured..., m + lo, m + hi); if err: closure.err |= err
    gomp:  void name_parN(i8* closure)             -- run by every OpenMP thread
               T = omp_get_num_threads()
               C = min(n, CHUNKS_PER_THREAD * T)   -- C = 1 when T = 1
               while ((c = atomic_fetch_add(&closure.next, 1)) < C)   -- dynamic chunks
                   (chunk c as above)

    i32 name_parN_body(ptr noalias buf..., scalars..., i64 lo, i64 hi)
        for (i = lo; i < hi; i++) body     -- nested parallel loops run serially

The captured values are every buffer pointer and variable the body uses that is
bound outside it (buffers, scalar parameters, outer loop vars, let vars).  The
body is a separate function with ``noalias`` pointer arguments so LLVM keeps the
aliasing facts of the entry function.  This is TVM's ``parallel_launch`` route;
the pool is TVM's own CPU thread pool design, ``gomp`` its ``USE_OPENMP=gnu`` build.

Runtimes.  The build's ``BuildConfig.parallel_runtime`` (``base/build_config.py``; its
default is ``AUTOSCHED_PARALLEL_RUNTIME`` in the environment, read when the config is made)
picks the threads.  ``"pool"`` (the default):
``thread_pool``, where the pool computes ``C = min(n, k*T)`` chunks (``k`` =
:data:`CHUNKS_PER_THREAD`) and the caller returns as soon as every chunk has completed,
whatever the other threads are doing; exported objects and libraries carry a copy of the
pool and need only libc.  ``"gomp"``: libgomp's ``GOMP_parallel``, whose end barrier waits
for every team thread, so on a shared machine the caller also waits for a thread the OS
has parked when no chunk is left for it.

Behaviour on a shared machine.  Chunks are contiguous ranges taken in
turn from an atomic counter (OpenMP's ``schedule(dynamic)``, without libgomp's
loop API), so a thread the OS has parked leaves its share to the others instead
of everyone waiting for its static half at the end barrier.  libgomp's threads
wait by spinning ``GOMP_SPINCOUNT`` pause instructions before sleeping; its
default (300000 when ``OMP_WAIT_POLICY`` is unset, 7 ms or more per wait) burns the
CPU that a preempted team member needs, so :func:`load_libgomp` (run by the first build
that uses the ``gomp`` runtime, never at import) loads libgomp with a short spin
(:data:`SPIN_COUNT`) unless the user chose a policy; the environment is restored right
after, so other OpenMP runtimes loaded later (PyTorch bundles its own) and child
processes keep their defaults.  Measured by ``benchmarks/parallel_load.py`` on a 2-core
machine shared with other work, with
one busy single-thread process of another session: matmul+bias 512^3 went from
about 11x its quiet time (static chunks, default spin) to about 1.9x, conv2d
1x64x56x56 3x3 from about 7x to 1.8x; quiet times within a few percent.
With the pool (same benchmark, benchmarks/results/parallel_load.json, 1-minute load 0.85
before the run; ratios to each configuration's own quiet time, pool vs libgomp with
dynamic chunks): one busy process matmul 2.15x vs 2.34x, conv2d 2.00x vs 2.13x, a 5 us
loop (scale_add_64k) 3.1x vs 33x (static libgomp: 810x); two busy processes 3.28x vs
2.84x, 3.03x vs 3.30x, 1.4x vs 3.7x; quiet times within 2%.  Matmul with two busy
processes was behind libgomp in most runs (10-30%), ahead in some.  Autogroups share the
CPUs between sessions, not threads: a 2-thread program next to one (two) busy sessions
gets about 1 (0.67) CPU, so about 1.9x (3x) is the best any runtime reaches there (the
benchmark measures that floor too).
``BuildConfig(parallel_schedule="static")`` (or ``AUTOSCHED_PARALLEL_SCHEDULE=static`` in the
environment) builds one chunk per thread (``k = 1`` on the pool, the previous launcher on
libgomp).  The spin setting only applies to libgomp when this package loads it.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

import llvmlite.binding as llvm
from llvmlite import ir

from scheduler_core.base.build_config import BuildConfig
from scheduler_core.ir import expr as E
from scheduler_core.ir import expr_functor as EF
from scheduler_core.ir import tir as T
from scheduler_core.ir.stmt_functor import stmt_exprs

from . import llvm_types as L
from . import thread_pool
from .thread_pool_ir import CHUNK_TYPE

# Closure fields: begin, extent, error code, next chunk (atomic counter), captured values...
_BEGIN, _EXTENT, _ERR, _NEXT, _CAPTURED = 0, 1, 2, 3, 4
# Dynamic chunks per thread (fewer when the loop has fewer iterations).
CHUNKS_PER_THREAD = 8
# libgomp's own default spin is 300000 pause iterations (about 7 ms on a Zen 4 core at
# 25 ns each); 3000 is 10-150 us on current x86 cores, long enough to keep the threads
# awake between back-to-back parallel loops.
SPIN_COUNT = 3000
ENV_VARS = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "OMP_NUM_THREADS")

_LOADED: list = []


def libgomp_mapped() -> bool:
    """Whether a libgomp is already mapped into this process (read from /proc/self/maps;
    False where that file cannot be read)."""
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
            return any("libgomp" in line for line in maps)
    except OSError:
        return False


def _load_permanently() -> None:
    if not _LOADED:
        llvm.load_library_permanently(ctypes.util.find_library("gomp") or "libgomp.so.1")
        _LOADED.append(True)


def configure_libgomp_env() -> bool:
    """Load libgomp with ``GOMP_SPINCOUNT`` = :data:`SPIN_COUNT` unless the user set
    ``OMP_WAIT_POLICY`` or ``GOMP_SPINCOUNT`` or a libgomp is already loaded (libgomp
    reads its environment once, when loaded); then nothing is loaded.  The variable is set
    only while libgomp loads, then removed again, so it reaches neither other OpenMP
    runtimes loaded later nor child processes.  Returns whether the short spin was applied.
    """
    if any(os.environ.get(k) for k in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")) or libgomp_mapped():
        return False
    os.environ["GOMP_SPINCOUNT"] = str(SPIN_COUNT)
    try:
        _load_permanently()
    finally:
        del os.environ["GOMP_SPINCOUNT"]
    return True


def load_libgomp() -> bool:
    """Make libgomp's symbols visible to the JIT (once per process), with the short spin of
    :func:`configure_libgomp_env` when the user chose no wait policy.  Called by a build or a
    load of code that uses the ``gomp`` runtime, never at import.  Returns whether the short
    spin was applied by this call.  Raises RuntimeError (llvmlite) when there is no libgomp.
    """
    applied = configure_libgomp_env()
    _load_permanently()
    return applied


def default_num_threads() -> int:
    """Threads a parallel loop built with the default ``num_cores`` (0) runs on here."""
    env = os.environ.get("OMP_NUM_THREADS", "").split(",")[0].strip()
    return int(env) if env.isdigit() and int(env) > 0 else len(os.sched_getaffinity(0))


def captured(body: T.Stmt, em) -> tuple:
    """``(vars, buffers)`` used in ``body`` and bound in the emitter ``em``, first-use order."""
    vs: dict = {}
    bs: dict = {}
    for e in (e for st in T.walk_stmts(body) for e in stmt_exprs(st)):
        for n in EF.walk(e):
            if isinstance(n, E.Var) and n in em.vars:
                vs.setdefault(n, None)
            elif isinstance(n, E.BufferLoad) and n.buffer in em.bufs:
                bs.setdefault(n.buffer, None)
    for s in T.walk_stmts(body):
        if isinstance(s, T.Store) and s.buffer in em.bufs:
            bs.setdefault(s.buffer, None)
    return tuple(vs), tuple(bs)


def emit_parallel(em, loop: T.For) -> None:
    """Emit ``loop`` (kind "parallel") in the emitter ``em`` as a launch on the runtime of
    the build's config (``em.ctx.config``, a BuildConfig: runtime and chunking).

    The loop body is outlined into a function emitted by a new emitter of ``em``'s own
    class (``type(em)``), so this module needs nothing from the statement emitter.
    Sets ``em.ctx.uses_gomp`` when the launch calls libgomp.
    """
    ctx = em.ctx
    config: BuildConfig = ctx.config
    cvars, cbufs = captured(loop.body, em)
    values = [em.bufs[b] for b in cbufs] + [em.vars[v] for v in cvars]
    types = [v.type for v in values]

    body_fn = _outline_body(ctx, loop, cvars, cbufs, types, type(em))
    closure_t = ir.LiteralStructType([L.I64, L.I64, L.I32, L.I64] + types)

    bld = em.builder
    closure = em.entry_alloca(closure_t, 16)
    begin, extent = em.index(loop.min), em.index(loop.extent)
    fields = [begin, extent, ir.Constant(L.I32, 0), ir.Constant(L.I64, 0)] + values
    for i, v in enumerate(fields):
        bld.store(v, _field(bld, closure, closure_t, i))
    threads = ir.Constant(L.I32, ctx.num_threads)
    if config.parallel_runtime == "gomp":
        ctx.uses_gomp = True
        launch_fn = _launcher(ctx, body_fn, closure_t, len(types), config.parallel_schedule)
        gomp = L.declare(em.module, "GOMP_parallel", L.VOID, [L.PTR, L.PTR, L.I32, L.I32])
        bld.call(gomp, [launch_fn, closure, threads, ir.Constant(L.I32, 0)])
    else:
        chunk_fn = _chunk_function(ctx, body_fn, closure_t, len(types))
        per_thread = ir.Constant(L.I32, CHUNKS_PER_THREAD if config.parallel_schedule == "dynamic" else 1)
        bld.call(thread_pool.add_pool(em.module), [chunk_fn, closure, extent, threads, per_thread])
    err = bld.load(_field(bld, closure, closure_t, _ERR), typ=L.I32)
    em.fail_if(bld.icmp_signed("!=", err, ir.Constant(L.I32, 0)), err)  # the chunks' codes, OR-ed


def _field(bld, ptr, struct_t, i: int):
    return bld.gep(ptr, [ir.Constant(L.I32, 0), ir.Constant(L.I32, i)], inbounds=True,
                   source_etype=struct_t)


def _internal_function(module: ir.Module, fnty: ir.FunctionType, name: str) -> ir.Function:
    """A new ``nounwind`` function of ``module`` with internal linkage."""
    fn = ir.Function(module, fnty, name)
    fn.linkage = "internal"
    fn.attributes.add("nounwind")
    return fn


def _outline_body(ctx, loop: T.For, cvars, cbufs, types, emitter_cls) -> ir.Function:
    """``i32 body(captured..., i64 lo, i64 hi)`` running ``loop.body`` for lo <= i < hi."""
    fnty = ir.FunctionType(L.I32, types + [L.I64, L.I64])
    fn = _internal_function(ctx.module, fnty, ctx.fresh("par") + "_body")
    for i in range(len(cbufs)):
        fn.args[i].add_attribute("noalias")
    em = emitter_cls(ctx, fn, in_parallel=True)
    for i, b in enumerate(cbufs):
        em.bufs[b] = fn.args[i]
    for j, v in enumerate(cvars):
        em.vars[v] = fn.args[len(cbufs) + j]
    lo, hi = fn.args[-2], fn.args[-1]
    em.loop(loop.loop_var, lo, hi, lambda: em.stmt(loop.body))
    em.finish()
    return fn


class _ChunkCaller:
    """Calls of the outlined body on chunks of the loop, emitted at ``bld``'s position in a
    chunk function or launcher; ``closure`` points to the caller's closure (``closure_t``)."""

    def __init__(self, bld: ir.IRBuilder, closure, closure_t, body_fn: ir.Function, ncaptured: int):
        self.bld, self.closure, self.closure_t, self.body_fn = bld, closure, closure_t, body_fn
        self.begin, self.extent = self.load(_BEGIN), self.load(_EXTENT)
        self.args = [self.load(_CAPTURED + i) for i in range(ncaptured)]

    def load(self, i: int):
        """The closure's field ``i``."""
        bld = self.bld
        return bld.load(_field(bld, self.closure, self.closure_t, i), typ=self.closure_t.elements[i])

    def call_chunk(self, chunk, nchunks, after: ir.Block) -> None:
        """Run the body on ``[begin + extent*chunk/nchunks, begin + extent*(chunk+1)/nchunks)``
        when that is not empty, OR a failure into the closure's error field, go on at ``after``."""
        bld, one = self.bld, ir.Constant(L.I64, 1)
        lo = bld.sdiv(bld.mul(self.extent, chunk), nchunks)
        hi = bld.sdiv(bld.mul(self.extent, bld.add(chunk, one)), nchunks)
        call_bb, err_bb = bld.append_basic_block("call"), bld.append_basic_block("record_error")
        bld.cbranch(bld.icmp_signed("<", lo, hi), call_bb, after)
        bld.position_at_end(call_bb)
        rc = bld.call(self.body_fn, self.args + [bld.add(self.begin, lo), bld.add(self.begin, hi)])
        bld.cbranch(bld.icmp_signed("!=", rc, ir.Constant(L.I32, 0)), err_bb, after)
        bld.position_at_end(err_bb)
        bld.atomic_rmw("or", _field(bld, self.closure, self.closure_t, _ERR), rc, "monotonic")
        bld.branch(after)


def _chunk_function(ctx, body_fn: ir.Function, closure_t, ncaptured: int) -> ir.Function:
    """``void chunk(ptr closure, i64 c, i64 C)`` (thread_pool_ir.CHUNK_TYPE): runs the body on
    ``[begin + extent*c/C, begin + extent*(c+1)/C)`` and ORs a failure into the closure."""
    fn = _internal_function(ctx.module, CHUNK_TYPE, body_fn.name[:-5])
    bld = ir.IRBuilder(fn.append_basic_block("entry"))
    closure, chunk, nchunks = fn.args
    caller = _ChunkCaller(bld, closure, closure_t, body_fn, ncaptured)
    done_bb = fn.append_basic_block("done")
    caller.call_chunk(chunk, nchunks, done_bb)
    bld.position_at_end(done_bb)
    bld.ret_void()
    return fn


def _launcher(ctx, body_fn: ir.Function, closure_t, ncaptured: int, schedule: str) -> ir.Function:
    """``void launch(ptr closure)``: run by every thread of the team; calls the body on
    this thread's chunks (see the module docstring for the two schedules)."""
    fn = _internal_function(ctx.module, ir.FunctionType(L.VOID, [L.PTR]), body_fn.name[:-5])
    bld = ir.IRBuilder(fn.append_basic_block("entry"))
    closure = fn.args[0]
    one = ir.Constant(L.I64, 1)
    caller = _ChunkCaller(bld, closure, closure_t, body_fn, ncaptured)
    nth = bld.sext(bld.call(L.declare(ctx.module, "omp_get_num_threads", L.I32, []), []), L.I64)
    take_bb = bld.append_basic_block("take")
    run_bb = bld.append_basic_block("run")
    next_bb = bld.append_basic_block("next_chunk")
    done_bb = bld.append_basic_block("done")
    if schedule == "static":  # chunk t of nth
        chunk = bld.sext(bld.call(L.declare(ctx.module, "omp_get_thread_num", L.I32, []), []), L.I64)
        nchunks = nth
        bld.branch(take_bb)
        bld.position_at_end(take_bb)
    else:  # chunks = min(extent, CHUNKS_PER_THREAD * nth) (1 on one thread), taken in turn
        many = bld.mul(nth, ir.Constant(L.I64, CHUNKS_PER_THREAD))
        want = bld.select(bld.icmp_signed(">", nth, one), many, one)
        nchunks = bld.select(bld.icmp_signed("<", caller.extent, want), caller.extent, want)
        bld.branch(take_bb)
        bld.position_at_end(take_bb)
        chunk = bld.atomic_rmw("add", _field(bld, closure, closure_t, _NEXT), one, "monotonic")
    bld.cbranch(bld.icmp_signed("<", chunk, nchunks), run_bb, done_bb)
    bld.position_at_end(run_bb)  # here 0 <= chunk < nchunks, so nchunks > 0
    caller.call_chunk(chunk, nchunks, next_bb)
    bld.position_at_end(next_bb)
    bld.branch(done_bb if schedule == "static" else take_bb)
    bld.position_at_end(done_bb)
    bld.ret_void()
    return fn
