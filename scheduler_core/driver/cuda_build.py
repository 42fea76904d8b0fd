"""Building for a ``cuda`` target: kernel form -> CUDA C -> PTX/cubin, plus its CPU emulation.

    State --lower_state--> PrimFunc --lower_for_gpu--> kernel form (docs/gpu_kernel_form.md)
        --cuda_source--> CUDA C --nvcc (on first use)--> PTX / cubin
        --gpu_to_cpu + passes + LLVM (on first use)--> CPU Module with CUDA's semantics
    = runtime.CudaModule (imported_modules[0]: the CUDA source module)

``emulate(func, *arrays)`` runs a kernel-form program on the CPU (MCUDA-style, see
``passes/gpu_emulation.py``), optionally checking shared-memory races.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from scheduler_core.base.target import Target
from scheduler_core.codegen import compile_primfunc
from scheduler_core.codegen.cuda_codegen import cuda_source
from scheduler_core.codegen.cuda_launch import launch_description
from scheduler_core.ir import tir as T
from scheduler_core.ir.simplify import const_value
from scheduler_core.lowering.gpu import lower_for_gpu
from scheduler_core.passes import unroll_loops
from scheduler_core.passes.gpu_emulation import RACE_SLOTS, RaceConditionError, gpu_to_cpu, race_message
from scheduler_core.runtime.cuda_module import CudaModule, CudaSourceModule
from scheduler_core.runtime.module import Module
from scheduler_core.runtime.signature import Signature

from .nvcc import compile_cuda
from .pipeline import run_passes

HOST_TARGET = "llvm"  # the CPU that emulates the kernels


def emulation_module(func: T.PrimFunc, check_races: bool = False) -> Module:
    """The CPU Module running the kernel-form ``func`` with CUDA's semantics.

    With ``check_races`` the module takes one more buffer, ``race_report`` (int32[RACE_SLOTS]),
    after the buffer parameters (see ``passes/gpu_emulation.py``).
    """
    cpu = gpu_to_cpu(func, check_races=check_races)
    return Module.from_compiled(compile_primfunc(run_passes(cpu), Target.parse(HOST_TARGET)))


def emulate(func: T.PrimFunc, *args: Any, check_races: bool = False) -> None:
    """Run the kernel-form ``func`` on the CPU: ``gpu_to_cpu``, the passes, LLVM, call.

    args: one numpy array (or NDArray) per buffer parameter, in order, then optionally the
    scalar params as ints (otherwise bound from the shapes), as for a Module call; outputs
    are written in place.  Raises what ``gpu_to_cpu``, the build and the Module call raise,
    and ``RaceConditionError`` naming the shared buffer when ``check_races`` finds a race.
    """
    mod = emulation_module(func, check_races)
    if not check_races:
        mod(*args)
        return
    n = len(func.params)
    report = np.zeros(RACE_SLOTS, dtype=np.int32)
    mod(*args[:n], report, *args[n:])
    if report[0]:
        raise RaceConditionError(race_message(func, report, gpu_to_cpu(func, check_races=True).attrs["race_buffers"]))


def kernel_form(func: T.PrimFunc, target: Target) -> T.PrimFunc:
    """The kernel form of a lowered (unpassed) PrimFunc for ``target``: GPU lowering, then the
    unroll pass (the vectorize pass is the CUDA code generator's: float2/float4 accesses)."""
    kf = lower_for_gpu(func, target)
    return replace(kf, body=unroll_loops(kf.body))


def build_cuda(func: T.PrimFunc, target: Target, name: str, cubin: bytes | None = None,
               ptx: bytes | None = None) -> CudaModule:
    """A CudaModule from a lowered (unpassed) PrimFunc: kernel form, CUDA C, lazy PTX/cubin/emulation.

    ``cubin`` / ``ptx``: images already compiled from this program's source (the measurement
    runner reuses the builder's), used instead of running nvcc.  ``launch["max_vthread_extent"]``
    records the longest vthread loop nest of ``func`` (the kernel form has none left), for the
    validity checks of ``gpu_validity``.

    Raises LoweringError for a program the GPU lowering refuses, BuildError from code generation.
    """
    kf = kernel_form(replace(func, name=name), target)
    source = cuda_source(kf, target)
    launch = launch_description(kf)
    launch["max_vthread_extent"] = max_vthread_extent(func.body)
    arch = target.arch
    device_module = CudaSourceModule(
        source, launch["kernels"], arch,
        ptx=ptx if ptx is not None else (lambda: compile_cuda(source, arch=arch, fmt="ptx")),
        cubin=cubin if cubin is not None else (lambda: compile_cuda(source, arch=arch, fmt="cubin")))
    return CudaModule(Signature.from_primfunc(kf, name), device_module, kf, launch,
                      lambda: emulation_module(kf), target=target)


def max_vthread_extent(s: T.Stmt) -> int:
    """The largest product of the constant extents of nested ``vthread`` loops under ``s`` (1: none)."""
    best = 1
    stack: list = [(s, 1)]
    while stack:
        st, outer = stack.pop()
        if isinstance(st, T.For) and st.kind == "vthread":
            ext = const_value(st.extent)
            outer = outer * (ext if isinstance(ext, int) else 1)
            best = max(best, outer)
        stack.extend((c, outer) for c in T.stmt_children(st) if isinstance(c, T.Stmt))
    return best
