"""CPU code generation for lowered loop programs with llvmlite (TVM's CodeGenCPU).

    PrimFunc (after the driver's unroll/vectorize passes) --> llvmlite.ir module
             --parse+verify--> --O3 (new pass manager, host TargetMachine)-->
             --emit_object--> ELF object --MCJIT--> address

C ABI of the entry function ``name`` (= ``func.name``)::

    int32_t name(T0* restrict buf0, ..., int32_t sym0, ...);

one data pointer per ``func.params`` Buffer in order (float32 -> float*,
float64 -> double*, intN/uintN -> intN_t*, float16 -> 16-bit half storage,
bool -> uint8_t*), then one int32 per ``func.scalar_params`` Var in order.  The
pointers are ``noalias``.  It returns 0 on success and nonzero on failure (a
failed heap allocation).  Parallel loops run on this process's thread pool
(``thread_pool``; each JIT'd module's pool pointer is set to it), or on libgomp's
threads with ``BuildConfig(parallel_runtime="gomp")`` (see ``parallel``).

The module also defines ``__autosched_meta_<name>``, a constant null-terminated
JSON string ``{"name", "params": [{"name", "dtype", "shape": [int | var name]}],
"scalar_params": [names]}`` so a loaded object can be called without other files.

The JIT always targets the host CPU and its features (see ``Target``);
``CompiledFunction.object_code`` is the object the JIT loaded, while
:meth:`CompiledFunction.export_object` re-emits the same optimized IR for the
requested ``-mcpu``/``-mattr`` (for export to another machine).
"""

from __future__ import annotations

import ctypes
import json
from dataclasses import dataclass, field

import llvmlite.binding as llvm
from llvmlite import ir

from scheduler_core.base.build_config import BuildConfig
from scheduler_core.base.c_names import c_identifiers
from scheduler_core.base.errors import BuildError
from scheduler_core.base.llvm_cpu import create_target_machine, init_llvm
from scheduler_core.base.target import Target, TargetKind
from scheduler_core.ir import expr as E
from scheduler_core.ir import simplify as ES
from scheduler_core.ir import tir as T

from . import llvm_types as L
from . import thread_pool
from .llvm_stmt import FunctionEmitter, ModuleContext
from .parallel import load_libgomp

META_PREFIX = "__autosched_meta_"


@dataclass
class CompiledFunction:
    """A JIT-compiled PrimFunc: call it through ``address`` (or :attr:`ctypes_function`)."""

    name: str  # C symbol of the entry function (= func.name)
    func: T.PrimFunc
    target: Target
    llvm_ir: str  # the optimized module IR text
    object_code: bytes  # ELF relocatable object of the same module (what the JIT loaded)
    address: int  # address of the JIT-compiled entry function
    engine: object  # keeps the JIT alive (llvmlite ExecutionEngine)
    warnings: list = field(default_factory=list)

    def get_asm(self) -> str:
        """Assembly text of the JIT'd module (host CPU and features)."""
        cpu, feats, _ = self.target.jit_cpu_features()
        return create_target_machine(cpu, feats).emit_assembly(_parse(self.llvm_ir))

    def export_object(self) -> bytes:
        """ELF object of the optimized IR for the *requested* cpu/mattr (may not run here)."""
        cpu, feats = self.target.export_cpu_features()
        return create_target_machine(cpu, feats).emit_object(_parse(self.llvm_ir))

    @property
    def ctypes_function(self):
        """The entry function as a ctypes callable: ``(ptr..., int32...) -> int32``.

        The callable holds a reference to this object, so the JIT'd code stays alive.
        """
        argtypes = [ctypes.c_void_p] * len(self.func.params) + [ctypes.c_int32] * len(self.func.scalar_params)
        fn = ctypes.CFUNCTYPE(ctypes.c_int32, *argtypes)(self.address)
        fn.compiled = self  # type: ignore[attr-defined]  # ctypes function objects take attributes
        return fn


def compile_primfunc(func: T.PrimFunc, target: str | Target = "llvm",
                     config: BuildConfig | None = None) -> CompiledFunction:
    """Compile ``func`` for the CPU and JIT it.

    ``func`` comes from the driver after the unroll and vectorize passes (they run once,
    there); builds LLVM IR (explicit vector types for vectorized loops, a thread-pool
    launch or GOMP_parallel for parallel loops), optimizes it at O3 for the host CPU,
    emits an object and loads it.
    ``config``: the build options (parallel runtime and chunking); default
    ``BuildConfig.current()``.  libgomp is loaded only when a parallel loop is launched on it.
    Raises BuildError for a non-llvm target, an unsupported node or an LLVM
    verification failure.  Source: TVM's ``tvm.build`` for ``llvm``.
    """
    target = Target.parse(target)
    if target.kind is not TargetKind.LLVM:
        raise BuildError(f"compile_primfunc builds for llvm targets, not {target.kind!r}")
    init_llvm()
    body = func.body
    try:
        module, uses_gomp = build_module(func, body, target, BuildConfig.resolve(config))
    except (TypeError, ValueError, AttributeError, AssertionError) as err:
        # llvmlite rejects ill-typed instructions eagerly (e.g. mismatched operand types)
        raise BuildError(f"codegen failed on {func.name}: {type(err).__name__}: {err}") from err
    cpu, feats, warnings = target.jit_cpu_features()
    tm = create_target_machine(cpu, feats)
    mod = _parse(str(module))
    optimize(mod, tm)
    llvm_ir = str(mod)
    obj = tm.emit_object(mod)
    if uses_gomp:
        load_libgomp()
    _check_externals(mod)
    engine = _jit(obj, tm)
    if thread_pool.has_hook(g.name for g in mod.global_variables):
        thread_pool.attach(engine.get_global_value_address(thread_pool.HOOK_SYMBOL))
    address = engine.get_function_address(func.name)
    if not address:
        raise BuildError(f"JIT did not produce a symbol {func.name!r}")
    return CompiledFunction(func.name, func, target, llvm_ir, obj, address, engine, warnings)


