"""The GPU limits the GPU rules respect, read from the task's HardwareParams.

    task.hardware_params --gpu_limits--> GpuLimits(max_threads_per_block, warp_size,
                                                   max_shared_memory_per_block, ...)
    State --within_limits--> threads, vthreads, vector width and shared bytes of every block in bounds

TVM's ``HardwareParams`` carries these fields for GPU targets
(``max_shared_memory_per_block``, ``max_local_memory_per_block``,
``max_threads_per_block``, ``max_vthread_extent``, ``warp_size``); ours has them for a
``cuda`` target (0 on a CPU).  A field that is missing or 0 takes the default below,
TVM's values for an sm_80 device (1024 threads per block, warps of 32, 48 KiB of
shared memory per block without opt-in, ``max_vthread_extent = warp_size // 4``).
This module is the only place in the rules those defaults live.
"""

from __future__ import annotations

from dataclasses import dataclass

from scheduler_core.arith.int_set import Interval, interval, union
from scheduler_core.base.gpu_spec import (
    CUDA_MAX_SHARED_MEMORY_PER_BLOCK,
    CUDA_MAX_THREADS_PER_BLOCK,
    CUDA_MAX_VECTOR_BYTES,
)
from scheduler_core.ir.expr import IntImm, TensorLoad
from scheduler_core.ir.expr_functor import walk
from scheduler_core.ir.tir import dtype_bytes

from .state_queries import derives_from

# The widest single load/store VerifyGPUCode lets a GPU candidate vectorize (float4): TVM's
# builder passes ``max_vector_bytes = hardware_params.vector_unit_bytes``, 16 for CUDA.
MAX_VECTOR_BYTES = CUDA_MAX_VECTOR_BYTES

# TVM's defaults for a CUDA sm_80 device, used where HardwareParams has no such field.
SM80_DEFAULTS = {
    "max_threads_per_block": CUDA_MAX_THREADS_PER_BLOCK,
    "warp_size": 32,
    "max_shared_memory_per_block": CUDA_MAX_SHARED_MEMORY_PER_BLOCK,
    "max_local_memory_per_block": 2 ** 31 - 1,
    "max_vthread_extent": 8,
}


@dataclass(frozen=True)
class GpuLimits:
    """Limits of one GPU thread block (Ansor's HardwareParams GPU fields).

    max_threads_per_block : int, threads of one block (the product of threadIdx extents)
    warp_size : int, threads that run in lock step (the unit of thread counts)
    max_shared_memory_per_block : int, bytes of shared memory one block may allocate
    max_local_memory_per_block : int, bytes of local (register) memory per block
    max_vthread_extent : int, the largest product of vthread extents in a stage
    """

    max_threads_per_block: int
    warp_size: int
    max_shared_memory_per_block: int
    max_local_memory_per_block: int
    max_vthread_extent: int


def gpu_limits(task) -> GpuLimits:
    """The GPU limits of ``task``: its HardwareParams' fields, else :data:`SM80_DEFAULTS`.

    A field that is absent, None or not positive counts as missing.
    """
    hw = getattr(task, "hardware_params", None)
    values = {}
    for name, default in SM80_DEFAULTS.items():
        v = getattr(hw, name, None)
        values[name] = int(v) if isinstance(v, int) and v > 0 else default
    return GpuLimits(**values)


def thread_extents(stage) -> tuple:
    """``(threads, vthreads)``: the products of the stage's ``threadIdx.*`` and ``vthread``
    loop extents (1 when none; an unknown extent counts as 1)."""
    threads = vthreads = 1
    for it in stage.iters:
        ext = it.const_extent or 1
        if it.annotation.startswith("threadIdx"):
            threads *= ext
        elif it.annotation == "vthread":
            vthreads *= ext
    return threads, vthreads


def within_thread_limits(task, state) -> bool:
    """Whether no stage of ``state`` binds more than ``max_threads_per_block`` threads or
    more than ``max_vthread_extent`` virtual threads (the thread part of TVM's
    VerifyGPUCode, which Ansor runs on every GPU candidate)."""
    lim = gpu_limits(task)
    for st in state.stages:
        if st.op_type == "placeholder" or st.compute_at == "inlined":
            continue
        threads, vthreads = thread_extents(st)
        if threads > lim.max_threads_per_block or vthreads > lim.max_vthread_extent:
            return False
    return True


