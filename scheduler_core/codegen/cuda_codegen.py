"""CUDA C code generation: the kernel form of a ``cuda`` program -> CUDA C source text.

    PrimFunc (kernel form, docs/gpu_kernel_form.md) --cuda_source--> "extern \"C\" __global__ ..."
                                                  --cuda_launch.launch_json--> how to launch it

Reading guide (TVM's ``CodeGenCUDA``, ``src/target/source/codegen_cuda.cc``, in modules):

* ``cuda_kernels.program_kernels`` splits the body into kernels and the host code around
  them, with each kernel's parameters in the order of its launch description;
* this module's ``_KernelPrinter`` prints one kernel's statements (its expressions:
  ``cuda_expr.CudaExprPrinter``, integer ranges ``cuda_int_range``, constants
  ``cuda_literals``, math names ``cuda_intrinsics``, identifiers ``cuda_names``):
  GPU-tagged loops are not loops, their variable reads ``threadIdx.x`` / ``blockIdx.x`` (a
  loop of a thread tag shorter than the launch dimension is guarded by
  ``if (threadIdx.x < extent)``); ``shared`` allocations become ``__shared__`` arrays
  (or, when a kernel needs more than the 48 KiB a block may declare statically, slices of
  one ``extern __shared__`` array of dynamic shared memory that the launch asks for),
  ``local`` ones per-thread arrays (registers); ``Barrier`` is ``__syncthreads()``;
  unrolled and vectorized loops that are still loops carry ``#pragma unroll``;
* integer widths, floor division and math calls: ``cuda_expr``;
* vector statements (``Ramp``/``Broadcast`` after the vectorize pass) print one scalar
  expression per lane (``cuda_lanes``); a float32 access of 2 or 4 lanes at a stride-1 index
  whose base is provably a multiple of the lanes becomes one ``float2``/``float4`` access;
* ``cuda_launch.launch_description`` / ``launch_json``: how to launch each kernel.

Every name in the generated text (tensor names are user input) goes through
``scheduler_core.base.c_names`` and is made distinct from CUDA's own names.
"""

from __future__ import annotations

from scheduler_core.base.c_names import comment_text
from scheduler_core.base.errors import BuildError, InvalidTargetError
from scheduler_core.base.gpu_spec import CUDA_MAX_SHARED_MEMORY_PER_BLOCK, GPU_TAGS, MAX_LAUNCH_DIM
from scheduler_core.base.target import Target
from scheduler_core.ir import expr as E
from scheduler_core.ir import expr_functor as EF
from scheduler_core.ir import tir as T
from scheduler_core.ir.simplify import const_value, simplify
from scheduler_core.ir.stmt_functor import stmt_exprs

from .cuda_expr import FLOOR_HELPERS, CudaExprPrinter
from .cuda_int_range import INT_RANGE
from .cuda_kernels import CudaKernel, alloc_elements, program_kernels, stmt_vars, used_buffers
from .cuda_lanes import aligned_base, hoistable_loads, lanes_of, scalarize
from .cuda_literals import c_type, paren
from .cuda_names import CNames, assign_symbols

__all__ = ["cuda_source", "kernel_symbols", "print_kernel"]