def build_module(func: T.PrimFunc, body: T.Stmt, target: Target, config: BuildConfig | None = None) -> tuple:
    """``(llvmlite.ir.Module, uses_gomp)`` for ``func`` with the (passed) ``body``; ``uses_gomp``:
    a parallel loop calls libgomp (``config.parallel_runtime == "gomp"``)."""
    module = ir.Module(name=func.name)
    ctx = ModuleContext(module, func.name, target.num_cores, target.vector_unit_bytes, config)
    args = [L.PTR] * len(func.params) + [L.I32] * len(func.scalar_params)
    fn = ir.Function(module, ir.FunctionType(L.I32, args), func.name)
    fn.attributes.add("nounwind")
    arg_names = c_identifiers([b.name for b in func.params] + [v.name for v in func.scalar_params])
    for i in range(len(func.params)):
        fn.args[i].name = arg_names[i]
        fn.args[i].add_attribute("noalias")
    em = FunctionEmitter(ctx, fn)
    for i, buf in enumerate(func.params):
        L.mem_type(buf.dtype)  # raises BuildError for an unsupported dtype
        em.bufs[buf] = fn.args[i]
    for j, var in enumerate(func.scalar_params):
        if var.dtype not in ("int32", "int64"):
            raise BuildError(f"scalar parameter {var.name} has dtype {var.dtype}; expected int32")
        arg = fn.args[len(func.params) + j]
        arg.name = arg_names[len(func.params) + j]
        em.bind(var, arg)
    em.stmt(body)
    em.finish()
    _add_meta(module, func)
    return module, ctx.uses_gomp


def _dim(d) -> object:
    v = ES.const_value(d)
    if isinstance(v, int):
        return v
    d = E.as_expr(d)
    return d.name if isinstance(d, E.Var) else str(d)


def meta_json(func: T.PrimFunc) -> str:
    """The JSON description stored in ``__autosched_meta_<name>``."""
    params = [{"name": b.name, "dtype": b.dtype, "shape": [_dim(d) for d in b.shape]}
              for b in func.params]
    return json.dumps({"name": func.name, "params": params,
                       "scalar_params": [v.name for v in func.scalar_params]})


def _add_meta(module: ir.Module, func: T.PrimFunc) -> None:
    data = bytearray(meta_json(func).encode("utf-8") + b"\0")
    ty = ir.ArrayType(L.I8, len(data))
    g = ir.GlobalVariable(module, ty, META_PREFIX + func.name)
    g.global_constant = True
    g.initializer = ir.Constant(ty, data)


def _parse(text: str):
    try:
        mod = llvm.parse_assembly(text)
        mod.verify()
    except RuntimeError as err:
        raise BuildError(f"LLVM rejected the generated module: {err}") from None
    return mod


def optimize(mod, tm) -> None:
    """Run LLVM's O3 pipeline (loop/SLP vectorizer, unroller) for ``tm``'s CPU."""
    mod.triple = tm.triple
    mod.data_layout = str(tm.target_data)
    pto = llvm.create_pipeline_tuning_options(speed_level=3)
    pto.loop_vectorization = True
    pto.slp_vectorization = True
    # LLVM's own unroller is off: unrolling is the schedule's choice (unroll annotations,
    # auto_unroll_max_step) and our unroll pass does it.  With it on, LLVM 22's O3 can
    # emit a use before its definition after unrolling our vector tiles, which then
    # aborts instruction selection ("Already set a value for this node!").
    pto.loop_unrolling = False
    pto.loop_interleaving = True
    pb = llvm.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(mod, pb)
    try:
        mod.verify()
    except RuntimeError as err:  # an optimizer bug must not reach instruction selection
        raise BuildError(f"LLVM produced invalid IR after optimization: {err}") from err


def _check_externals(mod) -> None:
    """Raise BuildError if a called external function is not in the process (the JIT
    would otherwise jump to address 0)."""
    process = ctypes.CDLL(None)
    for fn in mod.functions:
        if fn.is_declaration and not fn.name.startswith("llvm.") and not hasattr(process, fn.name):
            raise BuildError(f"external function {fn.name!r} is not available in this process")


def _jit(obj: bytes, tm):
    """An MCJIT engine holding the object file ``obj`` (external symbols from the process)."""
    engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), tm)
    engine.add_object_file(llvm.ObjectFileRef.from_data(obj))
    engine.finalize_object()
    return engine
