"""A kernel's launch: its block and thread loops, and its launch description.

    per-thread code --kernel_nest(body, unified)--> blockIdx loops / shared Allocates /
        threadIdx loops / per-thread code, the outer loop annotated with the kernel's name
    kernel nest --launch_description(kernel, unified)--> {"name", "grid", "block",
        "shared_bytes", "params"}

TVM computes the same facts in ``src/tir/transforms/split_host_device.cc`` (the device
function's parameters) and ``src/tir/transforms/lower_device_kernel_launch.cc`` (the launch
parameters: thread extents and dynamic shared memory).  The description is what
``attrs["kernels"]`` holds per kernel (docs/gpu_kernel_form.md): ``grid``/``block`` as ints
or expression strings of host values, ``shared_bytes`` the static shared memory in bytes,
``params`` the global buffers the kernel uses (function parameters first, in call order),
then the scalar params it uses, then the host variables it uses (by name).
"""

from __future__ import annotations

from dataclasses import replace

from scheduler_core.base.gpu_spec import BLOCK_TAGS, THREAD_TAGS
from scheduler_core.ir import tir as T
from scheduler_core.ir.expr import BufferLoad, Expr, IntImm, Var
from scheduler_core.ir.expr_functor import walk
from scheduler_core.ir.simplify import const_value
from scheduler_core.ir.stmt_functor import stmt_exprs

from .kernel_form import KERNEL_ANNOTATION
from .unify_thread_binding import TagInfo, UnifyThreadBinding

__all__ = ["kernel_nest", "launch_description"]


def kernel_nest(body: T.Stmt, unified: UnifyThreadBinding) -> T.For:
    """The kernel around its per-thread code ``body``: the thread loops of the launch
    variables, the hoisted shared Allocates, then the block loops (outermost), the outer
    loop annotated ``{"kernel": name}``.  A kernel with shared memory but no block loop gets
    ``blockIdx.x`` of extent 1 (added to ``unified.tags``)."""
    tags, launch_vars = unified.tags, unified.launch_vars
    for tag in THREAD_TAGS:
        if tag in tags:
            body = T.For(launch_vars[tag], IntImm(0), tags[tag].extent, tag, body)
    if unified.shared and not any(t in tags for t in BLOCK_TAGS):  # one block holds the shared memory
        tags["blockIdx.x"] = TagInfo(extent=IntImm(1))
        launch_vars["blockIdx.x"] = Var("blockIdx.x", "int32")
    for buf in reversed(unified.shared):
        body = T.Allocate(buf, body)
    for tag in BLOCK_TAGS:
        if tag in tags:
            body = T.For(launch_vars[tag], IntImm(0), tags[tag].extent, tag, body)
    assert isinstance(body, T.For)
    return replace(body, annotations={**body.annotations, KERNEL_ANNOTATION: unified.name})


def _launch_value(e: Expr) -> int | str:
    v = const_value(e)
    return v if isinstance(v, int) else T.expr_str(e)


def launch_description(kernel: T.Stmt, unified: UnifyThreadBinding) -> dict:
    """The launch description of the kernel nest ``kernel`` (see the module docstring)."""
    func = unified.func
    bufs: list = []
    used_vars: set = set()
    for n in T.walk_stmts(kernel):
        for e in stmt_exprs(n):
            for x in walk(e):
                if isinstance(x, BufferLoad) and x.buffer.scope == "global" and x.buffer not in bufs:
                    bufs.append(x.buffer)
                elif isinstance(x, Var):
                    used_vars.add(x)
        if isinstance(n, T.Store) and n.buffer.scope == "global" and n.buffer not in bufs:
            bufs.append(n.buffer)
    order = {b: k for k, b in enumerate(func.params)}
    bufs.sort(key=lambda b: (0, order[b]) if b in order else (1, 0))
    scalars = [v.name for v in func.scalar_params if v in used_vars]
    host = sorted(v.name for v in unified.host_vars if v in used_vars and v not in func.scalar_params)
    tags = unified.tags

    def dims(tag_names: tuple) -> list:
        return [_launch_value(tags[t].extent) if t in tags else 1 for t in tag_names]

    return {"name": unified.name, "grid": dims(BLOCK_TAGS), "block": dims(THREAD_TAGS),
            "shared_bytes": sum(b.nbytes or 0 for b in unified.shared),
            "params": [b.name for b in bufs] + scalars + host}
