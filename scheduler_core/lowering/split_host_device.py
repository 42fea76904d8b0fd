"""Host/device split: which parts of a GPU program run on the host, which are kernels.

    loop program --split_host_device(func, build_kernel)--> (host code around kernels,
        the launch description of each kernel in program order)

TVM's ``src/tir/transforms/split_host_device.cc`` (``SplitHostDevice``).  The top level of
the program is host code: ``Allocate``s of global buffers, ``LetStmt``s, serial loops
and conditions that enclose GPU-bound loops (a scan's time loop launches its kernels once
per step).  Every maximal subtree below them that starts at a ``blockIdx``/``threadIdx``
loop is one kernel, and so is a root nest with no GPU binding (one thread) and a
cross-thread reduction whose init is host code (a zero-rank output: its init and reduce
loops together).  Each kernel subtree goes to ``build_kernel(stmt, name, host_vars, func)
-> (kernel statement, launch description)``, named ``<func>_kernel<i>``; ``host_vars``
are the host's loop and let variables around it (values known at launch).  Errors
(``LoweringError``): a non-serial loop around kernels, a ``local``/``shared`` buffer
allocated in host code around kernels.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from scheduler_core.base.errors import LoweringError
from scheduler_core.base.gpu_spec import GPU_TAGS
from scheduler_core.ir import tir as T

from .kernel_form import has_gpu_loop, seq_elements
from .thread_allreduce import reduction_regions

__all__ = ["KernelBuilder", "split_host_device"]

# (kernel subtree, kernel name, host variables, the function) -> (kernel statement, launch description)
KernelBuilder = Callable[[T.Stmt, str, set, T.PrimFunc], tuple]


def split_host_device(func: T.PrimFunc, build_kernel: KernelBuilder) -> tuple:
    """``(host body, launch descriptions)`` of ``func`` (see the module docstring)."""
    host = _Host(func, build_kernel)
    body = host.visit(func.body, set(func.scalar_params))
    return body, host.kernels


class _Host:
    def __init__(self, func: T.PrimFunc, build_kernel: KernelBuilder):
        self.func = func
        self.build_kernel = build_kernel
        self.kernels: list = []

    def visit(self, s: T.Stmt, host_vars: set) -> T.Stmt:
        if isinstance(s, T.For) and s.kind in GPU_TAGS:
            return self.kernel(s, host_vars)
        if isinstance(s, T.SeqStmt):
            # a cross-thread reduction whose init is host code (a zero-rank output) is one kernel
            elems = seq_elements(s)
            out: list = []
            k = 0
            for i, j in reduction_regions(elems):
                out.extend(self.visit(c, host_vars) for c in elems[k:i])
                out.append(self.kernel(T.seq(*elems[i:j + 1]), host_vars))
                k = j + 1
            out.extend(self.visit(c, host_vars) for c in elems[k:])
            return T.SeqStmt(tuple(out))
        if isinstance(s, T.Allocate) and s.buffer.scope == "global":
            return replace(s, body=self.visit(s.body, host_vars))
        if not has_gpu_loop(s):
            return self.kernel(s, host_vars)
        if isinstance(s, T.For):
            if s.kind not in ("serial", "unrolled"):
                raise LoweringError(f"loop {s.loop_var.name} ({s.kind}) encloses blockIdx/threadIdx loops: "
                                    f"only serial loops may run on the host around kernels")
            return T.For(s.loop_var, s.min, s.extent, "serial", self.visit(s.body, host_vars | {s.loop_var}),
                         dict(s.annotations))
        if isinstance(s, T.IfThenElse):
            other = None if s.else_case is None else self.visit(s.else_case, host_vars)
            return replace(s, then_case=self.visit(s.then_case, host_vars), else_case=other)
        if isinstance(s, T.LetStmt):
            return replace(s, body=self.visit(s.body, host_vars | {s.var}))
        if isinstance(s, T.Allocate):
            raise LoweringError(
                f"{s.buffer.scope} buffer {s.buffer.name} is allocated in host code around kernels (its stage "
                f"is attached outside the blockIdx/threadIdx loops of its consumer); attach it inside them "
                f"or compute it at root")
        raise LoweringError(f"unexpected {type(s).__name__} around GPU loops")

    def kernel(self, s: T.Stmt, host_vars: set) -> T.Stmt:
        name = f"{self.func.name}_kernel{len(self.kernels)}"
        stmt, launch = self.build_kernel(s, name, host_vars, self.func)
        self.kernels.append(launch)
        return stmt
