"""``build``: schedule + argument tensors + target -> callable Module (``tvm.build``).

    Schedule/State --lower--> PrimFunc --legalize for CPU--> --codegen (llvmlite)--> Module
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from . import tir as T
from .errors import BuildError
from .lower import lower

_GPU_KINDS = ("vthread", "blockIdx.x", "blockIdx.y", "blockIdx.z",
              "threadIdx.x", "threadIdx.y", "threadIdx.z")


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


def target_kind(target: Any) -> str:
    text = str(getattr(target, "str", target) if not isinstance(target, str) else target)
    return text.split()[0] if text.strip() else "llvm"


def build(sch, args=None, target: Any = "llvm", target_host: Any = None, name: str = "default_function"):
    """Compile a schedule for ``target`` and return a callable Module.

    Parameters
    ----------
    sch : Schedule or State (or an already lowered PrimFunc)
    args : list of Tensor, the function's arguments in call order
    target : str, ``"llvm"``, ``"llvm -mcpu=core-avx2"`` ... (``"cuda"`` needs the CUDA backend)
    target_host : ignored for CPU targets (kept for TVM's signature)
    name : str, the C symbol of the entry function

    Raises
    ------
    LoweringError, BuildError
    """
    kind = target_kind(target)
    if kind not in ("llvm", "c"):
        raise BuildError(f"target {target!r}: only CPU (llvm) targets can be built here")
    func = sch if isinstance(sch, T.PrimFunc) else lower(sch, args, name=name)
    if func.name != name:
        func = replace(func, name=name)
    func = replace(func, body=_cpu_legalize(func.body))
    from .codegen import compile_primfunc
    from .runtime.module import Module
    compiled = compile_primfunc(func, target if not isinstance(target, str) or kind == "llvm" else "llvm")
    return Module.from_compiled(compiled)
