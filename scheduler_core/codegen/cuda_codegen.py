"""CUDA C code generation: the kernel form of a ``cuda`` program -> CUDA C source text.

    PrimFunc (kernel form, docs/gpu_kernel_form.md) --cuda_source--> "extern \"C\" __global__ ..."
                                                  --launch_json--> how to launch each kernel

Reading guide:

* :func:`program_kernels` splits the body into kernels and the host code around them
  (global ``Allocate``\\ s of intermediate tensors, ``LetStmt``\\ s, serial loops and conditions
  that launch kernels); each kernel's parameters are the global buffers it uses, then the
  scalar params, then the host variables it uses, in the order of its launch description
  (``attrs["kernels"]``; the lowering's order when there is none).
* :class:`_KernelPrinter` prints one kernel: GPU-tagged loops are not loops, their variable
  reads ``threadIdx.x`` / ``blockIdx.x`` (a loop of a thread tag shorter than the launch
  dimension is guarded by ``if (threadIdx.x < extent)``); ``shared`` allocations become
  ``__shared__`` arrays, ``local`` ones per-thread arrays (registers); ``Barrier`` is
  ``__syncthreads()``; unrolled and vectorized loops that are still loops carry
  ``#pragma unroll``.
* Integer arithmetic is ``int`` as in the IR; a node whose value range (from the loop
  extents and the scalar params' range ``[0, INT32_MAX]``) may leave int32 is computed in
  ``long long``.  ``floordiv``/``floormod`` print as ``/`` and ``%`` where both operands are
  provably non-negative, else through small ``__device__`` helpers with floor semantics
  (CUDA's ``/`` and ``%`` truncate towards zero).
* Vector statements (``Ramp``/``Broadcast`` after the vectorize pass) print one scalar
  expression per lane; a float32 access of 2 or 4 lanes at a stride-1 index whose base is
  provably a multiple of the lanes becomes one ``float2``/``float4`` load or store.
* Math intrinsics use the float versions (``expf``, ``rsqrtf``, ...; float16 computes in
  float); the approximate ``__expf``/``__logf``/``__sinf``/... only with
  ``attrs["fast_math"]``.  Float ``min``/``max`` are ``fminf``/``fmaxf``.

Every name in the generated text (tensor names are user input) goes through
``scheduler_core.base.c_names`` and is made distinct from CUDA's own names.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

import numpy as np

from scheduler_core.base.c_names import c_identifier, comment_text
from scheduler_core.base.errors import BuildError
from scheduler_core.base.target import Target
from scheduler_core.ir import expr as E
from scheduler_core.ir import expr_functor as EF
from scheduler_core.ir import tir as T
from scheduler_core.ir.bound import linear_form
from scheduler_core.ir.simplify import const_value, simplify

__all__ = ["CudaKernel", "cuda_source", "float_literal", "int_literal", "kernel_symbols",
           "launch_description", "launch_json", "program_kernels"]

INT32_MIN, INT32_MAX = -(2 ** 31), 2 ** 31 - 1
GPU_TAGS = ("blockIdx.x", "blockIdx.y", "blockIdx.z", "threadIdx.x", "threadIdx.y", "threadIdx.z")
# The largest launch dimension of each tag (CUDA's limits for grids and blocks).
_MAX_DIM = {"blockIdx.x": 2 ** 31 - 1, "blockIdx.y": 65535, "blockIdx.z": 65535,
            "threadIdx.x": 1024, "threadIdx.y": 1024, "threadIdx.z": 64}
BLOCK_TAGS = GPU_TAGS[:3]
THREAD_TAGS = GPU_TAGS[3:]

CTYPES = {
    "bool": "bool", "int8": "signed char", "int16": "short", "int32": "int", "int64": "long long",
    "uint8": "unsigned char", "uint16": "unsigned short", "uint32": "unsigned int",
    "uint64": "unsigned long long", "float16": "half", "float32": "float", "float64": "double",
}
_INT_RANGE = {
    "bool": (0, 1), "int8": (-128, 127), "int16": (-32768, 32767), "int32": (INT32_MIN, INT32_MAX),
    "int64": (-(2 ** 63), 2 ** 63 - 1), "uint8": (0, 255), "uint16": (0, 65535),
    "uint32": (0, 2 ** 32 - 1), "uint64": (0, 2 ** 64 - 1),
}
# Intrinsic -> C math function of double (the float version appends "f").
_MATH = {
    "exp": "exp", "log": "log", "sqrt": "sqrt", "rsqrt": "rsqrt", "tanh": "tanh", "fabs": "fabs",
    "erf": "erf", "floor": "floor", "ceil": "ceil", "round": "rint", "sin": "sin", "cos": "cos",
    "exp2": "exp2", "log2": "log2", "log10": "log10", "trunc": "trunc", "abs": "fabs", "pow": "pow",
}
# float32 intrinsics with an approximate hardware version (used only with attrs["fast_math"]).
_FAST = {"exp": "__expf", "log": "__logf", "sin": "__sinf", "cos": "__cosf", "log2": "__log2f",
         "log10": "__log10f", "pow": "__powf"}
_BIN = {"add": "+", "sub": "-", "mul": "*", "div": "/"}
_CMP = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}
_LANE = "xyzw"

# Identifiers the generated code uses itself (CUDA built-ins, math functions, helpers, C++
# keywords that C lacks): a user name equal to one of them gets a trailing "_".
RESERVED = frozenset(
    "threadIdx blockIdx blockDim gridDim warpSize half half2 __half nv_bfloat16 float2 float4 "
    "make_float2 make_float4 int2 int4 double2 min max abs llabs fminf fmaxf fmin fmax powf pow "
    "floordiv_i32 floormod_i32 floordiv_i64 floormod_i64 main std "
    "class new delete this template typename namespace using private public protected operator "
    "virtual friend try catch throw explicit mutable export and or not xor bitand bitor compl "
    "and_eq or_eq xor_eq not_eq wchar_t char8_t char16_t char32_t decltype noexcept concept "
    "requires co_await co_yield co_return consteval constinit dynamic_cast static_cast "
    "const_cast reinterpret_cast typeid".split()
    + [f + s for f in set(_MATH.values()) | {"sigmoid"} for s in ("", "f")]
    + list(_FAST.values())
)

_HELPERS = {
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
}


def _ctype(dtype: str) -> str:
    try:
        return CTYPES[dtype]
    except KeyError:
        raise BuildError(f"CUDA codegen has no C type for dtype {dtype!r}") from None


def _fits32(r: tuple | None) -> bool:
    return r is not None and INT32_MIN <= r[0] and r[1] <= INT32_MAX


# ---------------------------------------------------------------------------
# Names
# ---------------------------------------------------------------------------

class _Names:
    """Distinct C identifiers for user names (buffers, variables) and generated temporaries."""

    def __init__(self) -> None:
        self.taken: set = set()

    def fresh(self, name: str) -> str:
        ident = c_identifier(name)
        if ident.startswith("__") or (ident.startswith("_") and ident[1:2].isupper()):
            ident = "v" + ident  # reserved for the implementation in C++
        if ident in RESERVED:
            ident += "_"
        base, k = ident, 1
        while ident in self.taken:
            ident, k = f"{base}_{k}", k + 1
        self.taken.add(ident)
        return ident


# ---------------------------------------------------------------------------
# Program structure
# ---------------------------------------------------------------------------

@dataclass
class CudaKernel:
    """One kernel of the program.

    stmt: its statement (block loops and below).  host: the enclosing host bindings, outermost
    first: ``(var, "let", value, None)`` or ``(var, "loop", min, extent)``.  buffers/scalars:
    its parameters in call order (scalars: scalar params, then the host variables it uses).  grid/block: the
    launch dimensions (ints, or Exprs of the scalar params).  launch: its entry of
    ``attrs["kernels"]`` ({} when the PrimFunc has none).
    """

    index: int
    name: str
    symbol: str
    stmt: T.Stmt
    host: list
    buffers: list
    scalars: list
    grid: list
    block: list
    shared_bytes: int
    launch: dict = field(default_factory=dict)
    param_types: list = field(default_factory=list)  # dtype of each scalar param in the source

    @property
    def threads(self) -> int | None:
        n = 1
        for d in self.block:
            if not isinstance(d, int):
                return None
            n *= d
        return n


def _stmt_exprs(s: T.Stmt) -> list:
    if isinstance(s, T.For):
        return [s.min, s.extent]
    if isinstance(s, T.Store):
        return [s.index, s.value] + ([] if s.predicate is None else [s.predicate])
    if isinstance(s, T.IfThenElse):
        return [s.cond]
    if isinstance(s, T.LetStmt):
        return [s.value]
    if isinstance(s, T.Evaluate):
        return [s.value]
    if isinstance(s, T.Allocate):
        return list(s.buffer.shape)
    return []


def _all_nodes(s: T.Stmt):
    """Every expression node under ``s``."""
    for st in T.walk_stmts(s):
        for e in _stmt_exprs(st):
            yield from EF.walk(e)


def _used_buffers(s: T.Stmt) -> tuple[list, set]:
    """(global buffers loaded or stored under ``s`` in first-use order, the stored ones)."""
    used: dict = {}
    stored: set = set()
    for st in T.walk_stmts(s):
        if isinstance(st, T.Store):
            used.setdefault(st.buffer, None)
            stored.add(st.buffer)
        for e in _stmt_exprs(st):
            for n in EF.walk(e):
                if isinstance(n, E.BufferLoad):
                    used.setdefault(n.buffer, None)
    return [b for b in used if b.scope == "global"], stored


def _free_vars(s: T.Stmt) -> set:
    return {n for n in _all_nodes(s) if isinstance(n, E.Var)}


def _gpu_dims(s: T.Stmt) -> dict:
    """tag -> launch extent: the largest extent of the loops bound to the tag."""
    dims: dict = {}
    for st in T.walk_stmts(s):
        if isinstance(st, T.For) and st.kind in GPU_TAGS:
            ext = simplify(st.extent)
            prev = dims.get(st.kind)
            if prev is None:
                dims[st.kind] = ext
            else:
                a, b = const_value(prev), const_value(ext)
                if isinstance(a, int) and isinstance(b, int):
                    dims[st.kind] = ext if b > a else prev
                elif E.expr_str(prev) != E.expr_str(ext):
                    raise BuildError(f"kernel binds {st.kind} to loops of different extents "
                                     f"{E.expr_str(prev)} and {E.expr_str(ext)}")
    return dims


def _dim_value(e):
    v = const_value(e) if e is not None else 1
    return v if isinstance(v, int) else e


def _shared_bytes(s: T.Stmt) -> int:
    total = 0
    for st in T.walk_stmts(s):
        if isinstance(st, T.Allocate) and st.buffer.scope == "shared":
            total += _alloc_elems(st.buffer) * max(1, E.dtype_bits(st.buffer.dtype) // 8)
    return total


def _alloc_elems(b: T.Buffer) -> int:
    n = 1
    for d in b.shape:
        v = const_value(d)
        if not isinstance(v, int):
            raise BuildError(f"{b.scope} buffer {b.name!r} has a non-constant size "
                             f"{[E.expr_str(x) for x in b.shape]}")
        n *= v
    return n


def _has_gpu_loop(s: T.Stmt) -> bool:
    return any(isinstance(n, T.For) and n.kind in GPU_TAGS for n in T.walk_stmts(s))


def program_kernels(func: T.PrimFunc) -> tuple[list, list]:
    """``(kernels, intermediates)``: the :class:`CudaKernel`\\ s of ``func`` in program order
    and the global buffers allocated between kernels.

    Host code (around the kernels) is ``Allocate``\\ s of global buffers, ``LetStmt``\\ s, and
    serial loops and conditions that enclose GPU loops (a scan's time loop).  A host variable
    (let or loop) a kernel uses is passed to it as an int parameter after the scalar params,
    in name order, as the GPU lowering's launch description lists it.  Raises BuildError when
    the body is not in kernel form or disagrees with ``attrs["kernels"]``."""
    found: list = []
    intermediates: list = []

    def visit(s: T.Stmt, host: list) -> None:
        if isinstance(s, T.SeqStmt):
            for c in s.seq:
                visit(c, host)
        elif isinstance(s, T.Allocate) and s.buffer.scope == "global":
            intermediates.append(s.buffer)
            visit(s.body, host)
        elif isinstance(s, T.LetStmt):
            visit(s.body, host + [(s.var, "let", s.value, None)])
        elif isinstance(s, T.For) and s.kind not in GPU_TAGS and _has_gpu_loop(s.body):
            if s.kind not in ("serial", "unrolled"):
                raise BuildError(f"host loop {s.loop_var.name} ({s.kind}) encloses kernels: only serial "
                                 f"host loops can launch kernels")
            visit(s.body, host + [(s.loop_var, "loop", s.min, s.extent)])
        elif isinstance(s, T.IfThenElse) and _has_gpu_loop(s):
            visit(s.then_case, host)
            if s.else_case is not None:
                visit(s.else_case, host)
        else:
            found.append((s, host))

    visit(func.body, [])
    launches = func.attrs.get("kernels")
    if launches is not None and len(launches) != len(found):
        raise BuildError(f"attrs['kernels'] describes {len(launches)} kernels, the body has "
                         f"{len(found)}")
    globals_ = list(func.params) + intermediates
    kernels = []
    for i, (stmt, host) in enumerate(found):
        launch = dict(launches[i]) if launches is not None else {}
        name = str(launch.get("name", f"{func.name}_kernel{i}"))
        for st in T.walk_stmts(stmt):
            if isinstance(st, T.Allocate) and st.buffer.scope not in ("shared", "local"):
                raise BuildError(f"buffer {st.buffer.name!r} of scope {st.buffer.scope!r} is allocated "
                                 f"inside kernel {name}; only shared and local buffers can be")
        used, _ = _used_buffers(stmt)
        for b in used:
            if b not in globals_:
                raise BuildError(f"kernel {name} uses global buffer {b.name!r}, which is neither a "
                                 f"parameter nor an intermediate allocation")
        need = _free_vars(stmt)
        host_used = [h for h in host if h[0] in need]
        scalars_used = [v for v in func.scalar_params if v in need]
        if "params" in launch:
            buffers, scalars = _resolve_params(name, launch["params"], used, globals_,
                                               list(func.scalar_params) + [h[0] for h in host])
        else:
            buffers = [b for b in globals_ if b in used]
            scalars = scalars_used + sorted((h[0] for h in host_used), key=lambda v: v.name)
        missing = [v.name for v in scalars_used + [h[0] for h in host_used if h[1] == "loop"]
                   if v not in scalars]
        if missing:
            raise BuildError(f"kernel {name} uses the host values {missing}, missing from its launch "
                             f"description's params")
        dims = _gpu_dims(stmt)
        grid = [_dim_value(dims.get(t)) for t in BLOCK_TAGS]
        block = [_dim_value(dims.get(t)) for t in THREAD_TAGS]
        kernels.append(CudaKernel(i, name, "", stmt, host, buffers, scalars, grid, block,
                                  _shared_bytes(stmt), launch))
    return kernels, intermediates


def _resolve_params(kname: str, names: list, used: list, globals_: list, scalar_vars: list):
    """Map the launch description's parameter names to buffers and scalar Vars (a duplicate
    name takes the next buffer of that name, the ones the kernel uses first; a scalar name
    the innermost host variable of that name)."""
    buffers: list = []
    scalars: list = []
    order = [b for b in globals_ if b in used] + [b for b in globals_ if b not in used]
    for name in names:
        cand = next((b for b in order if b.name == name and b not in buffers), None)
        var = next((v for v in reversed(scalar_vars) if v.name == name and v not in scalars), None)
        if cand is not None and not scalars:
            buffers.append(cand)
        elif var is not None:
            scalars.append(var)
        else:
            raise BuildError(f"kernel {kname}: launch parameter {name!r} is not a buffer, scalar param "
                             f"or host variable of the function (or is listed twice)")
    missing = [b.name for b in used if b not in buffers]
    if missing:
        raise BuildError(f"kernel {kname} uses buffers {missing} missing from its launch "
                         f"description's params")
    return buffers, scalars


# ---------------------------------------------------------------------------
# Expression ranges
# ---------------------------------------------------------------------------

def _corners(op, a: tuple, b: tuple):
    vals = [op(x, y) for x in a for y in b]
    return (min(vals), max(vals))


def _trunc_div(x: int, y: int) -> int:
    q = abs(x) // abs(y)
    return q if (x >= 0) == (y >= 0) else -q


# ---------------------------------------------------------------------------
# The kernel printer
# ---------------------------------------------------------------------------

class _KernelPrinter:
    def __init__(self, kernel: CudaKernel, names: _Names, fast_math: bool, helpers: set,
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
        self.dims = _gpu_dims(kernel.stmt)
        self.aligned_bufs: dict = {}  # Buffer -> alignment bytes (vector accesses)
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

    def tmp(self, hint: str) -> str:
        self._tmp += 1
        return self.names.fresh(f"{hint}{self._tmp}")

    def emit(self, line: str) -> None:
        self.lines.append("  " * self.ind + line)

    # -- ranges and widths --------------------------------------------------------
    def range(self, e: E.Expr) -> tuple | None:
        """``(lo, hi)`` bounds of an integer expression, or None when unknown."""
        key = id(e)
        hit = self._memo_range.get(key)
        if hit is not None and hit[0] is e:  # (the node is kept alive: its id is not reused)
            return hit[1]
        r = self._range(e)
        self._memo_range[key] = (e, r)
        return r

    def _range(self, e: E.Expr) -> tuple | None:
        if isinstance(e, E.IntImm):
            return (e.value, e.value)
        if isinstance(e, E.Var):
            return self.env.get(e, _INT_RANGE.get(e.dtype))
        if isinstance(e, (E.CmpOp, E.LogicalOp, E.Not)):
            return (0, 1)
        if isinstance(e, E.Select):
            a, b = self.range(e.true_value), self.range(e.false_value)
            if a is None or b is None:
                return None
            return (min(a[0], b[0]), max(a[1], b[1]))
        if isinstance(e, E.Cast):
            dr = _INT_RANGE.get(e.dtype)
            if dr is None:
                return None
            if E.is_int(e.value.dtype) or e.value.dtype == "bool":
                vr = self.range(e.value)
                if vr is not None and dr[0] <= vr[0] and vr[1] <= dr[1]:
                    return vr
            return dr
        if isinstance(e, E.BinaryOp) and not E.is_float(e.dtype):
            a, b = self.range(e.a), self.range(e.b)
            if a is None or b is None:
                return None
            op = e.op
            if op == "add":
                return (a[0] + b[0], a[1] + b[1])
            if op == "sub":
                return (a[0] - b[1], a[1] - b[0])
            if op == "mul":
                return _corners(lambda x, y: x * y, a, b)
            if op == "min":
                return (min(a[0], b[0]), min(a[1], b[1]))
            if op == "max":
                return (max(a[0], b[0]), max(a[1], b[1]))
            if op in ("floordiv", "div"):
                if a[0] >= 0 and b[0] >= 0:  # (x / 0 is undefined: not a value to bound)
                    return (0, a[1] // max(b[0], 1))
                if b[0] <= 0 <= b[1]:
                    return None
                if op == "floordiv":
                    return _corners(lambda x, y: x // y, a, b)
                return _corners(_trunc_div, a, b)
            if op == "floormod":
                if a[0] >= 0 and b[0] >= 0:
                    return (0, max(0, min(a[1], b[1] - 1)))
                if b[0] == b[1] and b[0] > 0:
                    c = b[0]
                    if a[0] // c == a[1] // c:
                        return (a[0] % c, a[1] % c)
                    return (0, c - 1)
                if b[0] > 0:
                    return (0, b[1] - 1)
                if b[1] < 0:
                    return (b[0] + 1, 0)
                return None
            return None
        return _INT_RANGE.get(e.dtype)

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
            return not _fits32(self.range(e))
        return False

    def nonneg(self, e: E.Expr) -> bool:
        r = self.range(e)
        return r is not None and r[0] >= 0

    def int_ctype(self, var: E.Var, rng: tuple | None) -> tuple[str, bool]:
        """(C type, wide) of an int32 variable holding values in ``rng``."""
        if var.dtype == "int32" and not _fits32(rng):
            return "long long", True
        return _ctype(var.dtype), var.dtype in ("int64", "uint64")

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
            return f"({a} {_BIN[op]} {b})"
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
            return f"(({_ctype(e.dtype)})pow((double){a}, (double){b}))"
        raise BuildError(f"unknown integer operator {op!r}")

    def _float_binary(self, e: E.BinaryOp) -> str:
        a, b = self.expr(e.a), self.expr(e.b)
        if e.dtype == "float16":
            self.features.add("fp16")
        op = e.op
        if op in _BIN:
            return f"({a} {_BIN[op]} {b})"
        if op == "floordiv":
            return self.fcall("floor", [f"({a} / {b})"], e.dtype)
        if op == "floormod":
            return f"({a} - {self.fcall('floor', [f'({a} / {b})'], e.dtype)} * {b})"
        if op in ("min", "max"):
            return self.fcall("f" + op, [a, b], e.dtype)
        if op == "pow":
            return self.fcall("pow", [a, b], e.dtype, fast=_FAST.get("pow"))
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
        return f"({self.expr(e.a)} {_CMP[e.op]} {self.expr(e.b)})"

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
        return f"(({_ctype(dst)}){v})"

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
            sig = f"({one} / ({one} + {self.fcall('exp', [f'(-{x})'], inner, fast=_FAST['exp'])}))"
            if half:
                self.features.add("fp16")
                return f"((half){sig})"
            return sig
        if name not in _MATH:
            raise BuildError(f"unknown intrinsic {name!r}")
        return self.fcall(_MATH[name], args, e.dtype, fast=_FAST.get(name))

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

    # -- statements ----------------------------------------------------------------
    def stmt(self, s: T.Stmt) -> None:
        if isinstance(s, T.SeqStmt):
            for c in s.seq:
                self.stmt(c)
        elif isinstance(s, T.Barrier):
            self.emit("__syncthreads();")
        elif isinstance(s, T.For):
            self._for(s)
        elif isinstance(s, T.Store):
            self._store(s)
        elif isinstance(s, T.IfThenElse):
            self.emit(f"if {_paren(self.expr(s.cond))} {{")
            self._block(s.then_case)
            if s.else_case is not None:
                self.emit("} else {")
                self._block(s.else_case)
            self.emit("}")
        elif isinstance(s, T.Allocate):
            self._allocate(s)
        elif isinstance(s, T.LetStmt):
            self._let(s.var, s.value)
            self.stmt(s.body)
        elif isinstance(s, T.Evaluate):
            if isinstance(s.value, E.IntImm):
                return
            self.emit(f"(void){_paren(self.expr(s.value))};")
        else:
            raise BuildError(f"CUDA codegen cannot print a {type(s).__name__} statement")

    def _block(self, s: T.Stmt) -> None:
        self.ind += 1
        self.stmt(s)
        self.ind -= 1

    def _let(self, var: E.Var, value: E.Expr) -> None:
        if _lanes(value) > 1:
            raise BuildError(f"vector let {var.name} = {value} is not supported by CUDA codegen")
        text = self.expr(value)
        if E.is_int(var.dtype):
            rng = self.range(value)
            ctype, wide = self.int_ctype(var, rng)
            wide = wide or self.wide(value)
            if wide and var.dtype == "int32":
                ctype = "long long"
        else:
            rng, ctype, wide = None, _ctype(var.dtype), False
        name = self.bind(var, None, rng, wide)
        self.emit(f"{ctype} {name} = {text};")

    def _for(self, s: T.For) -> None:
        if s.kind in GPU_TAGS:
            self._gpu_loop(s)
            return
        if s.kind == "parallel":
            raise BuildError(f"a parallel loop ({s.loop_var.name}) has no meaning inside a CUDA kernel")
        ext_v = const_value(s.extent)
        if isinstance(ext_v, int) and ext_v <= 0:
            return
        lo_r, ext_r = self.range(s.min), self.range(s.extent)
        rng = None
        if lo_r is not None and ext_r is not None:
            rng = (lo_r[0], lo_r[1] + max(ext_r[1], 1) - 1)
        start = self.expr(s.min)
        if ext_v == 1:  # one iteration: a block binding the variable
            ctype, wide = self.int_ctype(s.loop_var, rng)
            self.emit("{")
            self.ind += 1
            name = self.bind(s.loop_var, None, rng, wide)
            self.emit(f"{ctype} {name} = {start};")
            self.stmt(s.body)
            self.ind -= 1
            self.emit("}")
            return
        end_e = simplify(s.min + s.extent)
        end_r = self.range(end_e)
        end = self.expr(end_e)
        # The variable's type must hold the end value too (the loop exits at it).
        type_r = None if rng is None or end_r is None else (rng[0], max(rng[1], end_r[1]))
        ctype, wide = self.int_ctype(s.loop_var, type_r)
        name = self.bind(s.loop_var, None, rng, wide)
        if s.kind in ("unrolled", "vectorized"):
            self.emit("#pragma unroll")
        self.emit(f"for ({ctype} {name} = {start}; {name} < {end}; ++{name}) {{")
        self._block(s.body)
        self.emit("}")

    def _gpu_loop(self, s: T.For) -> None:
        tag = s.kind
        builtin = f"((int){tag})"
        dim = self.dims.get(tag)
        dim_r = self.range(dim) if dim is not None else None
        hi = _MAX_DIM[tag] - 1  # the hardware's limit on the launch dimension
        if dim_r is not None:
            hi = min(hi, dim_r[1] - 1)
        lo_v = const_value(s.min)
        rng: tuple | None
        if lo_v == 0:
            text, rng = builtin, (0, hi)
        else:
            lo_r = self.range(s.min)
            text = f"({self.expr(s.min)} + {builtin})"
            rng = None if lo_r is None else (lo_r[0], lo_r[1] + hi)
        ext_r = self.range(s.extent)
        if ext_r is not None and rng is not None and lo_v == 0:
            rng = (0, min(rng[1], ext_r[1] - 1))
        guard = dim is not None and E.expr_str(simplify(s.extent)) != E.expr_str(dim)
        self.bind(s.loop_var, text, rng, False)
        if guard:
            self.emit(f"if ({builtin} < {self.expr(s.extent)}) {{")
            self._block(s.body)
            self.emit("}")
        else:
            self.stmt(s.body)

    def _allocate(self, s: T.Allocate) -> None:
        b = s.buffer
        if b.scope not in ("shared", "local"):
            raise BuildError(f"buffer {b.name!r} of scope {b.scope!r} is allocated inside kernel "
                             f"{self.k.name}; only shared and local buffers can be")
        n = _alloc_elems(b)
        name = self.names.fresh(b.name)
        self.buf_names[b] = name
        if b.dtype == "float16":
            self.features.add("fp16")
        align = self.aligned_bufs.get(b)
        prefix = "__shared__ " if b.scope == "shared" else ""
        attr = f"__align__({align}) " if align else ""
        self.emit(f"{prefix}{attr}{_ctype(b.dtype)} {name}[{max(n, 1)}];")
        self.stmt(s.body)

    # -- stores (scalar and vector) -----------------------------------------------
    def _store(self, s: T.Store) -> None:
        lanes = max(_lanes(s.index), _lanes(s.value),
                    1 if s.predicate is None else _lanes(s.predicate))
        if lanes == 1:
            if s.predicate is not None:
                self.emit(f"if {_paren(self.expr(s.predicate))} {{")
                self.ind += 1
            self.emit(f"{self.buffer(s.buffer)}[{self.expr(s.index)}] = {self.expr(s.value)};")
            if s.predicate is not None:
                self.ind -= 1
                self.emit("}")
            return
        self._vector_store(s, lanes)

    def _vector_store(self, s: T.Store, lanes: int) -> None:
        index = s.index if _lanes(s.index) > 1 else E.Ramp(s.index, E.const(1, s.index.dtype), lanes,
                                                            s.index.dtype)
        dst = self.buffer(s.buffer)
        # Hoist the aligned vector loads evaluated for every lane (not under a Select branch).
        hoisted: dict = {}
        if s.predicate is None:
            base = _aligned_base(s.buffer, index, lanes, s.value.dtype)
            src_load = s.value if isinstance(s.value, E.BufferLoad) else None
            direct = None if src_load is None else \
                _aligned_base(src_load.buffer, src_load.index, lanes, src_load.dtype)
            if base is not None and src_load is not None and direct is not None:
                vt = f"float{lanes}"
                src = self.buffer(src_load.buffer)
                self.emit(f"*({vt}*)({dst} + {self.expr(base)}) = "
                          f"*(const {vt}*)({src} + {self.expr(direct)});")
                return
            for ld in _hoistable_loads(s.value):
                b = _aligned_base(ld.buffer, ld.index, _lanes(ld), ld.dtype)
                if b is None or id(ld) in hoisted:
                    continue
                tmp = self.tmp("_v")
                vt = f"float{_lanes(ld)}"
                self.emit(f"const {vt} {tmp} = *(const {vt}*)({self.buffer(ld.buffer)} + "
                          f"{self.expr(b)});")
                hoisted[id(ld)] = tmp
        vals = [self._lane_text(s.value, i, hoisted) for i in range(lanes)]
        base = _aligned_base(s.buffer, index, lanes, s.value.dtype) if s.predicate is None else None
        if base is not None:
            vt = f"float{lanes}"
            self.emit(f"*({vt}*)({dst} + {self.expr(base)}) = make_{vt}({', '.join(vals)});")
            return
        idxs = [self.expr(_scalarize(index, i, {})) for i in range(lanes)]
        preds = None if s.predicate is None else [
            self.expr(_scalarize(s.predicate, i, {})) for i in range(lanes)]
        reads_self = any(isinstance(n, E.BufferLoad) and n.buffer is s.buffer
                         for part in (s.value, s.predicate) if part is not None
                         for n in EF.walk(part))
        ct = _ctype(s.value.dtype)
        if reads_self:  # every lane reads before any lane writes
            if preds is not None:
                pnames = [self.tmp("_p") for _ in range(lanes)]
                for p, t in zip(pnames, preds):
                    self.emit(f"bool {p} = {t};")
                preds = pnames
            tnames = [self.tmp("_s") for _ in range(lanes)]
            for i, (t, v) in enumerate(zip(tnames, vals)):
                init = v if preds is None else f"({preds[i]} ? {v} : ({ct})0)"
                self.emit(f"{ct} {t} = {init};")
            vals = tnames
        for i in range(lanes):
            line = f"{dst}[{idxs[i]}] = {vals[i]};"
            if preds is not None:
                self.emit(f"if {_paren(preds[i])} {{")
                self.emit("  " + line)
                self.emit("}")
            else:
                self.emit(line)

    def _lane_text(self, e: E.Expr, lane: int, hoisted: dict) -> str:
        placeholders: dict = {}
        scalar = _scalarize(e, lane, hoisted, placeholders)
        for var, text in placeholders.items():
            self.bind(var, text, None)
        return self.expr(scalar)


# ---------------------------------------------------------------------------
# Vector helpers
# ---------------------------------------------------------------------------

def _lanes(e: E.Expr) -> int:
    best = 1
    for n in EF.walk(e):
        if isinstance(n, (E.Ramp, E.Broadcast)):
            best = max(best, n.lanes)
        elif isinstance(n, E.BufferLoad):
            best = max(best, n.lanes)
    return best


def _aligned_base(buf, index: E.Expr, lanes: int, dtype: str) -> E.Expr | None:
    """The scalar base of a float32 access of 2 or 4 contiguous lanes whose base is provably a
    multiple of ``lanes`` (so ``float2``/``float4`` is aligned), else None."""
    if dtype != "float32" or lanes not in (2, 4) or buf.dtype != "float32":
        return None
    if isinstance(index, E.Ramp):
        if index.lanes != lanes or const_value(index.stride) != 1:
            return None
        base = index.base
    elif _lanes(index) == 1:
        base = index
    else:
        return None
    if _lanes(base) > 1:
        return None
    terms, c = linear_form(base)
    if c % lanes or any(coef % lanes for _, coef in terms.values()):
        return None
    return base


def _hoistable_loads(e: E.Expr) -> list:
    """Vector loads of ``e`` evaluated for every lane: not inside a Select branch."""
    out: list = []
    stack = [e]
    while stack:
        n = stack.pop()
        if isinstance(n, E.BufferLoad):
            if _lanes(n) > 1:
                out.append(n)
            continue
        if isinstance(n, E.Select):
            stack.append(n.cond)
            continue
        stack.extend(EF.children(n))
    return out


def _scalarize(e: E.Expr, lane: int, hoisted: dict, placeholders: dict | None = None) -> E.Expr:
    """Lane ``lane`` of the vector expression ``e`` as a scalar expression.  A hoisted vector
    load becomes a placeholder Var whose text is ``tmp.x`` (recorded in ``placeholders``)."""
    if _lanes(e) == 1:
        return e
    if isinstance(e, E.Ramp):
        return simplify(e.base + e.stride * lane) if lane else e.base
    if isinstance(e, E.Broadcast):
        return e.value
    if isinstance(e, E.BufferLoad):
        tmp = hoisted.get(id(e))
        if tmp is not None:
            var = E.Var(f"{tmp}.{_LANE[lane]}", e.dtype)
            if placeholders is not None:
                placeholders[var] = f"{tmp}.{_LANE[lane]}"
            return var
        if _lanes(e.index) > 1:
            idx = _scalarize(e.index, lane, hoisted, placeholders)
        else:
            idx = simplify(e.index + lane) if lane else e.index
        return E.BufferLoad(e.buffer, idx, e.dtype, 1)
    kids = EF.children(e)
    return EF.rebuild(e, tuple(_scalarize(k, lane, hoisted, placeholders) for k in kids))


# ---------------------------------------------------------------------------
# Literals
# ---------------------------------------------------------------------------

def int_literal(v: int, dtype: str) -> str:
    """An integer constant of ``dtype`` as C text."""
    v = int(v)
    if dtype == "bool":
        return "true" if v else "false"
    if dtype == "int64":
        return "(-9223372036854775807LL - 1)" if v == -(2 ** 63) else f"{v}LL"
    if dtype == "uint64":
        return f"{v}ULL"
    if dtype == "uint32":
        return f"{v}u"
    if dtype == "int32":
        return "(-2147483647 - 1)" if v == INT32_MIN else str(v)
    return f"(({_ctype(dtype)}){v})"


def float_literal(v: float, dtype: str) -> str:
    """A float constant of ``dtype`` as C text: the shortest decimal that reads back as the
    same value (float32: as a float32), infinities and NaN through bit patterns."""
    v = float(v)
    if dtype == "float16":
        return f"((half){float_literal(v, 'float32')})"
    if math.isnan(v):
        return "__int_as_float(0x7fc00000)" if dtype == "float32" else \
            "__longlong_as_double(0x7ff8000000000000LL)"
    if math.isinf(v):
        if dtype == "float32":
            return f"__int_as_float({'0xff800000' if v < 0 else '0x7f800000'})"
        return f"__longlong_as_double({'0xfff0000000000000LL' if v < 0 else '0x7ff0000000000000LL'})"
    if dtype == "float32":
        text = str(np.float32(v))  # the shortest decimal that reads back as this float32
        if "e" not in text and "." not in text:
            text += ".0"
        return text + "f"
    text = repr(v)
    if "e" not in text and "." not in text:
        text += ".0"
    return text


def _paren(text: str) -> str:
    return text if text.startswith("(") and _balanced_outer(text) else f"({text})"


def _balanced_outer(text: str) -> bool:
    """Whether the first ``(`` of ``text`` closes at its last character."""
    depth = 0
    for i, ch in enumerate(text):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth == 0:
                return i == len(text) - 1
    return False


# ---------------------------------------------------------------------------
# Entry points
# ---------------------------------------------------------------------------

def _check_target(target) -> None:
    if target is None:
        return
    kind = target.kind if isinstance(target, Target) else str(target).split()[0] if str(target).strip() else ""
    if kind != "cuda":
        raise BuildError(f"CUDA code generation needs a cuda target, got {str(target)!r}")


def _symbols(kernels: list) -> None:
    taken: set = set()
    for k in kernels:
        sym = c_identifier(k.name)
        if sym.startswith("__") or sym in RESERVED:
            sym = "k" + sym
        base, n = sym, 1
        while sym in taken:
            sym, n = f"{base}_{n}", n + 1
        taken.add(sym)
        k.symbol = sym


def kernel_symbols(func: T.PrimFunc) -> list:
    """The ``extern "C"`` names of the kernels of ``func`` in the generated source, in order."""
    kernels, _ = program_kernels(func)
    _symbols(kernels)
    return [k.symbol for k in kernels]


def cuda_source(func: T.PrimFunc, target=None) -> str:
    """CUDA C source of the kernel-form ``func``: one ``extern "C" __global__`` function per
    kernel (``<name>_kernel<i>``, made a C identifier).  ``target``: a ``cuda`` Target or
    target string (or None); the source does not depend on the arch.  Raises BuildError when
    ``func`` is not in kernel form."""
    _check_target(target)
    kernels, _ = program_kernels(func)
    _symbols(kernels)
    fast_math = bool(func.attrs.get("fast_math"))
    helpers: set = set()
    features: set = set()
    bodies = []
    for k in kernels:
        bodies.append(_print_kernel(k, func, fast_math, helpers, features))
    head = [f"// CUDA kernels of {comment_text(func.name)}: {len(kernels)} kernel(s), generated from the "
            f"kernel form."]
    if fast_math:
        head.append("// fast math: approximate __expf/__logf/__sinf/... intrinsics")
    if "fp16" in features:
        head.append("#include <cuda_fp16.h>")
    for group in ("i32", "i64"):
        if group in helpers:
            head.append(f"// floor division / modulo ({'int' if group == 'i32' else 'long long'}): "
                        f"CUDA's / and % truncate towards zero")
            head.append(_HELPERS[group])
    return "\n".join(head) + "\n\n" + "\n\n".join(bodies) + "\n"


def _print_kernel(k: CudaKernel, func: T.PrimFunc, fast_math: bool, helpers: set, features: set) -> str:
    names = _Names()
    p = _KernelPrinter(k, names, fast_math, helpers, features)
    names.taken.add(k.symbol)
    _, stored = _used_buffers(k.stmt)
    # Buffers with aligned vector accesses (shared/local arrays get __align__).
    for st in T.walk_stmts(k.stmt):
        accesses = []
        if isinstance(st, T.Store):
            lanes = max(_lanes(st.index), _lanes(st.value))
            if lanes > 1:
                accesses.append((st.buffer, st.index, lanes, st.value.dtype))
        for e in _stmt_exprs(st):
            for n in EF.walk(e):
                if isinstance(n, E.BufferLoad) and _lanes(n) > 1:
                    accesses.append((n.buffer, n.index, _lanes(n), n.dtype))
        for buf, index, lanes, dtype in accesses:
            if _aligned_base(buf, index, lanes, dtype) is not None:
                p.aligned_bufs[buf] = max(p.aligned_bufs.get(buf, 0), 4 * lanes)
    params = []
    for b in k.buffers:
        name = names.fresh(b.name)
        p.buf_names[b] = name
        const = "" if b in stored else "const "
        if b.dtype == "float16":
            features.add("fp16")
        params.append(f"{const}{_ctype(b.dtype)}* __restrict__ {name}")
    # Scalar params range over [0, max] (shapes); host variables over their values' ranges.
    for v in func.scalar_params:
        p.env[v] = (0, _INT_RANGE[v.dtype][1]) if v.dtype in _INT_RANGE else None
    host_rng: dict = {}
    for var, kind, a, b in k.host:
        if kind == "let":
            rng = p.range(a) if E.is_int(var.dtype) else None
        else:
            lo, ext = p.range(a), p.range(b)
            rng = None if lo is None or ext is None else (lo[0], lo[1] + max(ext[1], 1) - 1)
        p.env[var] = host_rng[var] = rng
        p._memo_range.clear()
    # Host lets the kernel needs that are not passed: recomputed in the kernel.
    need = _free_vars(k.stmt)
    recompute = []
    for var, kind, a, _ in reversed(k.host):
        if var in need and var not in k.scalars and kind == "let":
            recompute.append((var, a))
            need |= {n for n in EF.walk(a) if isinstance(n, E.Var)}
    recompute.reverse()
    param_types = []
    for v in k.scalars:
        rng = host_rng[v] if v in host_rng else p.env.get(v)
        if E.is_int(v.dtype):
            ctype, wide = p.int_ctype(v, rng if v in host_rng else (0, 0))
        else:
            ctype, wide = _ctype(v.dtype), False
        name = p.bind(v, None, rng, wide)
        param_types.append("int64" if ctype == "long long" and v.dtype == "int32" else v.dtype)
        params.append(f"{ctype} {name}")
    threads = k.threads
    bounds = f"__launch_bounds__({threads}) " if threads is not None else ""
    sig = f'extern "C" __global__ void {bounds}{k.symbol}({", ".join(params)}) {{'
    for var, value in recompute:
        p._let(var, value)
    p.stmt(k.stmt)
    k.param_types = param_types
    return "\n".join([sig] + p.lines + ["}"])


def _json_dim(d) -> int | str:
    return d if isinstance(d, int) else E.expr_str(d)


def launch_description(func: T.PrimFunc) -> dict:
    """What a runtime needs to run the source of :func:`cuda_source`: the function's buffer and
    scalar parameters, the intermediate global buffers to allocate, and per kernel (in launch
    order) its symbol, grid, block, static shared bytes and arguments.  ``grid``/``block``
    entries are ints, or expression strings of the scalar params."""
    kernels, intermediates = program_kernels(func)
    _symbols(kernels)
    for k in kernels:  # the C type of each scalar argument (an int32 host value may need 64 bits)
        _print_kernel(k, func, bool(func.attrs.get("fast_math")), set(), set())
    params = list(func.params)

    def buf_json(b: T.Buffer) -> dict:
        return {"name": b.name, "dtype": b.dtype, "shape": [_json_dim(_dim_value(x)) for x in b.shape]}

    out_kernels = []
    for k in kernels:
        args: list = []
        for b in k.buffers:
            if b in params:
                args.append({"kind": "param", "index": params.index(b), "name": b.name})
            else:
                args.append({"kind": "intermediate", "index": intermediates.index(b), "name": b.name})
        for v, dt in zip(k.scalars, k.param_types):
            if v in func.scalar_params:
                args.append({"kind": "scalar", "index": list(func.scalar_params).index(v), "name": v.name,
                             "dtype": dt})
            else:  # a host let or loop variable: the runtime evaluates it
                args.append({"kind": "host", "name": v.name, "dtype": dt})
        launch = k.launch
        out_kernels.append({
            "name": launch.get("name", k.name),
            "symbol": k.symbol,
            "grid": list(launch.get("grid", [_json_dim(d) for d in k.grid])),
            "block": list(launch.get("block", [_json_dim(d) for d in k.block])),
            "shared_bytes": launch.get("shared_bytes", k.shared_bytes),
            "params": list(launch.get("params", [b.name for b in k.buffers] + [v.name for v in k.scalars])),
            "args": args,
        })
    return {
        "name": func.name,
        "params": [buf_json(b) for b in params],
        "scalar_params": [{"name": v.name, "dtype": v.dtype} for v in func.scalar_params],
        "intermediates": [buf_json(b) for b in intermediates],
        "fast_math": bool(func.attrs.get("fast_math")),
        "kernels": out_kernels,
    }


def launch_json(func: T.PrimFunc) -> str:
    """:func:`launch_description` as JSON text."""
    return json.dumps(launch_description(func), indent=1)

