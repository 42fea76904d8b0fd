"""``lower`` and ``build``: schedule + argument tensors + target -> loop program -> callable Module.

    Schedule/State --lower_state--> PrimFunc --unroll, vectorize (once)--> PrimFunc
        --legalize for CPU--> --codegen (llvmlite)--> Module
    cuda: PrimFunc --cuda_build.build_cuda (kernel form, CUDA C, nvcc on use)--> CudaModule

TVM's ``tvm.lower`` / ``tvm.build``.  The passes run here and only here, so a build runs
them once and the program that ``lower`` prints is the program that ``build`` compiles.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from scheduler_core.base.errors import BuildError, LoweringError
from scheduler_core.base.target import Target
from scheduler_core.codegen import compile_primfunc
from scheduler_core.ir import tir as T
from scheduler_core.lowering.lower import lower_state
from scheduler_core.runtime.module import Module
from scheduler_core.schedule.loop_state import State

from .cuda_build import build_cuda
from .pipeline import PASSES_DONE, run_passes

__all__ = ["lower", "build", "run_passes", "PASSES_DONE"]

_GPU_KINDS = ("vthread", "blockIdx.x", "blockIdx.y", "blockIdx.z",
              "threadIdx.x", "threadIdx.y", "threadIdx.z")


def lower(sch, args=None, name: str = "main", simple_mode: bool = True) -> T.PrimFunc:
    """``tvm.lower``: a Schedule or State and its argument tensors -> the PrimFunc that builds.

    Parameters
    ----------
    sch : Schedule or State
    args : list of Tensor, the function's arguments in call order (default: the DAG's tensors)
    name : str, the function's name
    simple_mode : bool, kept for TVM's signature (the text form is always the simple one)

    Raises LoweringError for a non-schedule or a state that cannot be lowered.
    """
    state = getattr(sch, "state", sch)
    if not isinstance(state, State):
        raise LoweringError(f"lower() needs a Schedule or State, got {type(sch).__name__}")
    return run_passes(lower_state(state, args, name))


def _cpu_legalize(s: T.Stmt) -> T.Stmt:
    """GPU thread bindings and vthreads run as serial loops on a CPU target."""
    if isinstance(s, T.For):
        body = _cpu_legalize(s.body)
        kind = "serial" if s.kind in _GPU_KINDS else s.kind
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


def build(sch, args=None, target: Any = "llvm", target_host: Any = None, name: str = "default_function"):
    """Compile a schedule for ``target`` and return a callable Module (``tvm.build``).

    Parameters
    ----------
    sch : Schedule or State, or a PrimFunc (from :func:`lower`, or unpassed from ``lower_state``)
    args : list of Tensor, the function's arguments in call order
    target : str or Target, ``"llvm"``, ``"llvm -mcpu=core-avx2"`` ..., or ``"cuda -arch=sm_80"``
        (a CudaModule: CUDA C source, PTX/cubin, ``emulate`` on the CPU, launch on a GPU)
    target_host : ignored for CPU targets (kept for TVM's signature)
    name : str, the C symbol of the entry function

    Raises
    ------
    InvalidTargetError (a BuildError) for a target the parser rejects; BuildError for another
    kind or a codegen failure; LoweringError (incl. a program the GPU lowering refuses).
    """
    parsed = Target.parse(target)
    if parsed.kind == "cuda":
        if isinstance(sch, T.PrimFunc):
            if sch.attrs.get(PASSES_DONE):
                raise BuildError("build for cuda needs the program of lower_state (before the CPU passes); "
                                 "pass the schedule, not the output of lower()")
            return build_cuda(sch, parsed, name)
        state = getattr(sch, "state", sch)
        if not isinstance(state, State):
            raise LoweringError(f"build() needs a Schedule or State, got {type(sch).__name__}")
        return build_cuda(lower_state(state, args, name), parsed, name)
    if parsed.kind != "llvm":
        raise BuildError(f"target {parsed.str!r}: only CPU (llvm) and cuda targets can be built")
    func = run_passes(sch) if isinstance(sch, T.PrimFunc) else lower(sch, args, name)
    if func.name != name:
        func = replace(func, name=name)
    func = replace(func, body=_cpu_legalize(func.body))
    return Module.from_compiled(compile_primfunc(func, parsed))