def _block_coverage(consumer, attach_name: str) -> dict | None:
    """Root var -> the extent of that axis one thread block covers per iteration of the
    consumer's loop ``attach_name``: the product of the axis' pieces inside that loop
    and, for a spatial axis, of every piece but the block-level ``.0`` one (the vthread
    and thread tiles of multi-level tiling run in the same block).  None when unknown."""
    pos = consumer.iter_index(attach_name)
    out = {}
    for iv in tuple(consumer.op.axis) + tuple(consumer.op.reduce_axis):
        ext = 1
        for k, it in enumerate(consumer.iters):
            if not derives_from(it.name, iv.var.name):
                continue
            inside = k > pos or (it.kind == "spatial" and not it.name.endswith(".0"))
            if inside:
                if it.const_extent is None:
                    return None
                ext *= it.const_extent
        out[iv.var] = Interval(IntImm(0), IntImm(ext))
    return out


def shared_memory_bytes(state) -> dict:
    """``{root stage id: bytes}``: the shared memory each kernel's ``.shared`` cache stages
    hold for one thread block, as TVM's bound inference sizes them (the consumer's reads
    over its loops inside the attach point, relaxed over the block's vthread and thread
    tiles).  A stage whose footprint cannot be bounded counts as unlimited (``-1``)."""
    out: dict = {}
    for st in state.stages:
        if st.compute_at != "iter" or not st.name.endswith(".shared"):
            continue
        cid, name = st.attach
        consumer = state.stages[cid]
        root = consumer.attach[0] if consumer.compute_at == "iter" else cid
        env = _block_coverage(consumer, name)
        regions = None
        if env is not None:
            loads = [n for b in consumer.op.bodies for n in walk(b)
                     if isinstance(n, TensorLoad) and n.tensor.op is st.op]
            regions = [union([interval(ld.indices[d], env) for ld in loads])
                       for d in range(len(loads[0].indices))] if loads else []
        elems = 1
        for r in regions if regions is not None else [None]:
            ext = None if r is None else r.const_extent
            if ext is None:
                elems = -1
                break
            elems *= ext
        prev = out.get(root, 0)
        if elems < 0 or prev < 0:
            out[root] = -1
        else:
            out[root] = prev + elems * dtype_bytes(st.op.output(0).dtype)
    return out


def vector_bytes(stage) -> int:
    """Bytes one vectorized store of ``stage`` moves: the product of its ``vectorize`` loop
    extents times its element size (0 when it has no vectorized loop; an unknown extent
    counts as 1)."""
    lanes, any_vec = 1, False
    for it in stage.iters:
        if it.annotation == "vectorize":
            any_vec = True
            lanes *= it.const_extent or 1
    if not any_vec or stage.op_type != "compute":
        return 0
    return lanes * dtype_bytes(stage.op.output(0).dtype)


def within_vector_limit(state) -> bool:
    """Whether no stage vectorizes more than :data:`MAX_VECTOR_BYTES` at once (the vector
    part of VerifyGPUCode: e.g. a cooperative fetch grown to 8 float32 lanes is refused)."""
    return all(vector_bytes(st) <= MAX_VECTOR_BYTES for st in state.stages
               if st.op_type != "placeholder" and st.compute_at != "inlined")


def within_limits(task, state) -> bool:
    """:func:`within_thread_limits`, :func:`within_vector_limit` and every kernel's
    :func:`shared_memory_bytes` at most ``max_shared_memory_per_block`` (TVM's VerifyGPUCode
    on a GPU candidate)."""
    if not within_thread_limits(task, state) or not within_vector_limit(state):
        return False
    cap = gpu_limits(task).max_shared_memory_per_block
    return all(0 <= b <= cap for b in shared_memory_bytes(state).values())


__all__ = ["GpuLimits", "gpu_limits", "SM80_DEFAULTS", "MAX_VECTOR_BYTES", "thread_extents",
           "within_thread_limits", "vector_bytes", "within_vector_limit", "shared_memory_bytes",
           "within_limits"]
