"""The kernels of a kernel-form program and the host code around them.

    kernel-form PrimFunc --program_kernels--> ([CudaKernel], intermediate global buffers)

The body is host code (global ``Allocate``\\ s of intermediate tensors, ``LetStmt``\\ s,
serial loops and conditions that launch kernels) around kernel nests; each kernel's
parameters are the global buffers it uses, then the scalar params, then the host variables
it uses, in the order of its launch description (``attrs["kernels"]``; the lowering's order
when there is none).  The device side of TVM's ``SplitHostDevice``
(``src/tir/transforms/split_host_device.cc``) as the CUDA printer reads it back.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from scheduler_core.base.errors import BuildError
from scheduler_core.base.gpu_spec import BLOCK_TAGS, GPU_TAGS, THREAD_TAGS
from scheduler_core.ir import expr as E
from scheduler_core.ir import expr_functor as EF
from scheduler_core.ir import tir as T
from scheduler_core.ir.simplify import const_value, simplify
from scheduler_core.ir.stmt_functor import stmt_exprs
from scheduler_core.lowering.kernel_form import has_gpu_loop

__all__ = ["CudaKernel", "program_kernels", "used_buffers", "stmt_vars", "gpu_dims", "dim_value",
           "alloc_elements"]


@dataclass
class CudaKernel:
    """One kernel of the program.

    stmt: its statement (block loops and below).  host: the enclosing host bindings, outermost
    first: ``(var, "let", value, None)`` or ``(var, "loop", min, extent)``.  buffers/scalars:
    its parameters in call order (scalars: scalar params, then the host variables it uses).
    grid/block: the launch dimensions (ints, or Exprs of the scalar params).  launch: its entry of
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
    dynamic_shared_bytes: int = 0  # > 0: its shared buffers live in dynamic shared memory (set by codegen)

    @property
    def threads(self) -> int | None:
        n = 1
        for d in self.block:
            if not isinstance(d, int):
                return None
            n *= d
        return n


def used_buffers(s: T.Stmt) -> tuple[list, set]:
    """(global buffers loaded or stored under ``s`` in first-use order, the stored ones)."""
    used: dict = {}
    stored: set = set()
    for st in T.walk_stmts(s):
        if isinstance(st, T.Store):
            used.setdefault(st.buffer, None)
            stored.add(st.buffer)
        for e in stmt_exprs(st):
            for n in EF.walk(e):
                if isinstance(n, E.BufferLoad):
                    used.setdefault(n.buffer, None)
    return [b for b in used if b.scope == "global"], stored


def stmt_vars(s: T.Stmt) -> set:
    """Every Var used in the expressions of ``s`` (Allocate shapes included)."""
    return {n for st in T.walk_stmts(s) for e in stmt_exprs(st) for n in EF.walk(e) if isinstance(n, E.Var)}


def gpu_dims(s: T.Stmt) -> dict:
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


def dim_value(e):
    """A launch dimension: its int value, else the expression (None: 1)."""
    v = const_value(e) if e is not None else 1
    return v if isinstance(v, int) else e


def _shared_bytes(s: T.Stmt) -> int:
    return sum(alloc_elements(st.buffer) * T.dtype_bytes(st.buffer.dtype) for st in T.walk_stmts(s)
               if isinstance(st, T.Allocate) and st.buffer.scope == "shared")


def alloc_elements(b: T.Buffer) -> int:
    """Elements of a buffer allocated in a kernel; BuildError when its shape is not constant."""
    n = b.num_elements
    if n is None:
        raise BuildError(f"{b.scope} buffer {b.name!r} has a non-constant size "
                         f"{[E.expr_str(x) for x in b.shape]}")
    return n


def program_kernels(func: T.PrimFunc) -> tuple[list, list]:
    """``(kernels, intermediates)``: the :class:`CudaKernel`\\ s of ``func`` in program order
    and the global buffers allocated between kernels.

    Host code (around the kernels) is ``Allocate``\\ s of global buffers, ``LetStmt``\\ s, and
    serial loops and conditions that enclose GPU loops (a scan's time loop).  A host variable
    (let or loop) a kernel uses is passed to it as an int parameter after the scalar params,
    in name order, as the GPU lowering's launch description lists it.  Raises BuildError when
    the body is not in kernel form or disagrees with ``attrs["kernels"]``."""
    found, intermediates = _host_split(func.body)
    launches = func.attrs.get("kernels")
    if launches is not None and len(launches) != len(found):
        raise BuildError(f"attrs['kernels'] describes {len(launches)} kernels, the body has "
                         f"{len(found)}")
    globals_ = list(func.params) + intermediates
    kernels = [_kernel(i, stmt, host, func, dict(launches[i]) if launches is not None else {}, globals_)
               for i, (stmt, host) in enumerate(found)]
    return kernels, intermediates


def _host_split(body: T.Stmt) -> tuple[list, list]:
    """``([(kernel statement, host bindings around it)], intermediate global buffers)``."""
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
        elif isinstance(s, T.For) and s.kind not in GPU_TAGS and has_gpu_loop(s.body):
            if s.kind not in ("serial", "unrolled"):
                raise BuildError(f"host loop {s.loop_var.name} ({s.kind}) encloses kernels: only serial "
                                 f"host loops can launch kernels")
            visit(s.body, host + [(s.loop_var, "loop", s.min, s.extent)])
        elif isinstance(s, T.IfThenElse) and has_gpu_loop(s):
            visit(s.then_case, host)
            if s.else_case is not None:
                visit(s.else_case, host)
        else:
            found.append((s, host))

    visit(body, [])
    return found, intermediates


def _kernel(i: int, stmt: T.Stmt, host: list, func: T.PrimFunc, launch: dict, globals_: list) -> CudaKernel:
    """The ``i``-th kernel ``stmt`` (launch description ``launch``, {} when none), checked."""
    name = str(launch.get("name", f"{func.name}_kernel{i}"))
    for st in T.walk_stmts(stmt):
        if isinstance(st, T.Allocate) and st.buffer.scope not in ("shared", "local"):
            raise BuildError(f"buffer {st.buffer.name!r} of scope {st.buffer.scope!r} is allocated "
                             f"inside kernel {name}; only shared and local buffers can be")
    used, _ = used_buffers(stmt)
    for b in used:
        if b not in globals_:
            raise BuildError(f"kernel {name} uses global buffer {b.name!r}, which is neither a "
                             f"parameter nor an intermediate allocation")
    need = stmt_vars(stmt)
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
    dims = gpu_dims(stmt)
    grid = [dim_value(dims.get(t)) for t in BLOCK_TAGS]
    block = [dim_value(dims.get(t)) for t in THREAD_TAGS]
    return CudaKernel(i, name, "", stmt, host, buffers, scalars, grid, block, _shared_bytes(stmt), launch)


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
