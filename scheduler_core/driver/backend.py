"""The per-kind backend table: what a target kind does to lower, build, export and queue a program.

    backend_of(target) -> Backend(kind, rewrites_layout, lower, accept, build, lowered_text,
                                  artifact_ext, export, device_errors, queue_device)

    llvm:  State --lower_state + passes--> PrimFunc --CPU legalize, LLVM--> Module  --> <n>.so
    cuda:  State --lower_state--> PrimFunc --build_cuda (kernel form, CUDA C, lazy nvcc)-->
           CudaModule --check_gpu_program, nvcc--> <n>.cubin (+ .cu, .ptx, .json)

Code that needs to know what a kind does asks this table instead of comparing the kind
(TVM keeps the same knowledge in its ``TargetKind`` registry and its ``codegen.build_<kind>``
functions).  A new kind is one more :class:`Backend` in :data:`BACKENDS`.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from scheduler_core.base.build_config import BuildConfig
from scheduler_core.base.errors import BuildError
from scheduler_core.base.gpu_spec import GPU_LOOP_KINDS
from scheduler_core.base.target import Target, TargetKind
from scheduler_core.codegen import compile_primfunc
from scheduler_core.ir import tir as T
from scheduler_core.lowering.lower import lower_state
from scheduler_core.runtime.cuda_module import CudaModule
from scheduler_core.runtime.module import Module
from scheduler_core.schedule.loop_state import State

from .cuda_build import build_cuda
from .gpu_validity import check_gpu_program
from .pipeline import PASSES_DONE, run_passes


@dataclass(frozen=True)
class Backend:
    """What one target kind does with a schedule.

    kind : TargetKind
    rewrites_layout : bool, whether the tuned layouts are applied before lowering (TVM does not
        rewrite layouts on GPUs)
    lower : (state, args, name) -> PrimFunc, the program this backend builds
    accept : PrimFunc -> PrimFunc, a program lowered elsewhere made buildable (CPU: the passes;
        cuda: refuses one the CPU passes already ran on).  Raises BuildError.
    build : (func, target, name, config, device_image) -> Module | CudaModule; ``device_image``:
        a binary compiled before from this program (the cuda runner reuses the builder's cubin)
    lowered_text : (func, build) -> str, the program text a user is shown (cuda: the kernel form)
    artifact_ext : str, the extension of the file a measurement builder writes
    export : (module, target, filename) -> None, write the builder's artifacts; raises
        BuildError (cuda: InvalidGpuProgramError for a program the GPU cannot launch)
    device_errors : bool, a BuildError is the device compiler's (COMPILE_DEVICE), else the host's
    queue_device : Target -> str or None, the device model in the name of the measurement queue
        (cuda: the arch; None: the worker's own CPU)
    """

    kind: TargetKind
    rewrites_layout: bool
    lower: Callable[[State, Any, str], T.PrimFunc]
    accept: Callable[[T.PrimFunc], T.PrimFunc]
    build: Callable[..., Any]
    lowered_text: Callable[[T.PrimFunc, Callable[[], Any]], str]
    artifact_ext: str
    export: Callable[[Any, Target, str], None]
    device_errors: bool
    queue_device: Callable[[Target], str | None]


# -- llvm ---------------------------------------------------------------------------------

def _cpu_legalize(s: T.Stmt) -> T.Stmt:
    """GPU thread bindings and vthreads run as serial loops on a CPU target."""
    if isinstance(s, T.For):
        body = _cpu_legalize(s.body)
        kind = "serial" if s.kind in GPU_LOOP_KINDS else s.kind
        if body is s.body and kind == s.kind:
            return s
        return replace(s, body=body, kind=kind)
    if isinstance(s, T.SeqStmt):
        return T.SeqStmt(tuple(_cpu_legalize(c) for c in s.seq))
    if isinstance(s, T.IfThenElse):
        return replace(s, then_case=_cpu_legalize(s.then_case),
                       else_case=None if s.else_case is None else _cpu_legalize(s.else_case))
    if isinstance(s, (T.Allocate, T.LetStmt)):
        return replace(s, body=_cpu_legalize(s.body))
    return s


def _lower_cpu(state: State, args: Any, name: str) -> T.PrimFunc:
    return run_passes(lower_state(state, args, name))


def _build_cpu(func: T.PrimFunc, target: Target, name: str, config: BuildConfig | None = None,
               device_image: bytes | None = None) -> Module:
    func = run_passes(func)
    if func.name != name:
        func = replace(func, name=name)
    func = replace(func, body=_cpu_legalize(func.body))
    return Module.from_compiled(compile_primfunc(func, target, config))


def _export_cpu(module: Module, target: Target, filename: str) -> None:
    module.export_library(filename)


# -- cuda ---------------------------------------------------------------------------------

def _accept_cuda(func: T.PrimFunc) -> T.PrimFunc:
    if func.attrs.get(PASSES_DONE):
        raise BuildError("build for cuda needs the program of lower_state (before the CPU passes); "
                         "pass the schedule, not the output of lower()")
    return func


def _build_cuda(func: T.PrimFunc, target: Target, name: str, config: BuildConfig | None = None,
                device_image: bytes | None = None) -> CudaModule:
    return build_cuda(func, target, name, cubin=device_image)


def _export_cuda(module: CudaModule, target: Target, filename: str) -> None:
    """``filename`` (.cubin) with its .ptx, .cu and .json beside it; the static checks run
    before nvcc, the register check after it (it needs ptxas)."""
    check_gpu_program(module, target, registers=False)
    device = module.imported_modules[0]
    device.ptx()  # nvcc: a BuildError here is the device compiler's
    check_gpu_program(module, target, registers=True)
    stem = os.path.splitext(filename)[0]
    for ext in ("cu", "ptx", "json"):
        device.save(f"{stem}.{ext}")
    device.save(filename, "cubin")


BACKENDS: dict[TargetKind, Backend] = {
    TargetKind.LLVM: Backend(
        TargetKind.LLVM, rewrites_layout=True, lower=_lower_cpu, accept=run_passes, build=_build_cpu,
        lowered_text=lambda func, build: str(func), artifact_ext="so", export=_export_cpu,
        device_errors=False, queue_device=lambda target: None),
    TargetKind.CUDA: Backend(
        TargetKind.CUDA, rewrites_layout=False, lower=lower_state, accept=_accept_cuda, build=_build_cuda,
        lowered_text=lambda func, build: build().lowered, artifact_ext="cubin", export=_export_cuda,
        device_errors=True, queue_device=lambda target: target.arch),
}


def backend_of(target: Any) -> Backend:
    """The :class:`Backend` of ``target`` (a Target or a target string).

    Raises InvalidTargetError for a string the parser rejects, BuildError for a kind without
    a backend.
    """
    parsed = Target.parse(target)
    backend = BACKENDS.get(parsed.kind)
    if backend is None:
        raise BuildError(f"target {str(parsed)!r}: no backend builds {parsed.kind.value} programs")
    return backend
