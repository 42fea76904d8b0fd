"""Expression code generation: ``expr.Expr`` -> LLVM values (TVM's CodeGenLLVM::VisitExpr_).

Reading guide: :meth:`ExprEmitter.expr` emits a value of the node's dtype;
:meth:`ExprEmitter.index` emits integer index arithmetic widened to ``i64``
(int32 in the IR, sign-extended, so large tensors are safe).  Variables of
dtype int32 are held as ``i64`` values and truncated where an int32 value is
needed.  ``self.mask`` is the lane mask of the vector ``Select`` branch or of the
predicated ``Store`` being emitted: loads under it become masked loads/gathers, integer divisors of
masked-off lanes become 1, and scalar loads only run when some lane is active.

Floating point instructions carry only the ``contract`` fast-math flag (FMA
contraction), never full fast-math.  Float ``min``/``max`` are ``a < b ? a : b``
(TVM's choice; NaN handling differs from numpy's).
"""

from __future__ import annotations

from llvmlite import ir

from scheduler_core.base.errors import BuildError
from scheduler_core.ir import expr as E
from scheduler_core.ir import expr_functor as EF

from . import llvm_types as L
from .llvm_intrin import IntrinsicEmitter

FLAGS = ("contract",)
_INDEX_OPS = ("add", "sub", "mul", "floordiv", "floormod", "min", "max", "div")
_CMP = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}
# The IRBuilder method of each operator that is one LLVM instruction.
_FLOAT_ARITH = {"add": "fadd", "sub": "fsub", "mul": "fmul", "div": "fdiv"}
_INT_ARITH = {"add": "add", "sub": "sub", "mul": "mul"}


