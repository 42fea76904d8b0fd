"""Statement code generation: one LLVM function body from a ``tir.Stmt``.

    FunctionEmitter(module ctx, ir.Function) .stmt(body) -> basic blocks

Loops count in ``i64`` (``for_header`` with a phi, ``for_body``, ``for_end``);
``parallel`` loops are outlined (see ``parallel``); GPU loop kinds raise
BuildError.  ``Allocate``: up to 64 KiB of constant size is an ``alloca`` in
the entry block (align 64); larger or symbolic sizes use ``posix_memalign``
(align 64) and ``free`` at the end of the body.  A failed allocation frees the
heap buffers live at that point and returns :data:`HEAP_ALLOCATION_FAILED` from the function.
A ``CheckedIndex`` out of its range (a gathered index) reads element 0 instead and makes the
function return :data:`INDEX_OUT_OF_BOUNDS` when it ends (clamp-and-flag: the flag is a
local of each function, OR-ed over the lanes, so vectorized loops stay vectorized).  Return
codes are bits: a parallel loop ORs the codes of its chunks into the caller's.
"""

from __future__ import annotations

from llvmlite import ir

from scheduler_core.base.build_config import BuildConfig
from scheduler_core.base.errors import HEAP_ALLOCATION_FAILED, INDEX_OUT_OF_BOUNDS, BuildError
from scheduler_core.base.gpu_spec import GPU_TAGS
from scheduler_core.ir import expr as E
from scheduler_core.ir import simplify as ES
from scheduler_core.ir import tir as T

from . import llvm_types as L
from .llvm_expr import ExprEmitter
from .parallel import emit_parallel

STACK_LIMIT_BYTES = 64 * 1024
ALLOC_ALIGN = 64


class ModuleContext:
    """What the functions of one module share: the module, target, build config and name counter."""

    def __init__(self, module: ir.Module, name: str, num_threads: int, vector_bytes: int = 64,
                 config: BuildConfig | None = None):
        self.module = module
        self.vector_bytes = vector_bytes  # the build target's widest vector (bounds libmvec variants)
        self.name = name
        self.num_threads = num_threads
        self.config = BuildConfig.resolve(config)  # the parallel runtime and chunking
        self.counter = 0
        self.uses_gomp = False  # a parallel loop launched on libgomp (which the JIT must then load)

    def fresh(self, suffix: str) -> str:
        self.counter += 1
        return f"{self.name}_{suffix}{self.counter}"


