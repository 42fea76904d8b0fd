"""``lower`` and ``build``: schedule + argument tensors + target -> loop program -> callable Module.

    Schedule/State --lower_state--> PrimFunc --unroll, vectorize (once)--> PrimFunc
        --legalize for CPU--> --codegen (llvmlite)--> Module

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
from scheduler_core.passes import unroll_loops, vectorize_loops
from scheduler_core.runtime.module import Module
from scheduler_core.schedule.loop_state import State

_GPU_KINDS = ("vthread", "blockIdx.x", "blockIdx.y", "blockIdx.z",
              "threadIdx.x", "threadIdx.y", "threadIdx.z")
PASSES_DONE = "passes_done"  # PrimFunc.attrs key set once the passes have run


def run_passes(func: T.PrimFunc) -> T.PrimFunc:
    """Unroll then vectorize the annotated loops of ``func`` (a no-op when already done)."""
    if func.attrs.get(PASSES_DONE):
        return func
    body = vectorize_loops(unroll_loops(func.body))
    return replace(func, body=body, attrs={**func.attrs, PASSES_DONE: True})


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
    target : str or Target, ``"llvm"``, ``"llvm -mcpu=core-avx2"`` ... (``"cuda"`` needs the CUDA backend)
    target_host : ignored for CPU targets (kept for TVM's signature)
    name : str, the C symbol of the entry function

    Raises
    ------
    InvalidTargetError (a BuildError) for a target the parser rejects; BuildError for a
    non-CPU target or a codegen failure; LoweringError.
    """
    parsed = Target.parse(target)
    if parsed.kind != "llvm":
        raise BuildError(f"target {parsed.str!r}: only CPU (llvm) targets can be built here")
    func = run_passes(sch) if isinstance(sch, T.PrimFunc) else lower(sch, args, name)
    if func.name != name:
        func = replace(func, name=name)
    func = replace(func, body=_cpu_legalize(func.body))
    return Module.from_compiled(compile_primfunc(func, parsed))