class _KernelPrinter(CudaExprPrinter):
    """Prints one kernel: its statements (expressions: the base class)."""

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
            self.emit(f"if {paren(self.expr(s.cond))} {{")
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
            self.emit(f"(void){paren(self.expr(s.value))};")
        else:
            raise BuildError(f"CUDA codegen cannot print a {type(s).__name__} statement")

    def _block(self, s: T.Stmt) -> None:
        self.ind += 1
        self.stmt(s)
        self.ind -= 1

    def _let(self, var: E.Var, value: E.Expr) -> None:
        if lanes_of(value) > 1:
            raise BuildError(f"vector let {var.name} = {value} is not supported by CUDA codegen")
        text = self.expr(value)
        if E.is_int(var.dtype):
            rng = self.bounds(value)
            ctype, wide = self.int_ctype(var, rng)
            wide = wide or self.wide(value)
            if wide and var.dtype == "int32":
                ctype = "long long"
        else:
            rng, ctype, wide = None, c_type(var.dtype), False
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
        lo_r, ext_r = self.bounds(s.min), self.bounds(s.extent)
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
        end_r = self.bounds(end_e)
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
        dim_r = self.bounds(dim) if dim is not None else None
        hi = MAX_LAUNCH_DIM[tag] - 1  # the hardware's limit on the launch dimension
        if dim_r is not None:
            hi = min(hi, dim_r[1] - 1)
        lo_v = const_value(s.min)
        rng: tuple | None
        if lo_v == 0:
            text, rng = builtin, (0, hi)
        else:
            lo_r = self.bounds(s.min)
            text = f"({self.expr(s.min)} + {builtin})"
            rng = None if lo_r is None else (lo_r[0], lo_r[1] + hi)
        ext_r = self.bounds(s.extent)
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
        n = alloc_elements(b)
        name = self.names.fresh(b.name)
        self.buf_names[b] = name
        if b.dtype == "float16":
            self.features.add("fp16")
        align = self.aligned_bufs.get(b)
        if b.scope == "shared" and b in self.dynamic_offsets:
            # a slice of the block's dynamic shared memory (print_kernel declares it)
            self.emit(f"{c_type(b.dtype)}* {name} = ({c_type(b.dtype)}*)({self.dynamic_name} + "
                      f"{self.dynamic_offsets[b]});")
            self.stmt(s.body)
            return
        prefix = "__shared__ " if b.scope == "shared" else ""
        attr = f"__align__({align}) " if align else ""
        self.emit(f"{prefix}{attr}{c_type(b.dtype)} {name}[{max(n, 1)}];")
        self.stmt(s.body)

    # -- stores (scalar and vector) -----------------------------------------------
    def _store(self, s: T.Store) -> None:
        lanes = max(lanes_of(s.index), lanes_of(s.value),
                    1 if s.predicate is None else lanes_of(s.predicate))
        if lanes == 1:
            if s.predicate is not None:
                self.emit(f"if {paren(self.expr(s.predicate))} {{")
                self.ind += 1
            self.emit(f"{self.buffer(s.buffer)}[{self.expr(s.index)}] = {self.expr(s.value)};")
            if s.predicate is not None:
                self.ind -= 1
                self.emit("}")
            return
        self._vector_store(s, lanes)

    def _vector_store(self, s: T.Store, lanes: int) -> None:
        index = s.index if lanes_of(s.index) > 1 else E.Ramp(s.index, E.const(1, s.index.dtype), lanes,
                                                            s.index.dtype)
        dst = self.buffer(s.buffer)
        # Hoist the aligned vector loads evaluated for every lane (not under a Select branch).
        hoisted: dict = {}
        if s.predicate is None:
            base = aligned_base(s.buffer, index, lanes, s.value.dtype)
            src_load = s.value if isinstance(s.value, E.BufferLoad) else None
            direct = None if src_load is None else \
                aligned_base(src_load.buffer, src_load.index, lanes, src_load.dtype)
            if base is not None and src_load is not None and direct is not None:
                vt = f"float{lanes}"
                src = self.buffer(src_load.buffer)
                self.emit(f"*({vt}*)({dst} + {self.expr(base)}) = "
                          f"*(const {vt}*)({src} + {self.expr(direct)});")
                return
            for ld in hoistable_loads(s.value):
                b = aligned_base(ld.buffer, ld.index, lanes_of(ld), ld.dtype)
                if b is None or id(ld) in hoisted:
                    continue
                tmp = self.tmp("_v")
                vt = f"float{lanes_of(ld)}"
                self.emit(f"const {vt} {tmp} = *(const {vt}*)({self.buffer(ld.buffer)} + "
                          f"{self.expr(b)});")
                hoisted[id(ld)] = tmp
        vals = [self._lane_text(s.value, i, hoisted) for i in range(lanes)]
        base = aligned_base(s.buffer, index, lanes, s.value.dtype) if s.predicate is None else None
        if base is not None:
            vt = f"float{lanes}"
            self.emit(f"*({vt}*)({dst} + {self.expr(base)}) = make_{vt}({', '.join(vals)});")
            return
        idxs = [self.expr(scalarize(index, i, {})) for i in range(lanes)]
        preds = None if s.predicate is None else [
            self.expr(scalarize(s.predicate, i, {})) for i in range(lanes)]
        reads_self = any(isinstance(n, E.BufferLoad) and n.buffer is s.buffer
                         for part in (s.value, s.predicate) if part is not None
                         for n in EF.walk(part))
        ct = c_type(s.value.dtype)
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
                self.emit(f"if {paren(preds[i])} {{")
                self.emit("  " + line)
                self.emit("}")
            else:
                self.emit(line)

    def _lane_text(self, e: E.Expr, lane: int, hoisted: dict) -> str:
        placeholders: dict = {}
        scalar = scalarize(e, lane, hoisted, placeholders)
        for var, text in placeholders.items():
            self.bind(var, text, None)
        return self.expr(scalar)