class FunctionEmitter(ExprEmitter):
    """Emits statements into one LLVM function that returns ``i32`` (0 = success).

    ``vars`` maps ``Var`` -> value (int32 vars as ``i64``), ``bufs`` maps
    ``Buffer`` -> data pointer.  ``in_parallel``: inside an outlined parallel
    body, where nested parallel loops run serially.
    """

    def __init__(self, ctx: ModuleContext, fn: ir.Function, in_parallel: bool = False):
        self.ctx = ctx
        self.module = ctx.module
        self.fn = fn
        entry = fn.append_basic_block("entry")
        self.alloca_builder = ir.IRBuilder(entry)
        body = fn.append_basic_block("body")
        self.builder = ir.IRBuilder(body)
        self.vars: dict = {}
        self.bufs: dict = {}
        self.heap: list = []  # live heap allocations, innermost last
        self.mask = None
        self.in_parallel = in_parallel
        self.oob_flag = None  # i8 slot: a CheckedIndex was out of range (made on first use)

    def finish(self) -> None:
        """Close the function: entry falls into the body, the body returns 0, or
        :data:`INDEX_OUT_OF_BOUNDS` when a checked index was out of range."""
        self.alloca_builder.branch(self.fn.blocks[1])
        bld = self.builder
        if bld.block.is_terminated:
            return
        if self.oob_flag is None:
            bld.ret(ir.Constant(L.I32, 0))
            return
        flag = bld.load(self.oob_flag, typ=L.I8, align=1)
        bad = bld.icmp_unsigned("!=", flag, ir.Constant(L.I8, 0))
        bld.ret(bld.select(bad, ir.Constant(L.I32, INDEX_OUT_OF_BOUNDS), ir.Constant(L.I32, 0)))

    def note_out_of_bounds(self, bad) -> None:
        """OR ``bad`` (i1, or a vector of i1: any lane) into this function's out-of-bounds flag."""
        bld = self.builder
        if self.oob_flag is None:
            self.oob_flag = self.entry_alloca(L.I8, 1)
            self.alloca_builder.store(ir.Constant(L.I8, 0), self.oob_flag, align=1)
        lanes = L.lanes_of(bad)
        if lanes > 1:
            bad = bld.call(L.declare(self.module, f"llvm.vector.reduce.or.v{lanes}i1", L.I1,
                                     [ir.VectorType(L.I1, lanes)]), [bad])
        flag = bld.load(self.oob_flag, typ=L.I8, align=1)
        bld.store(bld.or_(flag, bld.zext(bad, L.I8)), self.oob_flag, align=1)

    # -- scoping --------------------------------------------------------------
    def bind(self, var: E.Var, value):
        """Bind ``var`` (returns the previous binding, for :meth:`unbind`)."""
        old = self.vars.get(var)
        if var.dtype == "int32" and L.elem_of(value.type).width == 32:
            value = self.builder.sext(value, L.reg_type("int64", L.lanes_of(value)))
        self.vars[var] = value
        return old

    def unbind(self, var: E.Var, old) -> None:
        if old is None:
            self.vars.pop(var, None)
        else:
            self.vars[var] = old

    def entry_alloca(self, typ: ir.Type, align: int):
        """An ``alloca`` in the entry block (hoisted out of every loop)."""
        slot = self.alloca_builder.alloca(typ)
        slot.align = align
        slot.type = L.PTR  # opaque pointer; accesses name their element type
        return slot

    def fail_if(self, cond, code=None) -> None:
        """Branch out when ``cond`` (i1) holds: free live heap buffers, return ``code`` (an i32
        value; default :data:`HEAP_ALLOCATION_FAILED`)."""
        bld = self.builder
        fail_bb = bld.append_basic_block("fail")
        ok_bb = bld.append_basic_block("ok")
        bld.cbranch(cond, fail_bb, ok_bb)
        bld.position_at_end(fail_bb)
        free = L.declare(self.module, "free", L.VOID, [L.PTR])
        for p in reversed(self.heap):
            bld.call(free, [p])
        bld.ret(ir.Constant(L.I32, HEAP_ALLOCATION_FAILED) if code is None else code)
        bld.position_at_end(ok_bb)

    # -- statements -------------------------------------------------------------
    def stmt(self, s: T.Stmt) -> None:
        """Emit ``s`` at the current position.  Raises BuildError on unsupported nodes."""
        method = getattr(self, "_s_" + type(s).__name__, None)
        if method is None:
            raise BuildError(f"codegen cannot emit a {type(s).__name__} statement")
        method(s)

    def _s_SeqStmt(self, s: T.SeqStmt) -> None:
        for c in s.seq:
            self.stmt(c)

    def _s_Evaluate(self, s: T.Evaluate) -> None:
        self.expr(s.value)

    def _s_LetStmt(self, s: T.LetStmt) -> None:
        value = self.index(s.value) if s.var.dtype == "int32" else self.expr(s.value)
        old = self.bind(s.var, value)
        self.stmt(s.body)
        self.unbind(s.var, old)

    def _s_Store(self, s: T.Store) -> None:
        ptr = self.bufs.get(s.buffer)
        if ptr is None:
            raise BuildError(f"store to buffer {s.buffer.name!r} that is not in scope")
        mask = None if s.predicate is None else self.expr(s.predicate)
        if mask is not None and L.lanes_of(mask) == 1:
            self._if(mask, lambda: self._s_Store(T.Store(s.buffer, s.index, s.value)), None)
            return
        self.mask = mask
        try:
            value = self.expr(s.value)
        finally:
            self.mask = None
        if s.value.dtype != s.buffer.dtype:
            value = self.convert(value, s.value.dtype, s.buffer.dtype)
        self.store_value(ptr, s.buffer.dtype, s.index, value, mask)

    def _s_IfThenElse(self, s: T.IfThenElse) -> None:
        cond = self.expr(s.cond)
        if L.lanes_of(cond) != 1:
            raise BuildError(f"if condition {s.cond} is a vector; vectorize_loops should have "
                             f"kept this loop serial")
        else_case = s.else_case
        other = None if else_case is None else (lambda: self.stmt(else_case))
        self._if(cond, lambda: self.stmt(s.then_case), other)

    def _if(self, cond, then_fn, else_fn) -> None:
        bld = self.builder
        then_bb = bld.append_basic_block("if_then")
        else_bb = bld.append_basic_block("if_else") if else_fn else None
        end_bb = bld.append_basic_block("if_end")
        bld.cbranch(cond, then_bb, else_bb or end_bb)
        bld.position_at_end(then_bb)
        then_fn()
        bld.branch(end_bb)
        if else_fn:
            bld.position_at_end(else_bb)
            else_fn()
            bld.branch(end_bb)
        bld.position_at_end(end_bb)

    # -- loops ----------------------------------------------------------------
    def _s_For(self, s: T.For) -> None:
        if s.kind in GPU_TAGS:
            raise BuildError(f"loop {s.loop_var.name} is bound to {s.kind}; the llvm target "
                             f"has no GPU threads")
        if s.kind == "parallel" and not self.in_parallel:
            emit_parallel(self, s)
            return
        begin = self.index(s.min)
        end = self.builder.add(begin, self.index(s.extent), flags=("nsw",))
        self.loop(s.loop_var, begin, end, lambda: self.stmt(s.body))

    def loop(self, var: E.Var, begin, end, body_fn) -> None:
        """``for var in [begin, end)`` over i64 bounds, ``body_fn()`` emits the body."""
        bld = self.builder
        pre = bld.block
        header = bld.append_basic_block(f"for_header_{var.name}")
        body = bld.append_basic_block(f"for_body_{var.name}")
        exit_bb = bld.append_basic_block(f"for_end_{var.name}")
        bld.branch(header)
        bld.position_at_end(header)
        iv = bld.phi(L.I64, name=var.name)
        iv.add_incoming(begin, pre)
        bld.cbranch(bld.icmp_signed("<", iv, end), body, exit_bb)
        bld.position_at_end(body)
        value = iv if var.dtype in ("int32", "int64") else self.convert(iv, "int64", var.dtype)
        old = self.bind(var, value)
        body_fn()
        self.unbind(var, old)
        nxt = bld.add(iv, ir.Constant(L.I64, 1), flags=("nsw",))
        iv.add_incoming(nxt, bld.block)
        bld.branch(header)
        bld.position_at_end(exit_bb)

    # -- allocation ---------------------------------------------------------------
    def _s_Allocate(self, s: T.Allocate) -> None:
        buf = s.buffer
        size = ES.const_value(_product(buf.shape)) if buf.shape else 1
        if size is not None and int(size) * L.elem_bytes(buf.dtype) <= STACK_LIMIT_BYTES:
            ptr = self.entry_alloca(ir.ArrayType(L.mem_type(buf.dtype), max(int(size), 1)),
                                    ALLOC_ALIGN)
            self._with_buffer(buf, ptr, s.body)
            return
        ptr = self._heap_alloc(buf)
        self.heap.append(ptr)
        self._with_buffer(buf, ptr, s.body)
        self.heap.pop()
        self.builder.call(L.declare(self.module, "free", L.VOID, [L.PTR]), [ptr])

    def _with_buffer(self, buf: T.Buffer, ptr, body: T.Stmt) -> None:
        old = self.bufs.get(buf)
        self.bufs[buf] = ptr
        self.stmt(body)
        if old is None:
            self.bufs.pop(buf, None)
        else:
            self.bufs[buf] = old

    def _heap_alloc(self, buf: T.Buffer):
        """``posix_memalign`` of the buffer's size; returns nonzero from the function on failure."""
        bld = self.builder
        n = self.index(_product(buf.shape)) if buf.shape else ir.Constant(L.I64, 1)
        nbytes = bld.mul(n, ir.Constant(L.I64, L.elem_bytes(buf.dtype)), flags=("nsw",))
        slot = self.entry_alloca(L.PTR, 8)
        memalign = L.declare(self.module, "posix_memalign", L.I32, [L.PTR, L.I64, L.I64])
        rc = bld.call(memalign, [slot, ir.Constant(L.I64, ALLOC_ALIGN), nbytes])
        self.fail_if(bld.icmp_signed("!=", rc, ir.Constant(L.I32, 0)))
        return bld.load(slot, typ=L.PTR, align=8)


def _product(shape: tuple) -> E.Expr:
    out = E.as_expr(shape[0])
    for d in shape[1:]:
        out = out * d
    return ES.simplify(out)