class ExprEmitter(IntrinsicEmitter):
    """Mixin emitting expressions; the owner sets ``builder``, ``module``, ``vars``,
    ``bufs`` and ``mask``."""

    builder: ir.IRBuilder
    module: ir.Module
    vars: dict
    bufs: dict
    mask: object

    # -- entry points -------------------------------------------------------
    def expr(self, e: E.Expr):
        """Emit ``e`` as a value of ``reg_type(e.dtype, lanes)``.  Raises BuildError."""
        method = getattr(self, "_e_" + type(e).__name__, None)
        if method is None:
            raise BuildError(f"codegen cannot emit a {type(e).__name__} expression: {e}")
        return method(e)

    def index(self, e: E.Expr):
        """Emit the integer ``e`` as ``i64`` (or ``<L x i64>``), widening int32 arithmetic."""
        if not (E.is_int(e.dtype)):
            raise BuildError(f"index expression {e} has dtype {e.dtype}, expected an integer")
        if e.dtype == "int32":
            if isinstance(e, E.IntImm):
                return ir.Constant(L.I64, e.value)
            if isinstance(e, E.Var):
                return self._lookup(e)
            if isinstance(e, E.BinaryOp) and e.op in _INDEX_OPS:
                a, b = self._match(self.index(e.a), self.index(e.b))
                return self._int_binary(e.op, a, b, signed=True, nsw=True)
            if isinstance(e, E.Ramp):
                return self._ramp(e)
            if isinstance(e, E.Broadcast):
                return L.splat(self.builder, self.index(e.value), e.lanes)
            if isinstance(e, E.Select):
                return self._select(e, self.index)
        return self._widen(self.expr(e), e.dtype)

    # -- helpers --------------------------------------------------------------
    def _lookup(self, v: E.Var):
        value = self.vars.get(v)
        if value is None:
            raise BuildError(f"variable {v.name!r} is not bound here (not a loop var, let "
                             f"var or scalar parameter)")
        return value

    def _widen(self, value, dtype: str):
        t = L.elem_of(value.type)
        if t.width == 64:
            return value
        target = ir.VectorType(L.I64, L.lanes_of(value)) if L.lanes_of(value) > 1 else L.I64
        if L.is_signed(dtype):
            return self.builder.sext(value, target)
        return self.builder.zext(value, target)

    def _match(self, a, b):
        """Splat a scalar operand to the other operand's lanes."""
        la, lb = L.lanes_of(a), L.lanes_of(b)
        if la == lb:
            return a, b
        if la == 1:
            return L.splat(self.builder, a, lb), b
        if lb == 1:
            return a, L.splat(self.builder, b, la)
        raise BuildError(f"operands have {la} and {lb} lanes")

    # -- leaves ---------------------------------------------------------------
    def _e_IntImm(self, e: E.IntImm):
        return L.const(e.value, e.dtype)

    def _e_FloatImm(self, e: E.FloatImm):
        return L.const(e.value, e.dtype)

    def _e_Var(self, e: E.Var):
        value = self._lookup(e)
        if e.dtype == "int32" and L.elem_of(value.type).width == 64:
            return self.builder.trunc(value, L.reg_type("int32", L.lanes_of(value)))
        return value

    def _e_Ramp(self, e: E.Ramp):
        value = self._ramp(e)
        if e.dtype == "int64":
            return value
        return self.builder.trunc(value, L.reg_type(e.dtype, e.lanes))

    def _ramp(self, e: E.Ramp):
        base = L.splat(self.builder, self.index(e.base), e.lanes)
        stride = L.splat(self.builder, self.index(e.stride), e.lanes)
        offs = self.builder.mul(stride, L.iota(e.lanes), flags=("nsw",))
        return self.builder.add(base, offs, flags=("nsw",))

    def _e_Broadcast(self, e: E.Broadcast):
        return L.splat(self.builder, self.expr(e.value), e.lanes)

    # -- arithmetic -----------------------------------------------------------
    def _e_BinaryOp(self, e: E.BinaryOp):
        n = _small_int_exponent(e.b) if e.op == "pow" and E.is_float(e.dtype) else None
        if n is not None:
            return self._pow_by_products(self.expr(e.a), n)
        a, b = self._match(self.expr(e.a), self.expr(e.b))
        if E.is_float(e.dtype):
            return self._float_binary(e.op, a, b)
        if e.op == "pow":
            return self._int_pow(a, b, e.dtype)
        return self._int_binary(e.op, a, b, signed=L.is_signed(e.dtype) or e.dtype == "bool")

    def _pow_by_products(self, x, n: int):
        """``x ** n`` for a constant n in 1..MAX_POW_PRODUCTS as n - 1 products (GELU's tanh form
        has ``pow(x, 3)``): LLVM expands ``llvm.pow`` on a vector to one libm call per lane."""
        out = x
        for _ in range(n - 1):
            out = self.builder.fmul(out, x, flags=FLAGS)
        return out

    def _float_binary(self, op: str, a, b):
        bld = self.builder
        if op in _FLOAT_ARITH:
            return getattr(bld, _FLOAT_ARITH[op])(a, b, flags=FLAGS)
        if op in ("floordiv", "floormod"):
            q = self.llvm_intrinsic("floor", bld.fdiv(a, b, flags=FLAGS))
            if op == "floordiv":
                return q
            return bld.fsub(a, bld.fmul(q, b, flags=FLAGS), flags=FLAGS)
        if op in ("min", "max"):
            return self._min_max(op, bld.fcmp_ordered, a, b)
        if op == "pow":
            return self.llvm_intrinsic("pow", a, b)
        raise BuildError(f"unknown float operator {op!r}")

    def _int_binary(self, op: str, a, b, signed: bool, nsw: bool = False):
        bld = self.builder
        if op in _INT_ARITH:
            return getattr(bld, _INT_ARITH[op])(a, b, flags=("nsw",) if nsw else ())
        if op in ("min", "max"):
            return self._min_max(op, bld.icmp_signed if signed else bld.icmp_unsigned, a, b)
        if op in ("div", "floordiv", "floormod"):
            b = self._safe_divisor(b)
            if not signed:
                return bld.udiv(a, b) if op != "floormod" else bld.urem(a, b)
            if op == "div":
                return bld.sdiv(a, b)
            return self._floor_divmod(op, a, b)
        raise BuildError(f"unknown integer operator {op!r}")

    def _min_max(self, op: str, compare, a, b):
        """``a < b ? a : b`` for "min", ``a > b ? a : b`` for "max"; ``compare`` is the
        builder's comparison of the operands' kind (fcmp_ordered, icmp_signed, icmp_unsigned)."""
        return self.builder.select(compare("<" if op == "min" else ">", a, b), a, b)

    def _safe_divisor(self, b):
        """Masked-off lanes divide by 1 so that an untaken select branch (or the value of a
        predicated store) cannot trap; under a mask a scalar divisor of 0 becomes 1 (its
        division only ran, in the scalar program, for lanes where it was not 0)."""
        if self.mask is None or isinstance(b, ir.Constant):
            return b
        if L.lanes_of(b) == 1:
            zero = self.builder.icmp_signed("==", b, ir.Constant(b.type, 0))
            return self.builder.select(zero, ir.Constant(b.type, 1), b)
        one = ir.Constant(b.type, [ir.Constant(b.type.element, 1)] * b.type.count)
        return self.builder.select(self.mask, b, one)

    def _floor_divmod(self, op: str, a, b):
        """Floor division/modulo (rounding towards -inf), as TVM's floordiv/floormod."""
        bld = self.builder
        zero = ir.Constant(a.type, None)
        q, r = bld.sdiv(a, b), bld.srem(a, b)
        signs_differ = bld.icmp_signed("<", bld.xor(r, b), zero)
        adjust = bld.and_(bld.icmp_signed("!=", r, zero), signs_differ)
        if op == "floordiv":
            return bld.sub(q, bld.zext(adjust, a.type))
        return bld.add(r, bld.select(adjust, b, zero))

    def _int_pow(self, a, b, dtype: str):
        ft = ir.DoubleType() if L.lanes_of(a) == 1 else ir.VectorType(ir.DoubleType(), L.lanes_of(a))
        conv = self.builder.sitofp if L.is_signed(dtype) else self.builder.uitofp
        r = self.llvm_intrinsic("pow", conv(a, ft), conv(b, ft))
        back = self.builder.fptosi if L.is_signed(dtype) else self.builder.fptoui
        return back(r, a.type)

    # -- comparisons and logic ------------------------------------------------
    def _e_CmpOp(self, e: E.CmpOp):
        bld = self.builder
        if E.is_float(e.a.dtype):
            a, b = self._match(self.expr(e.a), self.expr(e.b))
            if e.op == "ne":
                return bld.fcmp_unordered("!=", a, b)
            return bld.fcmp_ordered(_CMP[e.op], a, b)
        if e.a.dtype == "int32" and _is_scalar(e):
            a, b = self.index(e.a), self.index(e.b)
        else:
            a, b = self._match(self.expr(e.a), self.expr(e.b))
        cmp = bld.icmp_signed if L.is_signed(e.a.dtype) else bld.icmp_unsigned
        return cmp(_CMP[e.op], a, b)

    def _e_LogicalOp(self, e: E.LogicalOp):
        a, b = self._match(self.expr(e.a), self.expr(e.b))
        return self.builder.and_(a, b) if e.op == "and" else self.builder.or_(a, b)

    def _e_Not(self, e: E.Not):
        return self.builder.not_(self.expr(e.a))

    # -- casts ----------------------------------------------------------------
    def _e_Cast(self, e: E.Cast):
        return self.convert(self.expr(e.value), e.value.dtype, e.dtype)

    def convert(self, v, src: str, dst: str):
        """Convert ``v`` from dtype ``src`` to ``dst`` (C semantics; bool is ``!= 0``)."""
        if src == dst:
            return v
        bld = self.builder
        lanes = L.lanes_of(v)
        to = L.reg_type(dst, lanes)
        if dst == "bool":
            zero = ir.Constant(v.type, None)
            if E.is_float(src):
                return bld.fcmp_unordered("!=", v, zero)
            return bld.icmp_unsigned("!=", v, zero)
        if src == "bool":
            return bld.uitofp(v, to) if E.is_float(dst) else bld.zext(v, to)
        if E.is_float(src) and E.is_float(dst):
            grow = E.dtype_bits(dst) > E.dtype_bits(src)
            return bld.fpext(v, to) if grow else bld.fptrunc(v, to)
        if E.is_float(src):
            return bld.fptosi(v, to) if L.is_signed(dst) else bld.fptoui(v, to)
        if E.is_float(dst):
            return bld.sitofp(v, to) if L.is_signed(src) else bld.uitofp(v, to)
        sb, db = E.dtype_bits(src), E.dtype_bits(dst)
        if db < sb:
            return bld.trunc(v, to)
        if db > sb:
            return bld.sext(v, to) if L.is_signed(src) else bld.zext(v, to)
        return v

    def _e_CheckedIndex(self, e: E.CheckedIndex):
        """``value`` where ``0 <= value < extent`` (one unsigned compare), else 0, with the
        lanes out of range (and not masked off) noted for the function's return code."""
        bld = self.builder
        v, n = self._match(self.index(e.value), self.index(e.extent))
        ok = bld.icmp_unsigned("<", v, n)
        bad = bld.not_(ok)
        if self.mask is not None and L.lanes_of(self.mask) == L.lanes_of(bad):
            bad = bld.and_(bad, self.mask)
        self.note_out_of_bounds(bad)
        out = bld.select(ok, v, ir.Constant(v.type, None))
        if e.dtype == "int64":
            return out
        return bld.trunc(out, L.reg_type(e.dtype, L.lanes_of(out)))

    def note_out_of_bounds(self, bad) -> None:
        """Record that ``bad`` (i1 or a vector of i1) lanes were out of range (the statement
        emitter keeps a flag per function)."""
        raise BuildError("a CheckedIndex needs a function to report to")

    # -- select ----------------------------------------------------------------
    def _e_Select(self, e: E.Select):
        return self._select(e, self.expr)

    def _select(self, e: E.Select, emit):
        cond = self.expr(e.cond)
        if L.lanes_of(cond) > 1:
            return self._vector_select(cond, e, emit)
        if _is_safe(e.true_value) and _is_safe(e.false_value):
            t, f = self._match(emit(e.true_value), emit(e.false_value))
            return self.builder.select(cond, t, f)
        return self._branch_select(cond, e, emit)

    def _vector_select(self, cond, e: E.Select, emit):
        outer = self.mask
        lanes = L.lanes_of(cond)
        base = outer if outer is not None else L.all_ones(lanes)
        try:
            self.mask = self.builder.and_(base, cond)
            t = emit(e.true_value)
            self.mask = self.builder.and_(base, self.builder.not_(cond))
            f = emit(e.false_value)
        finally:
            self.mask = outer
        t, f = L.splat(self.builder, t, lanes), L.splat(self.builder, f, lanes)
        return self.builder.select(cond, t, f)

    def _branch_select(self, cond, e: E.Select, emit):
        """Lazy select: only the taken branch is evaluated (it may load out of range)."""
        bld = self.builder
        then_bb = bld.append_basic_block("sel_then")
        else_bb = bld.append_basic_block("sel_else")
        end_bb = bld.append_basic_block("sel_end")
        bld.cbranch(cond, then_bb, else_bb)
        bld.position_at_end(then_bb)
        t = emit(e.true_value)
        then_end = bld.block
        bld.position_at_end(else_bb)
        f = emit(e.false_value)
        else_end = bld.block
        lanes = max(L.lanes_of(t), L.lanes_of(f))
        if L.lanes_of(f) != lanes:
            f = L.splat(bld, f, lanes)
        bld.branch(end_bb)
        bld.position_at_end(then_end)
        if L.lanes_of(t) != lanes:
            t = L.splat(bld, t, lanes)
        bld.branch(end_bb)
        bld.position_at_end(end_bb)
        phi = bld.phi(t.type)
        phi.add_incoming(t, then_end)
        phi.add_incoming(f, else_end)
        return phi

    # -- calls and loads ---------------------------------------------------------
    def _e_Call(self, e: E.Call):
        args = [self.expr(a) for a in e.args]
        if len(args) == 2:
            args = list(self._match(*args))
        return self.math_call(e.name, args, e.dtype)

    def _e_BufferLoad(self, e: E.BufferLoad):
        ptr = self.bufs.get(e.buffer)
        if ptr is None:
            raise BuildError(f"buffer {e.buffer.name!r} is not a parameter or an allocation "
                             f"in scope")
        if _is_scalar(e.index):
            if e.lanes > 1:  # TVM: a scalar index with lanes loads a contiguous vector
                e = E.BufferLoad(e.buffer, E.Ramp(e.index, E.const(1), e.lanes), e.dtype, e.lanes)
            elif self.mask is not None:
                return self.guarded(self.mask, lambda: self.load_scalar(ptr, e), e.dtype)
            else:
                return self.load_scalar(ptr, e)
        return self.load_vector(ptr, e, self.mask)