# ---------------------------------------------------------------------------
# Entry points
# ---------------------------------------------------------------------------

def _check_target(target) -> None:
    if target is None:
        return
    try:
        gpu = Target.parse(target).is_gpu
    except InvalidTargetError:
        gpu = False
    if not gpu:
        raise BuildError(f"CUDA code generation needs a cuda target, got {str(target)!r}")


def kernel_symbols(func: T.PrimFunc) -> list:
    """The ``extern "C"`` names of the kernels of ``func`` in the generated source, in order."""
    kernels, _ = program_kernels(func)
    assign_symbols(kernels)
    return [k.symbol for k in kernels]


def cuda_source(func: T.PrimFunc, target=None) -> str:
    """CUDA C source of the kernel-form ``func``: one ``extern "C" __global__`` function per
    kernel (``<name>_kernel<i>``, made a C identifier).  ``target``: a ``cuda`` Target or
    target string (or None); the source does not depend on the arch.  Raises BuildError when
    ``func`` is not in kernel form."""
    _check_target(target)
    kernels, _ = program_kernels(func)
    assign_symbols(kernels)
    fast_math = bool(func.attrs.get("fast_math"))
    helpers: set = set()
    features: set = set()
    bodies = []
    for k in kernels:
        bodies.append(print_kernel(k, func, fast_math, helpers, features))
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
            head.append(FLOOR_HELPERS[group])
    if "checked" in helpers:
        head.append("// checked_index: a gathered index outside its tensor reads element 0 and sets bit 2 "
                    "(INDEX_OUT_OF_BOUNDS) of autosched_status, which the host clears before its launches and "
                    "reads after them")
        head.append(FLOOR_HELPERS["checked"])
    return "\n".join(head) + "\n\n" + "\n\n".join(bodies) + "\n"


def print_kernel(k: CudaKernel, func: T.PrimFunc, fast_math: bool, helpers: set, features: set) -> str:
    """The ``extern "C" __global__`` function of kernel ``k`` (its ``symbol`` set); sets
    ``k.param_types``, and adds to ``helpers`` / ``features`` what the text needs."""
    names = CNames()
    p = _KernelPrinter(k, names, fast_math, helpers, features)
    names.taken.add(k.symbol)
    p.aligned_bufs = _aligned_buffers(k.stmt)
    p.dynamic_offsets, p.dynamic_name = {}, ""
    if k.shared_bytes > CUDA_MAX_SHARED_MEMORY_PER_BLOCK:
        p.dynamic_name = names.fresh("dyn_shared")
        p.dynamic_offsets, k.dynamic_shared_bytes = dynamic_shared_layout(k.stmt)
    params = _buffer_params(p, k)
    host_rng = _host_ranges(p, k, func)
    # Host lets the kernel needs that are not passed: recomputed in the kernel.
    need = stmt_vars(k.stmt)
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
            ctype, wide = c_type(v.dtype), False
        name = p.bind(v, None, rng, wide)
        param_types.append("int64" if ctype == "long long" and v.dtype == "int32" else v.dtype)
        params.append(f"{ctype} {name}")
    threads = k.threads
    bounds = f"__launch_bounds__({threads}) " if threads is not None else ""
    sig = f'extern "C" __global__ void {bounds}{k.symbol}({", ".join(params)}) {{'
    if p.dynamic_offsets:
        sig += (f"\n  // {k.dynamic_shared_bytes} bytes of shared memory: more than the "
                f"{CUDA_MAX_SHARED_MEMORY_PER_BLOCK} a block may declare statically, so it is dynamic "
                "(the launch opts in)"
                f"\n  extern __shared__ __align__({DYNAMIC_SHARED_ALIGN}) unsigned char {p.dynamic_name}[];")
    for var, value in recompute:
        p._let(var, value)
    p.stmt(k.stmt)
    k.param_types = param_types
    return "\n".join([sig] + p.lines + ["}"])


