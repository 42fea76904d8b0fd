"""``lower`` and ``build``: schedule + argument tensors + target -> loop program -> callable Module.

    Schedule/State --lower_state--> PrimFunc --unroll, vectorize (once)--> PrimFunc
        --legalize for CPU--> --codegen (llvmlite)--> Module
    cuda: PrimFunc --cuda_build.build_cuda (kernel form, CUDA C, nvcc on use)--> CudaModule

TVM's ``tvm.lower`` / ``tvm.build``.  The passes run here and only here, so a build runs
them once and the program that ``lower`` prints is the program that ``build`` compiles.
What each target kind does is its entry in the backend table (``backend.py``).
"""

from __future__ import annotations

from typing import Any

from scheduler_core.base.build_config import BuildConfig
from scheduler_core.base.errors import LoweringError
from scheduler_core.base.target import Target
from scheduler_core.ir import tir as T
from scheduler_core.lowering.lower import lower_state
from scheduler_core.schedule.loop_state import State

from .backend import backend_of
from .pipeline import PASSES_DONE, run_passes

__all__ = ["lower", "build", "run_passes", "PASSES_DONE"]


def _state_of(sch: Any, caller: str) -> State:
    state = getattr(sch, "state", sch)
    if not isinstance(state, State):
        raise LoweringError(f"{caller}() needs a Schedule or State, got {type(sch).__name__}")
    return state


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
    return run_passes(lower_state(_state_of(sch, "lower"), args, name))


def build(sch, args=None, target: Any = "llvm", target_host: Any = None, name: str = "default_function",
          config: BuildConfig | None = None):
    """Compile a schedule for ``target`` and return a callable Module (``tvm.build``).

    Parameters
    ----------
    sch : Schedule or State, or a PrimFunc (from :func:`lower`, or unpassed from ``lower_state``)
    args : list of Tensor, the function's arguments in call order
    target : str or Target, ``"llvm"``, ``"llvm -mcpu=core-avx2"`` ..., or ``"cuda -arch=sm_80"``
        (a CudaModule: CUDA C source, PTX/cubin, ``emulate`` on the CPU, launch on a GPU)
    target_host : ignored for CPU targets (kept for TVM's signature)
    name : str, the C symbol of the entry function
    config : BuildConfig, the codegen options (TVM's PassContext config); default
        ``BuildConfig.current()``

    Raises
    ------
    InvalidTargetError (a BuildError) for a target the parser rejects; BuildError for another
    kind or a codegen failure; LoweringError (incl. a program the GPU lowering refuses).
    """
    parsed = Target.parse(target)
    backend = backend_of(parsed)
    if isinstance(sch, T.PrimFunc):
        func = backend.accept(sch)
    else:
        func = backend.lower(_state_of(sch, "build"), args, name)
    return backend.build(func, parsed, name, BuildConfig.resolve(config))