def _is_scalar(e: E.Expr) -> bool:
    for n in EF.walk(e):
        if isinstance(n, (E.Ramp, E.Broadcast)) or (isinstance(n, E.BufferLoad) and n.lanes > 1):
            return False
    return True


def _is_safe(e: E.Expr) -> bool:
    """No loads and no integer division: safe to evaluate when not selected."""
    for n in EF.walk(e):
        if isinstance(n, E.BufferLoad):
            return False
        if isinstance(n, E.BinaryOp) and n.op in ("div", "floordiv", "floormod") \
                and not E.is_float(n.dtype) and not isinstance(n.b, E.IntImm):
            return False
    return True


MAX_POW_PRODUCTS = 4  # pow(x, n) with a constant integer n up to this is n - 1 multiplications


def _small_int_exponent(b: E.Expr) -> int | None:
    """The exponent of a float ``pow`` when it is a constant integer in 1..MAX_POW_PRODUCTS
    (a scalar, or a Broadcast of one after vectorization), else None."""
    v = b.value if isinstance(b, E.Broadcast) else b
    if isinstance(v, E.Cast):
        v = v.value
    if not isinstance(v, (E.FloatImm, E.IntImm)):
        return None
    n = v.value
    return int(n) if float(n).is_integer() and 1 <= n <= MAX_POW_PRODUCTS else None