DYNAMIC_SHARED_ALIGN = 16  # bytes: the widest vector access (float4) of a shared buffer


def dynamic_shared_layout(stmt: T.Stmt) -> tuple[dict, int]:
    """``({shared buffer: byte offset}, total bytes)``: every ``shared`` allocation of a kernel
    placed one after another in its dynamic shared memory, each at a multiple of
    ``DYNAMIC_SHARED_ALIGN`` (no reuse between allocations, as static ``__shared__`` arrays)."""
    offsets: dict = {}
    total = 0
    for st in T.walk_stmts(stmt):
        if isinstance(st, T.Allocate) and st.buffer.scope == "shared" and st.buffer not in offsets:
            total = -(-total // DYNAMIC_SHARED_ALIGN) * DYNAMIC_SHARED_ALIGN
            offsets[st.buffer] = total
            total += max(alloc_elements(st.buffer), 1) * T.dtype_bytes(st.buffer.dtype)
    return offsets, total


def _buffer_params(p: _KernelPrinter, k: CudaKernel) -> list:
    """The buffer parameters of the kernel's signature (``const`` where it only reads them)."""
    _, stored = used_buffers(k.stmt)
    params = []
    for b in k.buffers:
        name = p.names.fresh(b.name)
        p.buf_names[b] = name
        const = "" if b in stored else "const "
        if b.dtype == "float16":
            p.features.add("fp16")
        params.append(f"{const}{c_type(b.dtype)}* __restrict__ {name}")
    return params


def _host_ranges(p: _KernelPrinter, k: CudaKernel, func: T.PrimFunc) -> dict:
    """Scalar params range over [0, max] (shapes); host variables over their values' ranges
    (returned: host var -> range)."""
    for v in func.scalar_params:
        p.set_range(v, (0, INT_RANGE[v.dtype][1]) if v.dtype in INT_RANGE else None)
    host_rng: dict = {}
    for var, kind, a, b in k.host:
        if kind == "let":
            rng = p.bounds(a) if E.is_int(var.dtype) else None
        else:
            lo, ext = p.bounds(a), p.bounds(b)
            rng = None if lo is None or ext is None else (lo[0], lo[1] + max(ext[1], 1) - 1)
        host_rng[var] = rng
        p.set_range(var, rng)
    return host_rng


def _aligned_buffers(stmt: T.Stmt) -> dict:
    """Buffer -> alignment bytes of its aligned float2/float4 accesses (shared/local arrays
    get ``__align__``)."""
    out: dict = {}
    for st in T.walk_stmts(stmt):
        accesses = []
        if isinstance(st, T.Store):
            lanes = max(lanes_of(st.index), lanes_of(st.value))
            if lanes > 1:
                accesses.append((st.buffer, st.index, lanes, st.value.dtype))
        for e in stmt_exprs(st):
            for n in EF.walk(e):
                if isinstance(n, E.BufferLoad) and lanes_of(n) > 1:
                    accesses.append((n.buffer, n.index, lanes_of(n), n.dtype))
        for buf, index, lanes, dtype in accesses:
            if aligned_base(buf, index, lanes, dtype) is not None:
                out[buf] = max(out.get(buf, 0), 4 * lanes)
    return out
