"""Math intrinsics and memory access (plain, masked, gather/scatter) for the LLVM emitter.

Math, from the columns of ir/intrinsics.py: the LLVM intrinsic where the row has one
(``llvm.exp``, ``llvm.sqrt``, ``llvm.roundeven`` for ``round`` -- numpy rounds half to
even ...); else its libm function (``tanhf``, ``erff``, ``atan2f``: one call per lane for
vectors; the JIT resolves them from the process); ``sigmoid`` is ``1/(1+exp(-x))`` and
``rsqrt`` is ``1/sqrt(x)`` (TVM's lowering of these intrinsics, the two composites).
Vectors of the rows marked ``mvec`` go to glibc's libmvec when it has them (see
``vector_math``), since LLVM would scalarize them into one libm call per lane.

Memory: a stride-1 ``Ramp`` index is one ``<L x T>`` load/store aligned to the
element size (``llvm.masked.load/store`` under a mask); a load with a small constant
power-of-two stride (a stride-2 convolution's input) is one masked load of the span and a
shuffle; any other vector index is ``llvm.masked.gather/scatter`` over a vector of addresses.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeGuard

from llvmlite import ir

from scheduler_core.base.errors import BuildError
from scheduler_core.ir import expr as E
from scheduler_core.ir import simplify as ES
from scheduler_core.ir.intrinsics import INTRINSIC_BY_NAME

from . import llvm_types as L
from .vector_math import mvec_call


class IntrinsicEmitter:
    """Mixin: math calls and loads/stores.  The owner provides ``builder``,
    ``module``, ``index`` and ``convert``."""

    builder: ir.IRBuilder
    module: ir.Module
    index: Callable[[E.Expr], Any]  # ExprEmitter.index: an integer Expr as i64 (or <L x i64>)

    # -- math -----------------------------------------------------------------
    def llvm_intrinsic(self, name: str, *args):
        """``llvm.<name>.<type>`` on ``args`` of one float (vector) type."""
        t = args[0].type
        fn = L.declare(self.module, f"llvm.{name}.{L.intrinsic_suffix(t)}", t, [a.type for a in args])
        return self.builder.call(fn, list(args))

    def math_call(self, name: str, args: list, dtype: str):
        """Emit the intrinsic ``name`` (a row of ir/intrinsics.py: a Call name or ``pow``) on
        ``args`` (LLVM values of ``dtype``, all of one vector width).  Raises BuildError."""
        row = INTRINSIC_BY_NAME.get(name)
        if row is None or len(args) != row.arity:
            raise BuildError(f"unknown intrinsic {name!r} of {len(args)} argument(s)")
        x = args[0]
        if not E.is_float(dtype):
            if not row.int_args:
                raise BuildError(f"intrinsic {name} needs a float argument, got {dtype}")
            zero = ir.Constant(x.type, None)
            neg = self.builder.sub(zero, x)
            cmp = self.builder.icmp_signed if L.is_signed(dtype) else self.builder.icmp_unsigned
            return self.builder.select(cmp("<", x, zero), neg, x)
        fast = mvec_call(self, row, args, dtype)
        if fast is not None:
            return fast
        if row.llvm is not None:
            return self.llvm_intrinsic(row.llvm, *args)
        if row.libm is not None:
            return self._libm_per_lane(row.libm, args, dtype)
        return self._composite(name, x, dtype)

    def _composite(self, name: str, x, dtype: str):
        """The rows with neither an LLVM intrinsic nor a libm function (TVM's lowering)."""
        one = self._fconst(1.0, x.type)
        if name == "rsqrt":
            return self.builder.fdiv(one, self.llvm_intrinsic("sqrt", x))
        if name == "sigmoid":
            neg = self.builder.fneg(x)
            den = self.builder.fadd(one, self.math_call("exp", [neg], dtype))
            return self.builder.fdiv(one, den)
        raise BuildError(f"intrinsic {name!r} has no CPU lowering")

    def _fconst(self, value: float, t: ir.Type):
        if isinstance(t, ir.VectorType):
            return ir.Constant(t, [ir.Constant(t.element, value)] * t.count)
        return ir.Constant(t, value)

    def _libm_per_lane(self, libm: str, args: list, dtype: str):
        """Call libm's double function ``libm`` (its float version ``<libm>f`` for float32
        and float16, widened) on ``args``, once per lane of a vector."""
        wide = dtype == "float64"
        ct = ir.DoubleType() if wide else ir.FloatType()
        fn = L.declare(self.module, libm if wide else libm + "f", ct, [ct] * len(args))
        bld = self.builder

        def one(vs):
            r = bld.call(fn, [v if dtype != "float16" else bld.fpext(v, ct) for v in vs])
            return r if dtype != "float16" else bld.fptrunc(r, L.scalar_type(dtype))

        t = args[0].type
        if not isinstance(t, ir.VectorType):
            return one(args)
        out = ir.Constant(t, ir.Undefined)
        for i in range(t.count):
            lane = ir.Constant(L.I32, i)
            out = bld.insert_element(out, one([bld.extract_element(a, lane) for a in args]), lane)
        return out

    # -- loads ----------------------------------------------------------------
    def guarded(self, mask, emit, dtype: str):
        """Run ``emit()`` only when some lane of ``mask`` is set; else give 0 of ``dtype``."""
        bld = self.builder
        name = f"llvm.vector.reduce.or.{L.intrinsic_suffix(mask.type)}"
        anyset = bld.call(L.declare(self.module, name, L.I1, [mask.type]), [mask])
        then_bb = bld.append_basic_block("guard_then")
        end_bb = bld.append_basic_block("guard_end")
        start = bld.block
        bld.cbranch(anyset, then_bb, end_bb)
        bld.position_at_end(then_bb)
        value = emit()
        then_end = bld.block
        bld.branch(end_bb)
        bld.position_at_end(end_bb)
        phi = bld.phi(value.type)
        phi.add_incoming(value, then_end)
        phi.add_incoming(ir.Constant(value.type, None), start)
        return phi

    def address(self, ptr, dtype: str, index_value):
        """``&ptr[index]`` (``<L x ptr>`` when ``index_value`` is a vector)."""
        gep = self.builder.gep(ptr, [index_value], inbounds=True, source_etype=L.mem_type(dtype))
        if isinstance(index_value.type, ir.VectorType):
            gep.type = ir.VectorType(L.PTR, index_value.type.count)
        return gep

    def load_scalar(self, ptr, e: E.BufferLoad):
        addr = self.address(ptr, e.dtype, self.index(e.index))
        v = self.builder.load(addr, typ=L.mem_type(e.dtype), align=L.elem_bytes(e.dtype))
        return self._from_mem(v, e.dtype)

    def load_vector(self, ptr, e: E.BufferLoad, mask):
        """A vector load of ``e`` (lanes from its index); masked lanes read as 0."""
        idx = e.index
        dtype = e.dtype
        if _unit_stride(idx):
            lanes = idx.lanes
            addr = self.address(ptr, dtype, self.index(idx.base))
            vt = ir.VectorType(L.mem_type(dtype), lanes)
            if mask is None:
                v = self.builder.load(addr, typ=vt, align=L.elem_bytes(dtype))
            else:
                fn = self._masked("load", vt, [L.PTR, L.I32, mask.type, vt], vt, "p0")
                v = self.builder.call(fn, [addr, L.const(L.elem_bytes(dtype), "int32"), mask,
                                           ir.Constant(vt, None)])
            return self._from_mem(v, dtype)
        if isinstance(idx, E.Broadcast) or (isinstance(idx, E.Ramp) and ES.is_const(idx.stride, 0)):
            base = idx.value if isinstance(idx, E.Broadcast) else idx.base
            one = E.BufferLoad(e.buffer, base, dtype)
            if mask is None:
                v = self.load_scalar(ptr, one)
            else:
                v = self.guarded(mask, lambda: self.load_scalar(ptr, one), dtype)
            return L.splat(self.builder, v, idx.lanes)
        stride = _small_stride(idx)
        if stride is not None:
            return self._strided_load(ptr, e, stride, mask)
        addrs = self.address(ptr, dtype, self.index(idx))
        lanes = addrs.type.count
        vt = ir.VectorType(L.mem_type(dtype), lanes)
        m = mask if mask is not None else L.all_ones(lanes)
        fn = self._masked("gather", vt, [addrs.type, L.I32, m.type, vt], vt,
                          L.intrinsic_suffix(addrs.type))
        v = self.builder.call(fn, [addrs, L.const(L.elem_bytes(dtype), "int32"), m,
                                   ir.Constant(vt, None)])
        return self._from_mem(v, dtype)

    def _strided_load(self, ptr, e: E.BufferLoad, stride: int, mask):
        """``ptr[base + stride*i]`` for ``i < L``: one masked load of the ``stride * L``
        elements from ``base`` whose mask holds only the lanes ``stride*i`` (those of active
        lanes ``i`` under ``mask``), then a shuffle that keeps every ``stride``-th element.
        It reads exactly the elements a gather would, so it cannot fault where the gather
        would not; x86 has no fast gather (a 16-lane ``vgatherdps`` costs tens of cycles),
        while this is one load and one or two permutes (LLVM's interleaved-access lowering)."""
        assert isinstance(e.index, E.Ramp)
        bld = self.builder
        lanes = e.index.lanes
        wide = lanes * stride
        addr = self.address(ptr, e.dtype, self.index(e.index.base))
        vt = ir.VectorType(L.mem_type(e.dtype), wide)
        pattern = ir.Constant(ir.VectorType(L.I1, wide), [int(j % stride == 0) for j in range(wide)])
        if mask is None:
            wide_mask = pattern
        else:
            spread = bld.shuffle_vector(mask, ir.Constant(mask.type, ir.Undefined),
                                        ir.Constant(ir.VectorType(L.I32, wide),
                                                    [j // stride for j in range(wide)]))
            wide_mask = bld.and_(spread, pattern)
        fn = self._masked("load", vt, [L.PTR, L.I32, wide_mask.type, vt], vt, "p0")
        v = bld.call(fn, [addr, L.const(L.elem_bytes(e.dtype), "int32"), wide_mask, ir.Constant(vt, None)])
        keep = ir.Constant(ir.VectorType(L.I32, lanes), [i * stride for i in range(lanes)])
        return self._from_mem(bld.shuffle_vector(v, ir.Constant(vt, ir.Undefined), keep), e.dtype)

    def _masked(self, op: str, vt, args: list, ret, ptr_suffix: str):
        name = f"llvm.masked.{op}.{L.intrinsic_suffix(vt)}.{ptr_suffix}"
        return L.declare(self.module, name, ret, args)

    def _from_mem(self, v, dtype: str):
        if dtype != "bool":
            return v
        return self.builder.icmp_unsigned("!=", v, ir.Constant(v.type, None))

    # -- stores ---------------------------------------------------------------
    def store_value(self, ptr, dtype: str, index: E.Expr, value, mask=None):
        """``ptr[index] = value``; vector ``value`` with a Ramp/vector index, under ``mask``."""
        bld = self.builder
        size = L.elem_bytes(dtype)
        if dtype == "bool":
            mt = L.I8 if L.lanes_of(value) == 1 else ir.VectorType(L.I8, L.lanes_of(value))
            value = bld.zext(value, mt)
        if L.lanes_of(value) == 1 and not isinstance(index, (E.Ramp, E.Broadcast)):
            bld.store(value, self.address(ptr, dtype, self.index(index)), align=size)
            return
        if _unit_stride(index):
            value = L.splat(bld, value, index.lanes)
            addr = self.address(ptr, dtype, self.index(index.base))
            if mask is None:
                bld.store(value, addr, align=size)
                return
            fn = self._masked("store", value.type, [value.type, L.PTR, L.I32, mask.type],
                              L.VOID, "p0")
            bld.call(fn, [value, addr, L.const(size, "int32"), mask])
            return
        addrs = self.address(ptr, dtype, self.index(index))
        lanes = addrs.type.count
        value = L.splat(bld, value, lanes)
        m = mask if mask is not None else L.all_ones(lanes)
        fn = self._masked("scatter", value.type, [value.type, addrs.type, L.I32, m.type], L.VOID,
                          L.intrinsic_suffix(addrs.type))
        bld.call(fn, [value, addrs, L.const(size, "int32"), m])


def _unit_stride(idx: E.Expr) -> TypeGuard[E.Ramp]:
    return isinstance(idx, E.Ramp) and ES.is_const(idx.stride, 1)


MAX_STRIDED_LOAD_LANES = 64  # a strided load spans at most this many elements (else a gather)


def _small_stride(idx: E.Expr) -> int | None:
    """The stride of a Ramp index whose lanes and constant stride (>= 2) are powers of two
    and span at most MAX_STRIDED_LOAD_LANES elements (a strided load), else None (a gather)."""
    if not isinstance(idx, E.Ramp):
        return None
    stride = ES.const_value(idx.stride)
    if not isinstance(stride, int) or stride < 2 or stride & (stride - 1) or idx.lanes & (idx.lanes - 1):
        return None
    return stride if idx.lanes * stride <= MAX_STRIDED_LOAD_LANES else None
