"""Run a GPU-scheduled program on the CPU with CUDA's execution semantics.

    kernel-form PrimFunc (docs/gpu_kernel_form.md) --gpu_to_cpu--> CPU loop program
        --run_passes, compile_primfunc (LLVM)--> Module --emulate(func, *arrays)--> results

The transformation is MCUDA's (J. A. Stratton, S. S. Stone, W. W. Hwu, "MCUDA: An
Efficient Implementation of CUDA Kernels for Multi-Core CPUs", LCPC 2008): a kernel's
threads become loops, and ``__syncthreads()`` becomes the boundary between two such loops.

* Block loops (``blockIdx.*``) become serial loops over the whole grid; the ``shared``
  Allocates between them and the thread loops stay there, so each block has one copy.
* Thread loops (``threadIdx.*``) become serial loops over every thread of the block
  ("thread loops").  At each ``Barrier`` the thread loop is split (loop fission): every
  thread runs the code before the barrier before any thread runs the code after it.
  A barrier may sit inside serial loops, ``IfThenElse`` and ``LetStmt``s of the per-thread
  code when their control flow is the same for every thread (thread-uniform: the loop
  bounds / condition use no ``threadIdx`` variable and load no ``local`` buffer); such a
  statement moves outside the thread loops and the fission continues inside it
  (recursively).  A barrier under thread-dependent control flow raises ``LoweringError``:
  CUDA leaves that undefined (a deadlock on real hardware).
* Values that live across a fission point are expanded to one copy per thread: a
  ``local`` Allocate containing a barrier gets a leading dimension of the block's thread
  count (``buf[t, ...]``, flat index ``t * size + index``); a ``LetStmt`` containing a
  barrier whose value depends on the thread becomes a ``local`` buffer ``<var>_per_thread``
  of one element per thread, stored before the split and loaded where the var was used.
  ``t`` is the flat thread id ``x + bx * (y + by * z)`` (x fastest), an int32 expression.
* An ``auto_unroll_max_step`` pragma on a block or thread loop moves onto the innermost
  thread loop of each piece, so it scopes the per-thread code as on the GPU and the
  emulator's thread loops stay loops.
* ``vthread`` loops become serial loops; ``unrolled``/``vectorized`` loops inside a thread
  loop keep their kind (the unroll/vectorize passes run afterwards); a ``vectorized`` loop
  containing a barrier becomes serial.

Races (``check_races=True``).  A schedule that misses a barrier can give the right answer
on the CPU by luck of the serial thread order, so the race check instruments every access
to a ``shared`` buffer.  Each shared buffer ``S`` (of ``size`` elements) gets two int32
shadow arrays of the same size, reset to -1 at the start of each block and at every
barrier (the start of a barrier interval): ``S_writer[i]``, the thread that wrote element
``i`` in the current interval (-2: several threads), and ``S_reader[i]``, likewise for
reads.  A read of ``S[i]`` by thread ``t`` when another thread wrote ``S[i]`` in the same
interval (read-after-write), or a write by ``t`` when another thread read ``S[i]`` in the
same interval (write-after-read), is a race: the GPU may run the two threads in either
order.  Two threads writing the same element is not reported (redundant cooperative
fetches write the same value), unless a thread then reads it.  An access outside the shared
buffer is reported too.  The check is sound for these two kinds and these buffers: every
execution of an access is recorded, so any read and write of one element by two threads
between the same two barriers is caught, whatever the serial thread order (intervals
spanning a fission point or a loop's back edge are handled, since shadows reset only at
real barriers).  Loads under a ``Select`` count only when their branch is taken; vector
accesses are checked lane by lane.  Global buffers are not instrumented, nor are loads in
thread-uniform control moved out of the thread loops (a hoisted loop's bounds, condition
or let value).  The first race is
recorded (with the count of all of them) in an extra int32 parameter ``race_report`` of 8
elements, appended after the buffer parameters: ``[count, kernel, buffer id, element,
kind (0 read-after-write, 1 write-after-read, 2 out of bounds), other thread, thread,
flat block id]``; :func:`emulate` turns a nonzero count into ``RaceConditionError``
naming the buffer.

Shapes and dtypes are those of the input: same parameter buffers (plus ``race_report``
when checking), same scalar params, any dtype; thread extents may be symbolic (the
expanded buffers then live on the heap).  Errors: ``LoweringError`` for a program not in
kernel form (a GPU tag inside the per-thread code, a ``shared`` Allocate inside the thread
loops, a barrier outside a kernel) or a barrier under thread-dependent control flow;
``RaceConditionError`` (a ``DeviceRuntimeError``) from :func:`emulate` with
``check_races=True``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from scheduler_core.base.errors import DeviceRuntimeError, LoweringError
from scheduler_core.base.gpu_spec import BLOCK_TAGS, GPU_TAGS, THREAD_TAGS
from scheduler_core.ir import expr as E
from scheduler_core.ir import expr_functor as EF
from scheduler_core.ir import simplify as ES
from scheduler_core.ir import tir as T
from scheduler_core.ir.stmt_functor import map_stmt
from scheduler_core.lowering.kernel_form import Uniform, has_barrier

RACE_PARAM = "race_report"
UNROLL_PRAGMA = "auto_unroll_max_step"
RACE_SLOTS = 8
RACE_KINDS = ("read-after-write", "write-after-read", "out-of-bounds")


class RaceConditionError(DeviceRuntimeError):
    """Two threads of a block access one shared element between the same two barriers."""


def is_barrier(s: Any) -> bool:
    """``s`` is a ``tir.Barrier`` (``__syncthreads()``)."""
    return isinstance(s, T.Barrier)


def _has_thread_loop(s: T.Stmt) -> bool:
    return any(isinstance(n, T.For) and n.kind in THREAD_TAGS for n in T.walk_stmts(s))


def _subst(s: T.Stmt, mapping: dict) -> T.Stmt:
    if not mapping:
        return s
    return map_stmt(s, f_expr=lambda e: EF.substitute(e, mapping))


def _lanes(e: E.Expr) -> int:
    if isinstance(e, (E.Ramp, E.Broadcast)):
        return e.lanes
    if isinstance(e, E.BufferLoad):
        return e.lanes
    return max([1] + [_lanes(c) for c in EF.children(e)])


def _lane(e: E.Expr, l: int) -> E.Expr:
    """Lane ``l`` of the vector expression ``e`` as a scalar expression."""
    if isinstance(e, E.Ramp):
        return ES.simplify(e.base + e.stride * l)
    if isinstance(e, E.Broadcast):
        return e.value
    if isinstance(e, E.BufferLoad):
        return E.BufferLoad(e.buffer, _lane(e.index, l), e.dtype, 1)
    kids = EF.children(e)
    if not kids:
        return e
    return EF.rebuild(e, tuple(_lane(c, l) for c in kids))


def _add_offset(index: E.Expr, off: E.Expr) -> E.Expr:
    """``off + index`` for a scalar or vector ``index``."""
    n = _lanes(index)
    if n == 1:
        return off + index
    if isinstance(index, E.Ramp):
        return E.Ramp(off + index.base, index.stride, index.lanes, index.dtype)
    return E.BinaryOp("add", E.Broadcast(off, n, off.dtype), index, index.dtype)


def _rebase_buffer(s: T.Stmt, old: T.Buffer, new: T.Buffer, off: E.Expr) -> T.Stmt:
    """Accesses to ``old`` become accesses to ``new`` at ``off + index``."""

    def fn(n: E.Expr) -> E.Expr | None:
        if isinstance(n, E.BufferLoad) and n.buffer is old:
            return E.BufferLoad(new, _add_offset(EF.transform(n.index, fn), off), n.dtype, n.lanes)
        return None

    def fe(e: E.Expr) -> E.Expr:
        return EF.transform(e, fn)

    def fs(st: T.Stmt) -> T.Stmt | None:  # (its expressions are rewritten already)
        if isinstance(st, T.Store) and st.buffer is old:
            return T.Store(new, _add_offset(st.index, off), st.value, st.predicate)
        return None

    return map_stmt(s, f_stmt=fs, f_expr=fe)


def _size(buf: T.Buffer) -> E.Expr:
    return ES.product(buf.shape) if buf.shape else E.const(1)


def _and(a: E.Expr | None, b: E.Expr) -> E.Expr:
    return b if a is None else E.LogicalOp("and", a, b)


def _loop(var: E.Var, extent: Any, body: T.Stmt, kind: str = "serial", start: Any = 0) -> T.For:
    return T.For(var, E.as_expr(start), E.as_expr(extent), kind, body)


# ---------------------------------------------------------------------------
# Race-check instrumentation
# ---------------------------------------------------------------------------

@dataclass
class _Shadow:
    buf: T.Buffer  # the shared buffer
    ident: int  # its index in attrs["race_buffers"]
    writer: T.Buffer
    reader: T.Buffer

    @property
    def size(self) -> E.Expr:
        return _size(self.buf)

    def reset(self) -> T.Stmt:
        j = E.Var(f"{self.buf.name}_rj")
        minus1 = E.const(-1)
        return _loop(j, self.size, T.seq(T.Store(self.writer, j, minus1), T.Store(self.reader, j, minus1)))


@dataclass
class _RaceCtx:
    report: T.Buffer
    kernel: int = 0
    block_id: E.Expr = field(default_factory=lambda: E.const(0))

    def record(self, kind: int, sh: _Shadow, index: E.Expr, other: E.Expr, tid: E.Expr) -> T.Stmt:
        r = self.report
        values = [E.const(self.kernel), E.const(sh.ident), index, E.const(kind), other, tid, self.block_id]
        first = T.seq(*(T.Store(r, E.const(i + 1), v) for i, v in enumerate(values)))
        count = E.BufferLoad(r, E.const(0), "int32")
        return T.seq(T.IfThenElse(count == 0, first), T.Store(r, E.const(0), count + 1))


def _shared_reads(e: E.Expr, cond: E.Expr | None, shadows: dict, out: list) -> None:
    """Collect ``(load, condition)`` for the loads of shadowed buffers in ``e``."""
    if isinstance(e, E.Select):
        _shared_reads(e.cond, cond, shadows, out)
        _shared_reads(e.true_value, _and(cond, e.cond), shadows, out)
        _shared_reads(e.false_value, _and(cond, E.Not(e.cond)), shadows, out)
        return
    if isinstance(e, E.BufferLoad):
        _shared_reads(e.index, cond, shadows, out)
        if e.buffer in shadows:
            out.append((e, cond))
        return
    for c in EF.children(e):
        _shared_reads(c, cond, shadows, out)


class _Instrument:
    """Adds the shadow-array checks to barrier-free per-thread code."""

    def __init__(self, shadows: dict, ctx: _RaceCtx, tid: E.Expr):
        self.shadows = shadows
        self.ctx = ctx
        self.tid = tid

    def _per_lane(self, index: E.Expr, cond: E.Expr | None):
        n = max(_lanes(index), 1 if cond is None else _lanes(cond))
        if n == 1:
            yield index, cond
            return
        for l in range(n):
            c = None if cond is None else (_lane(cond, l) if _lanes(cond) > 1 else cond)
            yield _lane(index, l), c

    def _guarded(self, sh: _Shadow, index: E.Expr, cond: E.Expr | None, body: T.Stmt) -> T.Stmt:
        inb = E.LogicalOp("and", index >= 0, index < sh.size)
        oob = self.ctx.record(2, sh, index, E.const(-1), self.tid)
        st = T.IfThenElse(inb, body, oob)
        return st if cond is None else T.IfThenElse(cond, st)

    def read_checks(self, exprs: list, cond: E.Expr | None = None) -> list:
        found: list = []
        for e in exprs:
            if e is not None:
                _shared_reads(e, cond, self.shadows, found)
        return [self._access_check(self.shadows[load.buffer], idx, lc, 0)
                for load, c in found for idx, lc in self._per_lane(load.index, c)]

    def write_check(self, s: T.Store) -> list:
        sh = self.shadows.get(s.buffer)
        if sh is None:
            return []
        return [self._access_check(sh, idx, lc, 1) for idx, lc in self._per_lane(s.index, s.predicate)]

    def _access_check(self, sh: _Shadow, idx: E.Expr, cond: E.Expr | None, kind: int) -> T.Stmt:
        """The check of one access of element ``idx``: ``kind`` 0, a read (a race when another
        thread wrote it), 1, a write (a race when another thread read it); then the access is
        recorded in the reader (writer) shadow: this thread, or -2 for several."""
        w = E.BufferLoad(sh.writer, idx, "int32")
        r = E.BufferLoad(sh.reader, idx, "int32")
        other, mine, mine_buf = (w, r, sh.reader) if kind == 0 else (r, w, sh.writer)
        tid = self.tid
        raced = E.LogicalOp("and", other != -1, other != tid)
        body = T.seq(
            T.IfThenElse(raced, self.ctx.record(kind, sh, idx, other, tid)),
            T.Store(mine_buf, idx, E.select(E.LogicalOp("or", mine == -1, mine == tid), tid, E.const(-2))),
        )
        return self._guarded(sh, idx, cond, body)

    def stmt(self, s: T.Stmt) -> T.Stmt:
        if isinstance(s, T.Store):
            pre = self.read_checks([s.index, s.value], s.predicate)
            pre = self.read_checks([s.predicate]) + pre
            return T.seq(*pre, *self.write_check(s), s)
        if isinstance(s, T.For):
            pre = self.read_checks([s.min, s.extent])
            kind = "serial" if s.kind == "vectorized" else s.kind
            return T.seq(*pre, replace(s, kind=kind, body=self.stmt(s.body)))
        if isinstance(s, T.IfThenElse):
            pre = self.read_checks([s.cond])
            other = None if s.else_case is None else self.stmt(s.else_case)
            return T.seq(*pre, replace(s, then_case=self.stmt(s.then_case), else_case=other))
        if isinstance(s, T.SeqStmt):
            return T.seq(*(self.stmt(c) for c in s.seq)) if s.seq else s
        if isinstance(s, T.LetStmt):
            return T.seq(*self.read_checks([s.value]), replace(s, body=self.stmt(s.body)))
        if isinstance(s, T.Allocate):
            return replace(s, body=self.stmt(s.body))
        if isinstance(s, T.Evaluate):
            return T.seq(*self.read_checks([s.value]), s)
        return s


# ---------------------------------------------------------------------------
# The transformation
# ---------------------------------------------------------------------------

@dataclass
class _Thread:
    var: E.Var
    min: E.Expr
    extent: E.Expr
    kind: str


class _Region:
    """The per-thread code of one thread-loop nest, turned into block-level CPU code."""

    def __init__(self, conv: _Converter, threads: list, shadows: dict):
        self.conv = conv
        self.threads = threads  # outermost first
        self.shadows = shadows
        self.uniform = Uniform({t.var for t in threads})  # whether an expression is the same on every thread
        tid: E.Expr = E.const(0)
        nthreads: E.Expr = E.const(1)
        for t in reversed(threads):  # innermost (x) varies fastest
            tid = tid + (t.var - t.min) * nthreads
            nthreads = nthreads * t.extent
        self.tid = ES.simplify(tid)
        self.nthreads = ES.simplify(nthreads)

    # -- helpers -------------------------------------------------------------
    def _legalize(self, s: T.Stmt) -> T.Stmt:
        def fs(st: T.Stmt) -> T.Stmt | None:
            return replace(st, kind="serial") if isinstance(st, T.For) and st.kind == "vthread" else None
        return map_stmt(s, f_stmt=fs)

    def wrap(self, s: T.Stmt) -> T.Stmt:
        """Barrier-free per-thread code ``s`` run by every thread of the block in turn."""
        s = self._legalize(s)
        if self.conv.race is not None and self.shadows:
            s = _Instrument(self.shadows, self.conv.race, self.tid).stmt(s)
        fresh = {t.var: E.Var(t.var.name, t.var.dtype) for t in self.threads}
        s = _subst(s, fresh)
        pragma = self.conv.pragma
        for k, t in enumerate(reversed(self.threads)):
            ann = {UNROLL_PRAGMA: pragma} if k == 0 and pragma is not None else {}
            s = T.For(fresh[t.var], t.min, t.extent, "serial", s, ann)
        return s

    def sync(self) -> T.Stmt:
        """What a barrier leaves: the start of a new interval for the race check."""
        if self.conv.race is None or not self.shadows:
            return T.SeqStmt(())
        return T.seq(*(sh.reset() for sh in self.shadows.values()))

    # -- fission -------------------------------------------------------------
    def convert(self, s: T.Stmt) -> T.Stmt:
        if is_barrier(s):
            return self.sync()
        if not has_barrier(s):
            return self.wrap(s)
        if isinstance(s, T.SeqStmt):
            out: list = []
            seg: list = []

            def flush() -> None:
                if seg:
                    out.append(self.wrap(T.seq(*seg)))
                    seg.clear()

            for c in s.seq:
                if is_barrier(c) or has_barrier(c):
                    flush()
                    out.append(self.convert(c))
                else:
                    seg.append(c)
            flush()
            return T.seq(*out) if out else T.SeqStmt(())
        if isinstance(s, T.For):
            if not (self.uniform(s.min) and self.uniform(s.extent)):
                raise LoweringError(
                    f"barrier inside loop {s.loop_var.name} whose bounds [{s.min}, {s.min} + {s.extent}) "
                    f"depend on the thread: not every thread would reach it")
            kind = "unrolled" if s.kind == "unrolled" else "serial"
            return T.For(s.loop_var, s.min, s.extent, kind, self.convert(s.body), dict(s.annotations))
        if isinstance(s, T.IfThenElse):
            if not self.uniform(s.cond):
                raise LoweringError(
                    f"barrier under the thread-dependent condition {s.cond}: not every thread would reach it")
            other = None if s.else_case is None else self.convert(s.else_case)
            return T.IfThenElse(s.cond, self.convert(s.then_case), other, s.likely)
        if isinstance(s, T.LetStmt):
            if self.uniform(s.value):
                return T.LetStmt(s.var, s.value, self.convert(s.body))
            buf = T.Buffer(f"{s.var.name}_per_thread", s.var.dtype, (self.nthreads,), "local")
            load = E.BufferLoad(buf, self.tid, s.var.dtype)
            body = _subst(s.body, {s.var: load})
            return T.Allocate(buf, T.seq(self.wrap(T.Store(buf, self.tid, s.value)), self.convert(body)))
        if isinstance(s, T.Allocate):
            if s.buffer.scope == "shared":
                raise LoweringError(f"shared buffer {s.buffer.name} is allocated inside the thread loops; "
                                    f"the kernel form allocates it between the block and thread loops")
            old = s.buffer
            new = T.Buffer(old.name, old.dtype, (self.nthreads, *old.shape), old.scope)
            body = _rebase_buffer(s.body, old, new, self.tid * _size(old))
            return T.Allocate(new, self.convert(body))
        raise LoweringError(f"gpu emulation: a barrier inside a {type(s).__name__}")


class _Converter:
    def __init__(self, func: T.PrimFunc, check_races: bool):
        self.func = func
        self.race: _RaceCtx | None = None
        self.race_buffers: list = []
        self.kernel = -1
        self.pragma: Any = None  # the kernel's auto_unroll_max_step, moved onto the per-thread code
        if check_races:
            self.race = _RaceCtx(T.Buffer(RACE_PARAM, "int32", (RACE_SLOTS,)))

    # -- host level ------------------------------------------------------------
    def host(self, s: T.Stmt) -> T.Stmt:
        if isinstance(s, T.For) and s.kind in GPU_TAGS:
            return self.kernel_start(s)
        if isinstance(s, T.SeqStmt):
            return T.SeqStmt(tuple(self.host(c) for c in s.seq))
        if isinstance(s, (T.Allocate, T.LetStmt)):
            return replace(s, body=self.host(s.body))
        if isinstance(s, T.For):
            kind = "serial" if s.kind == "vthread" else s.kind
            return replace(s, kind=kind, body=self.host(s.body))
        if isinstance(s, T.IfThenElse):
            other = None if s.else_case is None else self.host(s.else_case)
            return replace(s, then_case=self.host(s.then_case), else_case=other)
        if is_barrier(s):
            raise LoweringError("barrier outside a kernel (not under blockIdx/threadIdx loops)")
        return s

    def kernel_start(self, s: T.Stmt) -> T.Stmt:
        self.kernel += 1
        self.pragma = None
        blocks: list = []
        body = self.block(s, blocks, {})
        return body

    # -- block level -----------------------------------------------------------
    def block(self, s: T.Stmt, blocks: list, shadows: dict) -> T.Stmt:
        if isinstance(s, T.For) and s.kind in BLOCK_TAGS:
            blocks = blocks + [s]
            ann = dict(s.annotations)
            if UNROLL_PRAGMA in ann and _has_thread_loop(s.body):
                # the pragma scopes the per-thread code, not the emulator's thread loops
                self.pragma = ann.pop(UNROLL_PRAGMA)
            return T.For(s.loop_var, s.min, s.extent, "serial", self.block(s.body, blocks, shadows), ann)
        if self.race is not None:
            bid: E.Expr = E.const(0)
            stride: E.Expr = E.const(1)
            for b in reversed(blocks):
                bid = bid + (b.loop_var - b.min) * stride
                stride = stride * b.extent
            self.race.kernel = self.kernel
            self.race.block_id = ES.simplify(bid)
        if isinstance(s, T.Allocate) and s.buffer.scope == "shared" and self.race is not None:
            buf = s.buffer
            w = T.Buffer(f"{buf.name}_writer", "int32", (_size(buf),), "local")
            r = T.Buffer(f"{buf.name}_reader", "int32", (_size(buf),), "local")
            sh = _Shadow(buf, len(self.race_buffers), w, r)
            self.race_buffers.append(buf.name)
            inner = self.block(s.body, blocks, {**shadows, buf: sh})
            return T.Allocate(buf, T.Allocate(w, T.Allocate(r, T.seq(sh.reset(), inner))))
        if isinstance(s, (T.Allocate, T.LetStmt)):
            return replace(s, body=self.block(s.body, blocks, shadows))
        if isinstance(s, T.SeqStmt):
            region = _Region(self, [], shadows)
            return T.seq(*(region.sync() if is_barrier(c) else self.block(c, blocks, shadows)
                           for c in s.seq))
        if isinstance(s, T.For) and s.kind in THREAD_TAGS:
            threads: list = []
            cur: T.Stmt = s
            while isinstance(cur, T.For) and cur.kind in THREAD_TAGS:
                if any(t.kind == cur.kind for t in threads):
                    raise LoweringError(f"thread tag {cur.kind} bound twice in one kernel")
                threads.append(_Thread(cur.loop_var, cur.min, cur.extent, cur.kind))
                if UNROLL_PRAGMA in cur.annotations:
                    self.pragma = cur.annotations[UNROLL_PRAGMA]
                cur = cur.body
            return self.region(threads, cur, shadows)
        return self.region([], s, shadows)

    def region(self, threads: list, body: T.Stmt, shadows: dict) -> T.Stmt:
        for n in T.walk_stmts(body):
            if isinstance(n, T.For) and n.kind in GPU_TAGS:
                raise LoweringError(f"loop {n.loop_var.name} bound to {n.kind} inside the per-thread code "
                                    f"of a kernel (kernel form: block loops, shared allocations, thread loops)")
            if isinstance(n, T.Allocate) and n.buffer.scope == "shared":
                raise LoweringError(f"shared buffer {n.buffer.name} is allocated inside the thread loops; "
                                    f"the kernel form allocates it between the block and thread loops")
        return _Region(self, threads, shadows).convert(body)


def gpu_to_cpu(func: T.PrimFunc, check_races: bool = False) -> T.PrimFunc:
    """The CPU loop program that runs the kernel-form ``func`` with CUDA's semantics.

    Parameters
    ----------
    func : PrimFunc in kernel form (docs/gpu_kernel_form.md); unpassed or after run_passes.
    check_races : instrument shared-memory accesses (see the module docstring); the result
        then takes an extra int32[8] buffer ``race_report`` after the buffer parameters and
        ``attrs["race_buffers"]`` lists the shared buffers by id.

    Returns a PrimFunc without GPU loops or barriers, ``attrs["target_kind"] = "llvm"`` and
    ``attrs["emulates"] = "cuda"``.  Raises LoweringError (see the module docstring).
    """
    conv = _Converter(func, check_races)
    body = conv.host(func.body)
    params = tuple(func.params)
    attrs = {**func.attrs, "target_kind": "llvm", "emulates": "cuda"}
    if conv.race is not None:
        params = params + (conv.race.report,)
        attrs["race_buffers"] = list(conv.race_buffers)
    return T.PrimFunc(func.name, params, tuple(func.scalar_params), body, attrs)


def race_message(func: T.PrimFunc, report: np.ndarray, race_buffers: list) -> str:
    """The text of a race report (``report``: the ``race_report`` array after a run)."""
    count, kernel, buf, elem, kind, other, tid, block = (int(x) for x in report[:RACE_SLOTS])
    kernels = func.attrs.get("kernels") or []
    kname = kernels[kernel]["name"] if kernel < len(kernels) and isinstance(kernels[kernel], dict) \
        and "name" in kernels[kernel] else f"kernel {kernel}"
    name = race_buffers[buf] if 0 <= buf < len(race_buffers) else f"#{buf}"
    who = "several threads" if other == -2 else f"thread {other}"
    if kind == 0:
        what = f"thread {tid} reads element {elem} written by {who}"
    elif kind == 1:
        what = f"thread {tid} writes element {elem} read by {who}"
    else:
        what = f"thread {tid} accesses element {elem}, outside the buffer"
    extra = "" if kind == 2 else " in the same barrier interval (a missing __syncthreads()?)"
    return (f"{RACE_KINDS[kind]} race on shared buffer {name!r} in {kname}, block {block}: "
            f"{what}{extra}; {count} racing access(es) in all")
