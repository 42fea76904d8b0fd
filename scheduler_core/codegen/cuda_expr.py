"""The expression half of the CUDA printer: integer widths, floor division, math calls.

    CudaExprPrinter(kernel, ...).expr(e) -> C text of the scalar expression ``e``

Integer arithmetic is ``int`` as in the IR; a node whose value range (``cuda_int_range``:
from the loop extents and the scalar params' range ``[0, INT32_MAX]``) may leave int32 is
computed in ``long long``.  ``floordiv``/``floormod`` print as ``/`` and ``%`` where both
operands are provably non-negative, else through the small ``__device__`` helpers of
:data:`FLOOR_HELPERS` (CUDA's ``/`` and ``%`` truncate towards zero).  Math intrinsics use
the float versions (``expf``, ``rsqrtf``, ...: ``cuda_intrinsics``; float16 computes in
float); the approximate ``__expf``/``__logf``/... only with ``attrs["fast_math"]``.  Float
``min``/``max`` are ``fminf``/``fmaxf``.  TVM's ``CodeGenC``/``CodeGenCUDA`` expression
visitors (``src/target/source/codegen_c.cc``, ``codegen_cuda.cc``).
"""

from __future__ import annotations

from scheduler_core.base.errors import BuildError
from scheduler_core.ir import expr as E
from scheduler_core.ir import expr_functor as EF
from scheduler_core.ir import tir as T

from .cuda_int_range import expr_range, fits32
from .cuda_intrinsics import CUDA_FAST_MATH, CUDA_MATH
from .cuda_kernels import CudaKernel, gpu_dims
from .cuda_literals import c_type, float_literal, int_literal
from .cuda_names import CNames

__all__ = ["CudaExprPrinter", "FLOOR_HELPERS", "STATUS_SYMBOL"]

C_BINARY = {"add": "+", "sub": "-", "mul": "*", "div": "/"}
C_COMPARE = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}
# C text of the helpers, per group: floor division / modulo ("i32": int, "i64": long long), and
# "checked": a gathered index (CheckedIndex) outside [0, n) reads element 0 instead and sets the
# INDEX_OUT_OF_BOUNDS bit (2) of the module's status word STATUS_SYMBOL, which the host clears
# before and reads after its launches (clamp-and-flag, as the CPU code: no read outside a buffer,
# and the context stays usable, unlike a __trap()).
STATUS_SYMBOL = "autosched_status"
FLOOR_HELPERS = {
    "i32": """\
__host__ __device__ __forceinline__ int floordiv_i32(int a, int b) {
  int q = a / b;
  int r = a % b;
  return (r != 0 && ((r ^ b) < 0)) ? q - 1 : q;
}
__host__ __device__ __forceinline__ int floormod_i32(int a, int b) {
  int r = a % b;
  return (r != 0 && ((r ^ b) < 0)) ? r + b : r;
}""",
    "i64": """\
__host__ __device__ __forceinline__ long long floordiv_i64(long long a, long long b) {
  long long q = a / b;
  long long r = a % b;
  return (r != 0 && ((r ^ b) < 0)) ? q - 1 : q;
}
__host__ __device__ __forceinline__ long long floormod_i64(long long a, long long b) {
  long long r = a % b;
  return (r != 0 && ((r ^ b) < 0)) ? r + b : r;
}""",
    "checked": """\
extern "C" { __device__ unsigned int autosched_status; }
__device__ __forceinline__ long long checked_index(long long v, long long n) {
  if ((unsigned long long)v >= (unsigned long long)n) {
    autosched_status = 2u;
    return 0;
  }
  return v;
}""",
}


