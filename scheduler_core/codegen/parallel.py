"""Parallel loops: outline the body and run it with libgomp's ``GOMP_parallel``.

    for (i, m, n) "parallel" { body }
        -->  closure = {m, n, err, captured values...}          (stack of the caller)
             GOMP_parallel(name_parN, &closure, num_threads, 0)
             if (closure.err) return 1

    void name_parN(i8* closure)             -- run by every OpenMP thread
        t = omp_get_thread_num(); T = omp_get_num_threads()
        lo = m + n*t/T; hi = m + n*(t+1)/T  -- a static contiguous chunk
        err = name_parN_body(captured..., lo, hi); if err: closure.err = err

    i32 name_parN_body(ptr noalias buf..., scalars..., i64 lo, i64 hi)
        for (i = lo; i < hi; i++) body     -- nested parallel loops run serially

The captured values are every buffer pointer and variable the body uses that is
bound outside it (buffers, scalar parameters, outer loop vars, let vars).  The
body is a separate function with ``noalias`` pointer arguments so LLVM keeps the
aliasing facts of the entry function.  This is TVM's ``parallel_launch`` route
with OpenMP as the thread pool (``USE_OPENMP=gnu``).
"""

from __future__ import annotations

import ctypes
import ctypes.util

import llvmlite.binding as llvm
from llvmlite import ir

from scheduler_core.ir import expr as E
from scheduler_core.ir import expr_functor as EF
from scheduler_core.ir import tir as T

from . import llvm_types as L

_LOADED: list = []


def load_libgomp() -> None:
    """Make libgomp's symbols visible to the JIT (once per process)."""
    if not _LOADED:
        llvm.load_library_permanently(ctypes.util.find_library("gomp") or "libgomp.so.1")
        _LOADED.append(True)


def captured(body: T.Stmt, em) -> tuple:
    """``(vars, buffers)`` used in ``body`` and bound in the emitter ``em``, first-use order."""
    vs: dict = {}
    bs: dict = {}
    for e in _stmt_exprs(body):
        for n in EF.walk(e):
            if isinstance(n, E.Var) and n in em.vars:
                vs.setdefault(n, None)
            elif isinstance(n, E.BufferLoad) and n.buffer in em.bufs:
                bs.setdefault(n.buffer, None)
    for s in T.walk_stmts(body):
        if isinstance(s, T.Store) and s.buffer in em.bufs:
            bs.setdefault(s.buffer, None)
    return tuple(vs), tuple(bs)


def _stmt_exprs(body: T.Stmt):
    for s in T.walk_stmts(body):
        if isinstance(s, T.Store):
            yield s.index
            yield s.value
            if s.predicate is not None:
                yield s.predicate
        elif isinstance(s, T.For):
            yield s.min
            yield s.extent
        elif isinstance(s, T.IfThenElse):
            yield s.cond
        elif isinstance(s, (T.LetStmt, T.Evaluate)):
            yield s.value
        elif isinstance(s, T.Allocate):
            yield from (E.as_expr(d) for d in s.buffer.shape)


def emit_parallel(em, loop: T.For) -> None:
    """Emit ``loop`` (kind "parallel") in the emitter ``em`` as a GOMP_parallel launch.

    The loop body is outlined into a function emitted by a new emitter of ``em``'s own
    class (``type(em)``), so this module needs nothing from the statement emitter.
    """

    ctx = em.ctx
    ctx.uses_parallel = True
    cvars, cbufs = captured(loop.body, em)
    values = [em.bufs[b] for b in cbufs] + [em.vars[v] for v in cvars]
    types = [v.type for v in values]

    body_fn = _outline_body(ctx, loop, cvars, cbufs, types, type(em))
    closure_t = ir.LiteralStructType([L.I64, L.I64, L.I32] + types)
    launch_fn = _launcher(ctx, body_fn, closure_t, len(types))

    bld = em.builder
    closure = em.entry_alloca(closure_t, 16)
    begin = em.index(loop.min)
    fields = [begin, em.index(loop.extent), ir.Constant(L.I32, 0)] + values
    for i, v in enumerate(fields):
        bld.store(v, _field(bld, closure, closure_t, i))
    gomp = L.declare(em.module, "GOMP_parallel", L.VOID, [L.PTR, L.PTR, L.I32, L.I32])
    bld.call(gomp, [launch_fn, closure, ir.Constant(L.I32, ctx.num_threads),
                    ir.Constant(L.I32, 0)])
    err = bld.load(_field(bld, closure, closure_t, 2), typ=L.I32)
    em.fail_if(bld.icmp_signed("!=", err, ir.Constant(L.I32, 0)))


def _field(bld, ptr, struct_t, i: int):
    return bld.gep(ptr, [ir.Constant(L.I32, 0), ir.Constant(L.I32, i)], inbounds=True,
                   source_etype=struct_t)


def _outline_body(ctx, loop: T.For, cvars, cbufs, types, emitter_cls) -> ir.Function:
    """``i32 body(captured..., i64 lo, i64 hi)`` running ``loop.body`` for lo <= i < hi."""
    fnty = ir.FunctionType(L.I32, types + [L.I64, L.I64])
    fn = ir.Function(ctx.module, fnty, ctx.fresh("par") + "_body")
    fn.linkage = "internal"
    fn.attributes.add("nounwind")
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


def _launcher(ctx, body_fn: ir.Function, closure_t, ncaptured: int) -> ir.Function:
    """``void launch(ptr closure)``: this thread's static chunk, then the body."""
    fn = ir.Function(ctx.module, ir.FunctionType(L.VOID, [L.PTR]), body_fn.name[:-5])
    fn.linkage = "internal"
    fn.attributes.add("nounwind")
    bld = ir.IRBuilder(fn.append_basic_block("entry"))
    closure = fn.args[0]

    def load(i, t):
        return bld.load(_field(bld, closure, closure_t, i), typ=t)

    begin, extent = load(0, L.I64), load(1, L.I64)
    tid = bld.sext(bld.call(L.declare(ctx.module, "omp_get_thread_num", L.I32, []), []), L.I64)
    nth = bld.sext(bld.call(L.declare(ctx.module, "omp_get_num_threads", L.I32, []), []), L.I64)
    lo = bld.sdiv(bld.mul(extent, tid), nth)
    hi = bld.sdiv(bld.mul(extent, bld.add(tid, ir.Constant(L.I64, 1))), nth)
    run_bb = bld.append_basic_block("run")
    err_bb = bld.append_basic_block("record_error")
    done_bb = bld.append_basic_block("done")
    bld.cbranch(bld.icmp_signed("<", lo, hi), run_bb, done_bb)
    bld.position_at_end(run_bb)
    args = [load(3 + i, closure_t.elements[3 + i]) for i in range(ncaptured)]
    rc = bld.call(body_fn, args + [bld.add(begin, lo), bld.add(begin, hi)])
    bld.cbranch(bld.icmp_signed("!=", rc, ir.Constant(L.I32, 0)), err_bb, done_bb)
    bld.position_at_end(err_bb)
    bld.atomic_rmw("or", _field(bld, closure, closure_t, 2), rc, "monotonic")
    bld.branch(done_bb)
    bld.position_at_end(done_bb)
    bld.ret_void()
    return fn
