"""GPU lowering: the loop program of ``lower_state`` -> the kernel form of a ``cuda`` target.

    lower_state(state) --lower_for_gpu(func, "cuda")--> kernel-form PrimFunc
        --CUDA C code generation / CPU emulation--> ...

The passes, one module each, in the order they run (TVM's pass of the same job in brackets):

    split_host_device     host code vs kernels                   [SplitHostDevice]
    per kernel:
      thread_allreduce      reductions across threadIdx.x          [LowerThreadAllreduce]
      unify_thread_binding  one launch variable per tag, guards    [UnifyThreadBinding]
      thread_sync           Barrier() placement                    [ThreadSync("shared")]
      guard_sinking         guards around the barrier-free code    (none)
      launch_params         block/thread loops, launch description [LowerDeviceKernelLaunch]

(``kernel_form``: what they share; ``gpu_index``: extent comparisons.)

The kernel form is specified in ``docs/gpu_kernel_form.md``; in short:

1. **Host code and kernels.** The top level of the program is host code: ``Allocate``s of
   global buffers, ``LetStmt``s, serial loops and conditions that enclose GPU-bound loops
   (a scan's time loop launches its kernels once per step).  Every maximal subtree below
   them that starts at a ``blockIdx``/``threadIdx`` loop is one kernel; a root nest with no
   GPU binding becomes a one-thread kernel (grid 1, block 1).
2. **One loop per tag.** Inside a kernel every loop bound to a tag is replaced by that
   tag's one launch variable (named after the tag).  Its extent is the launch dimension:
   all ``blockIdx`` loops of a tag must agree; for ``threadIdx`` the largest extent wins
   and a loop with a smaller one gets its body guarded by ``if threadIdx.x < extent``
   (cooperative fetching: a stage bound to ``threadIdx.x`` inside the consumer's
   ``threadIdx.x`` loop runs on the same threads).  ``vthread`` loops become serial loops.
   The kernel is rebuilt as block loops, the ``shared`` Allocates (hoisted from wherever
   the stages were attached), thread loops, then the per-thread code, where code that was
   outside every thread loop runs on every thread (as in CUDA).
3. **Barriers.** ``Barrier()`` goes where a shared buffer written in the per-thread code
   is then read (read-after-write) and at the end of a loop body whose next iteration
   writes a shared buffer the body read (write-after-read at the back edge).  The
   guards of step 2 are pushed down around the barrier-free parts, so a barrier is only
   ever under thread-uniform control flow; where a barrier would be needed under a
   thread-dependent condition, ``LoweringError`` names the shared buffer (its stage).
4. ``attrs["kernels"]``: one launch description per kernel in program order (name, grid,
   block, shared_bytes, params); ``attrs["target_kind"] = "cuda"``.
5. **Cross-thread reductions.** Before step 2, a reduction whose reduce loop is bound to
   threadIdx.x (Ansor's RuleCrossThreadReduction) becomes TVM's thread allreduce, written
   with the kernel form's own statements (``thread_allreduce``): per-thread partials
   in a ``local`` buffer ``<X>.red_local`` (from the identity), a ``shared`` buffer
   ``<X>.red_shared`` with one slot per thread (per spatial element of the reduction's loops
   and per enclosing threadIdx.y/z), a tree reduction over the width padded to a power of
   two (``if threadIdx.x < n`` steps, a barrier after each), then the result stored where the
   init stored: by thread 0, or by every thread for a ``local`` result that later code of
   the block reads.  Any sum/prod/max/min update ``X[I] = X[I] op v``; a reduction whose
   init is host code (a zero-rank output) makes one kernel with its reduce loops.

Errors (``LoweringError``, naming the loop or buffer): a ``parallel`` loop; two different
extents bound to one ``blockIdx`` tag in a kernel, or a ``blockIdx`` tag bound twice on one
path; a ``threadIdx`` tag bound inside a loop of the same tag with a larger extent; a launch
extent that depends on a variable of the kernel; a shared buffer whose size is not a
constant; a ``local`` or ``shared`` buffer allocated in host code around kernels, or a
``local`` buffer written by thread-bound loops it is allocated outside of; a
read-modify-write of a global or shared element by every thread (block) of a tag that is
not a cross-thread reduction of step 5 (a reduction across blocks, or an update with no
init in the program); a barrier needed under thread-dependent control flow.  For a
cross-thread reduction: its reduce loop bound to threadIdx.y/z, more than one bound reduce
loop, a GPU-bound loop inside its reduce loops, a threadIdx.x loop around it, a
non-constant thread count or spatial extent inside the reduce loops, an update that is not
a sum/prod/max/min of the element, or several outputs.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from scheduler_core.base.errors import LoweringError
from scheduler_core.base.gpu_spec import THREAD_TAGS
from scheduler_core.base.target import Target
from scheduler_core.ir import tir as T
from scheduler_core.ir.simplify import const_value

from .guard_sinking import sink_guards
from .launch_params import kernel_nest, launch_description
from .split_host_device import split_host_device
from .thread_allreduce import ThreadAllReduce
from .thread_sync import plan_barriers
from .unify_thread_binding import UnifyThreadBinding

__all__ = ["lower_for_gpu", "build_kernel"]


def build_kernel(root: T.Stmt, name: str, host_vars: set, func: T.PrimFunc) -> tuple:
    """``(kernel statement, launch description)`` of the kernel subtree ``root`` of host code:
    the per-kernel passes in order (see the module docstring).  ``host_vars``: the Vars whose
    values the host knows at launch.  Raises LoweringError."""
    allreduce = ThreadAllReduce(name)
    root = allreduce.rewrite(root, [])
    unified = UnifyThreadBinding(root, name, host_vars, func, allreduce.partials)
    unified.collect()
    body = unified.per_thread()
    unified.check_reductions(body)
    threads = [t for t in THREAD_TAGS if t in unified.tags]
    thread_vars = {unified.launch_vars[t] for t in threads}
    if not all(const_value(unified.tags[t].extent) == 1 for t in threads):
        body = plan_barriers(body, thread_vars)
    body = sink_guards(body, thread_vars)
    kernel = kernel_nest(body, unified)
    return kernel, launch_description(kernel, unified)


def lower_for_gpu(func: T.PrimFunc, target: Any = "cuda") -> T.PrimFunc:
    """The kernel form (docs/gpu_kernel_form.md) of ``func``, the output of ``lower_state``.

    Parameters
    ----------
    func : PrimFunc from ``lower_state`` (before or after the unroll/vectorize passes)
    target : str or Target, a ``cuda`` target

    Returns a PrimFunc with the same params whose body is host code and kernels, with
    ``attrs["target_kind"] = "cuda"`` and ``attrs["kernels"]`` (launch descriptions).
    A function already in kernel form is returned unchanged.  Raises LoweringError (see
    the module docstring) and InvalidTargetError for a bad target string.
    """
    parsed = Target.parse(target)
    if not parsed.is_gpu:
        raise LoweringError(f"lower_for_gpu needs a cuda target, got {str(parsed)!r}")
    if func.attrs.get("target_kind") == "cuda" and "kernels" in func.attrs:
        return func
    body, kernels = split_host_device(func, build_kernel)
    attrs: dict[str, Any] = {**func.attrs, "target_kind": "cuda", "kernels": kernels}
    return replace(func, body=body, attrs=attrs)