class CudaExprPrinter:
    """Prints the expressions of one kernel as C text, with the kernel's scopes: the C text,
    value range and width of each bound variable (statements: ``cuda_codegen``'s printer,
    a subclass)."""

    def __init__(self, kernel: CudaKernel, names: CNames, fast_math: bool, helpers: set,
                 features: set) -> None:
        self.k = kernel
        self.names = names
        self.fast_math = fast_math
        self.helpers = helpers  # helper groups used ("i32", "i64")
        self.features = features  # "fp16"
        self.lines: list = []
        self.ind = 1
        self.var_text: dict = {}  # Var -> C text
        self.env: dict = {}  # Var -> (lo, hi) or None
        self.wide_vars: set = set()
        self.buf_names: dict = {}  # Buffer -> C name
        self.dims = gpu_dims(kernel.stmt)
        self.aligned_bufs: dict = {}  # Buffer -> alignment bytes (vector accesses)
        self.dynamic_offsets: dict = {}  # shared Buffer -> byte offset in dynamic shared memory
        self.dynamic_name = ""  # the extern __shared__ array those offsets index
        self._memo_range: dict = {}
        self._memo_wide: dict = {}
        self._memo_lanes: dict = {}
        self._tmp = 0

    # -- scopes -----------------------------------------------------------------
    def bind(self, var: E.Var, text: str | None, rng: tuple | None, wide: bool = False) -> str:
        if text is None:
            text = self.names.fresh(var.name)
        self.var_text[var] = text
        self.env[var] = rng
        if wide:
            self.wide_vars.add(var)
        else:
            self.wide_vars.discard(var)
        self._memo_range.clear()
        self._memo_wide.clear()
        return text

    def set_range(self, var: E.Var, rng: tuple | None) -> None:
        """Let ``var`` range over ``rng`` (None: unknown) from now on."""
        self.env[var] = rng
        self._memo_range.clear()

    def tmp(self, hint: str) -> str:
        self._tmp += 1
        return self.names.fresh(f"{hint}{self._tmp}")

    def emit(self, line: str) -> None:
        self.lines.append("  " * self.ind + line)

    # -- ranges and widths --------------------------------------------------------
    def bounds(self, e: E.Expr) -> tuple | None:
        """``(lo, hi)`` bounds of an integer expression, or None when unknown."""
        return expr_range(e, self.env, self._memo_range)

    def wide(self, e: E.Expr) -> bool:
        """Whether the integer ``e`` is computed in 64 bits in the generated code."""
        key = id(e)
        hit = self._memo_wide.get(key)
        if hit is not None and hit[0] is e:
            return hit[1]
        w = self._wide(e)
        self._memo_wide[key] = (e, w)
        return w

    def lanes(self, e: E.Expr) -> int:
        """The vector lanes of ``e`` (1: scalar), memoized."""
        hit = self._memo_lanes.get(id(e))
        if hit is not None and hit[0] is e:
            return hit[1]
        if isinstance(e, (E.Ramp, E.Broadcast)):
            n = e.lanes
        else:
            n = max([self.lanes(c) for c in EF.children(e)], default=1)
            if isinstance(e, E.BufferLoad):
                n = max(n, e.lanes)
        self._memo_lanes[id(e)] = (e, n)
        return n

    def _wide(self, e: E.Expr) -> bool:
        if e.dtype in ("int64", "uint64"):
            return True
        if e.dtype != "int32":
            return False
        if isinstance(e, E.Var):
            return e in self.wide_vars
        if isinstance(e, E.Select):
            return self.wide(e.true_value) or self.wide(e.false_value)
        if isinstance(e, E.BinaryOp):
            if self.wide(e.a) or self.wide(e.b):
                return True
            return not fits32(self.bounds(e))
        return False

    def nonneg(self, e: E.Expr) -> bool:
        r = self.bounds(e)
        return r is not None and r[0] >= 0

    def int_ctype(self, var: E.Var, rng: tuple | None) -> tuple[str, bool]:
        """(C type, wide) of an int32 variable holding values in ``rng``."""
        if var.dtype == "int32" and not fits32(rng):
            return "long long", True
        return c_type(var.dtype), var.dtype in ("int64", "uint64")

    # -- expressions ----------------------------------------------------------------
    def expr(self, e: E.Expr) -> str:
        method = getattr(self, "_e_" + type(e).__name__, None)
        if method is None:
            raise BuildError(f"CUDA codegen cannot print a {type(e).__name__} expression: {e}")
        return method(e)

    def _e_IntImm(self, e: E.IntImm) -> str:
        return int_literal(e.value, e.dtype)

    def _e_FloatImm(self, e: E.FloatImm) -> str:
        if e.dtype == "float16":
            self.features.add("fp16")
        return float_literal(e.value, e.dtype)

    def _e_Var(self, e: E.Var) -> str:
        text = self.var_text.get(e)
        if text is None:
            raise BuildError(f"variable {e.name!r} is not bound in kernel {self.k.name} (not a loop "
                             f"var, let var or scalar parameter)")
        return text

    def _vector_error(self, e: E.Expr) -> str:
        raise BuildError(f"vector expression {e} outside a vector store (kernel {self.k.name})")

    def _e_Ramp(self, e: E.Ramp) -> str:
        return self._vector_error(e)

    def _e_Broadcast(self, e: E.Broadcast) -> str:
        return self._vector_error(e)

    def _widened(self, e: E.Expr) -> str:
        if isinstance(e, E.IntImm) and e.dtype == "int32":
            return f"{e.value}LL"
        text = self.expr(e)
        if self.wide(e):
            return text
        return f"((long long){text})"

    def _e_BinaryOp(self, e: E.BinaryOp) -> str:
        if self.lanes(e) > 1:
            return self._vector_error(e)
        if E.is_float(e.dtype):
            return self._float_binary(e)
        wide = e.dtype == "int32" and self.wide(e)
        if wide:
            a, b = self._widened(e.a), self._widened(e.b)
        else:
            a, b = self.expr(e.a), self.expr(e.b)
        op = e.op
        if op in ("add", "sub", "mul", "div"):
            return f"({a} {C_BINARY[op]} {b})"
        if op in ("min", "max"):
            return f"{op}({a}, {b})"
        if op in ("floordiv", "floormod"):
            # Truncation is floor when neither operand is negative (a zero divisor is
            # undefined either way).
            if e.dtype.startswith("uint") or (self.nonneg(e.a) and self.nonneg(e.b)):
                return f"({a} {'/' if op == 'floordiv' else '%'} {b})"
            group = "i64" if (wide or e.dtype == "int64") else "i32"
            self.helpers.add(group)
            return f"{op}_{group}({a}, {b})"
        if op == "pow":
            return f"(({c_type(e.dtype)})pow((double){a}, (double){b}))"
        raise BuildError(f"unknown integer operator {op!r}")

    def _float_binary(self, e: E.BinaryOp) -> str:
        a, b = self.expr(e.a), self.expr(e.b)
        if e.dtype == "float16":
            self.features.add("fp16")
        op = e.op
        if op in C_BINARY:
            return f"({a} {C_BINARY[op]} {b})"
        if op == "floordiv":
            return self.fcall("floor", [f"({a} / {b})"], e.dtype)
        if op == "floormod":
            return f"({a} - {self.fcall('floor', [f'({a} / {b})'], e.dtype)} * {b})"
        if op in ("min", "max"):
            return self.fcall("f" + op, [a, b], e.dtype)
        if op == "pow":
            return self.fcall("pow", [a, b], e.dtype, fast=CUDA_FAST_MATH.get("pow"))
        raise BuildError(f"unknown float operator {op!r}")

    def fcall(self, fn: str, args: list, dtype: str, fast: str | None = None) -> str:
        """The C math function ``fn`` (double name) on ``args`` of float ``dtype``."""
        if dtype == "float64":
            return f"{fn}({', '.join(args)})"
        if dtype == "float32":
            name = fast if (fast and self.fast_math) else fn + "f"
            return f"{name}({', '.join(args)})"
        if dtype == "float16":
            self.features.add("fp16")
            conv = ", ".join(f"(float){a}" for a in args)
            return f"((half){fn}f({conv}))"
        raise BuildError(f"math function {fn} needs a float argument, got {dtype}")

    def _e_CmpOp(self, e: E.CmpOp) -> str:
        if self.lanes(e) > 1:
            return self._vector_error(e)
        return f"({self.expr(e.a)} {C_COMPARE[e.op]} {self.expr(e.b)})"

    def _e_LogicalOp(self, e: E.LogicalOp) -> str:
        return f"({self.expr(e.a)} {'&&' if e.op == 'and' else '||'} {self.expr(e.b)})"

    def _e_Not(self, e: E.Not) -> str:
        return f"(!{self.expr(e.a)})"

    def _e_Select(self, e: E.Select) -> str:
        return f"({self.expr(e.cond)} ? {self.expr(e.true_value)} : {self.expr(e.false_value)})"

    def _e_Cast(self, e: E.Cast) -> str:
        v = self.expr(e.value)
        src, dst = e.value.dtype, e.dtype
        if src == dst:
            return v
        if "float16" in (src, dst):
            self.features.add("fp16")
            if src == "float16" and dst != "float32":
                v = f"((float){v})"
            elif dst == "float16" and src != "float32":
                v = f"((float){v})"
        return f"(({c_type(dst)}){v})"

    def _e_Call(self, e: E.Call) -> str:
        if self.lanes(e) > 1:
            return self._vector_error(e)
        args = [self.expr(a) for a in e.args]
        name = e.name
        if not E.is_float(e.dtype):
            if name != "abs":
                raise BuildError(f"intrinsic {name} needs a float argument, got {e.dtype}")
            if e.dtype.startswith("uint") or e.dtype == "bool":
                return args[0]
            return f"{'llabs' if self.wide(e.args[0]) else 'abs'}({args[0]})"
        if name == "sigmoid":
            half = e.dtype == "float16"
            inner = "float32" if half else e.dtype
            x = f"((float){args[0]})" if half else args[0]
            one = float_literal(1.0, inner)
            sig = f"({one} / ({one} + {self.fcall('exp', [f'(-{x})'], inner, fast=CUDA_FAST_MATH['exp'])}))"
            if half:
                self.features.add("fp16")
                return f"((half){sig})"
            return sig
        if name not in CUDA_MATH:
            raise BuildError(f"unknown intrinsic {name!r}")
        return self.fcall(CUDA_MATH[name], args, e.dtype, fast=CUDA_FAST_MATH.get(name))

    def _e_CheckedIndex(self, e: E.CheckedIndex) -> str:
        if self.lanes(e) > 1:
            return self._vector_error(e)
        self.helpers.add("checked")
        text = f"checked_index({self._widened(e.value)}, {self._widened(e.extent)})"
        return text if self.wide(e) else f"(({c_type(e.dtype)}){text})"

    def _e_BufferLoad(self, e: E.BufferLoad) -> str:
        if e.lanes > 1 or self.lanes(e.index) > 1:
            return self._vector_error(e)
        if e.dtype == "float16":
            self.features.add("fp16")
        return f"{self.buffer(e.buffer)}[{self.expr(e.index)}]"

    def buffer(self, b: T.Buffer) -> str:
        name = self.buf_names.get(b)
        if name is None:
            raise BuildError(f"buffer {b.name!r} is not a parameter or an allocation in scope in "
                             f"kernel {self.k.name}")
        return name
