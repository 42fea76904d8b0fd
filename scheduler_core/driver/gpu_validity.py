"""Static validity of a program built for ``cuda``: the checks of TVM's ``VerifyGPUCode``.

    CudaModule --kernel_resources--> per kernel: block, grid, threads, shared / local bytes,
                                     widest vector access (from the kernel form and its
                                     launch descriptions, docs/gpu_kernel_form.md)
              --check_gpu_program(module, target)--> None, or InvalidGpuProgramError

Ansor prunes a candidate whose program a GPU cannot launch before measuring it: TVM's
``tvm.tir.analysis.verify_gpu_code`` (``src/tir/analysis/verify_gpu_code.cc``), run by the
auto-scheduler's builder, turns such a program into an ``InstantiationError``.  The limits
are the target's (:meth:`Target.cuda_limits`, :meth:`HardwareParams.for_target`); a
program is refused when, for some kernel,

* its threads per block (the product of the block dimensions) exceed
  ``max_threads_per_block``, or one block dimension exceeds CUDA's own bound (1024, 1024,
  64), or one grid dimension exceeds CUDA's (2^31 - 1, 65535, 65535);
* its static shared memory (the launch description's ``shared_bytes``, or what ptxas
  reports when larger) exceeds ``max_shared_memory_per_block``;
* its local memory per block (the bytes of its ``local`` allocations times its threads)
  exceeds ``max_local_memory_per_block`` (TVM: INT32_MAX), or its local memory per thread
  exceeds CUDA's 512 KiB (``CUDA_MAX_LOCAL_MEMORY_PER_THREAD``: the driver refuses such a
  launch);
* a vectorized access moves more than ``max_vector_bytes`` (16: CUDA's widest load,
  ``float4``) -- a vectorized loop's extent times the element size of an access in it, or
  a ``Ramp`` index's lanes times it;
* a ``vthread`` loop nest of the program is longer than ``max_vthread_extent``
  (``warp_size // 4``, TVM's value); the kernel form has no vthread loops left, so this reads
  the extent ``build_cuda`` recorded from the lowered program (``launch["max_vthread_extent"]``);
* with nvcc available (or ``registers=True``): its registers per thread (``ptxas -v`` on the
  module's PTX) times its threads, counted in whole warps, exceed ``registers_per_block``.

A symbolic launch dimension (shape variables) is not checked.  Every problem found is named
in the one error's message, with the kernel, the value and the limit.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from scheduler_core.base.errors import BuildError
from scheduler_core.base.gpu_spec import (
    BLOCK_DIM_MAX,
    CUDA_MAX_LOCAL_MEMORY_PER_THREAD,
    CUDA_MAX_VECTOR_BYTES,
    GRID_DIM_MAX,
)
from scheduler_core.base.target import HardwareParams, Target
from scheduler_core.ir import expr as E
from scheduler_core.ir import expr_functor as EF
from scheduler_core.ir import tir as T
from scheduler_core.ir.simplify import const_value
from scheduler_core.ir.stmt_functor import stmt_exprs, stmt_loads

from .nvcc import nvcc_available, ptxas_info

__all__ = ["InvalidGpuProgramError", "GpuCheckLimits", "gpu_check_limits", "kernel_resources",
           "gpu_program_problems", "check_gpu_program", "MAX_VECTOR_BYTES"]

MAX_VECTOR_BYTES = CUDA_MAX_VECTOR_BYTES  # float4 / int4: CUDA's widest single load or store


class InvalidGpuProgramError(BuildError):
    """A program built for ``cuda`` that the target's GPU cannot launch (TVM's VerifyGPUCode
    failure: an instantiation error of the candidate, never measured).

    problems: one ``(check, kernel, value, limit)`` per violation; ``check`` is one of
    ``"threads_per_block"``, ``"block_dim"``, ``"grid_dim"``, ``"shared_memory"``,
    ``"local_memory"``, ``"vector_bytes"``, ``"vthread_extent"``, ``"registers"``.
    """

    def __init__(self, message: str, problems: tuple = ()):
        self.problems = tuple(problems)
        super().__init__(message)


@dataclass(frozen=True)
class GpuCheckLimits:
    """The limits :func:`check_gpu_program` applies (one thread block, one kernel)."""

    max_threads_per_block: int
    max_shared_memory_per_block: int
    max_local_memory_per_block: int
    registers_per_block: int
    warp_size: int
    max_vthread_extent: int
    max_vector_bytes: int = MAX_VECTOR_BYTES


def gpu_check_limits(target: Any, hardware_params: HardwareParams | None = None) -> GpuCheckLimits:
    """The limits of a cuda ``target`` (a Target or its text): the arch's values with the
    target's options (:meth:`Target.cuda_limits`), ``max_vthread_extent`` and
    ``max_local_memory_per_block`` from :meth:`HardwareParams.for_target`.  Positive fields of
    ``hardware_params`` override them.  Raises BuildError for a non-cuda target."""
    t = Target.parse(target)
    lim = t.cuda_limits()
    hw = HardwareParams.for_target(t)
    values = {
        "max_threads_per_block": lim["max_threads_per_block"],
        "max_shared_memory_per_block": lim["max_shared_memory_per_block"],
        "max_local_memory_per_block": hw.max_local_memory_per_block or 2 ** 31 - 1,
        "registers_per_block": lim["registers_per_block"],
        "warp_size": lim["thread_warp_size"],
        "max_vthread_extent": hw.max_vthread_extent or max(1, lim["thread_warp_size"] // 4),
    }
    if hardware_params is not None:
        for key in values:
            v = getattr(hardware_params, key, None)
            if isinstance(v, int) and v > 0:
                values[key] = v
        warp = getattr(hardware_params, "warp_size", None)
        if isinstance(warp, int) and warp > 0:
            values["warp_size"] = warp
    return GpuCheckLimits(**values)


# ---------------------------------------------------------------------------
# what each kernel uses
# ---------------------------------------------------------------------------

def _int(x: Any) -> int | None:
    """An int launch dimension, or None for a symbolic one (an expression string)."""
    if isinstance(x, bool):
        return None
    if isinstance(x, int):
        return x
    if isinstance(x, str) and x.strip().lstrip("-").isdigit():
        return int(x)
    return None


def _access_bytes(s: T.Stmt) -> int:
    """The largest element size (bytes) of a load or store under ``s`` (0: none)."""
    stored = (st.buffer for st in T.walk_stmts(s) if isinstance(st, T.Store))
    loaded = (ld.buffer for ld in stmt_loads(s))
    return max((T.dtype_bytes(b.dtype) for bufs in (stored, loaded) for b in bufs), default=0)


def _lanes(e: E.Expr) -> int:
    best = 1
    for n in EF.walk(e):
        if isinstance(n, (E.Ramp, E.Broadcast)):
            best = max(best, int(n.lanes))
    return best


def _vector_bytes(kernel: T.Stmt) -> tuple[int, str]:
    """``(bytes, where)`` of the widest vector access of a kernel: a vectorized loop's extent
    times the element size of its accesses, or a Ramp index's lanes times the element size."""
    best, where = 0, ""
    for st in T.walk_stmts(kernel):
        if isinstance(st, T.For) and st.kind == "vectorized":
            ext = const_value(st.extent)
            if isinstance(ext, int):
                nbytes = ext * _access_bytes(st.body)
                if nbytes > best:
                    best, where = nbytes, f"vectorized loop {st.loop_var.name} ({ext} lanes)"
        if isinstance(st, T.Store):
            lanes = _lanes(st.index)
            nbytes = lanes * T.dtype_bytes(st.buffer.dtype)
            if lanes > 1 and nbytes > best:
                best, where = nbytes, f"vector store to {st.buffer.name} ({lanes} lanes)"
        for e in stmt_exprs(st):
            for n in EF.walk(e):
                if isinstance(n, E.BufferLoad) and _lanes(n.index) > 1:
                    lanes = _lanes(n.index)
                    nbytes = lanes * T.dtype_bytes(n.buffer.dtype)
                    if nbytes > best:
                        best, where = nbytes, f"vector load of {n.buffer.name} ({lanes} lanes)"
    return best, where


def _local_bytes(kernel: T.Stmt) -> int:
    """Bytes of the kernel's per-thread (``local``) allocations, all together."""
    total = 0
    for st in T.walk_stmts(kernel):
        if isinstance(st, T.Allocate) and st.buffer.scope == "local":
            n = st.buffer.num_elements  # (a zero-size buffer still gets one element)
            total += 0 if n is None else max(n, 1) * T.dtype_bytes(st.buffer.dtype)
    return total


def _kernel_nests(func: T.PrimFunc) -> dict:
    """Kernel name -> its nest (the loop carrying ``annotations["kernel"]``)."""
    out = {}
    for st in T.walk_stmts(func.body):
        if isinstance(st, T.For) and st.annotations.get("kernel"):
            out[st.annotations["kernel"]] = st
    return out


def kernel_resources(module: Any) -> list[dict]:
    """Per kernel of a CudaModule, in launch order: ``name``, ``symbol``, ``grid``, ``block``
    (ints, None where symbolic), ``threads`` (None when symbolic), ``shared_bytes``,
    ``local_bytes`` (per thread), ``vector_bytes`` and ``vector_where`` (the widest access)."""
    nests = _kernel_nests(module.kernel_func)
    out = []
    for desc in module.launch["kernels"]:
        block = [_int(x) for x in desc.get("block", [1, 1, 1])]
        grid = [_int(x) for x in desc.get("grid", [1, 1, 1])]
        threads: int | None = None
        if all(b is not None for b in block):
            threads = 1
            for b in block:
                threads *= int(b)  # type: ignore[arg-type]
        nest = nests.get(desc["name"])
        vbytes, vwhere = _vector_bytes(nest) if nest is not None else (0, "")
        out.append({"name": desc["name"], "symbol": desc.get("symbol", desc["name"]),
                    "grid": grid, "block": block, "threads": threads,
                    "shared_bytes": int(desc.get("shared_bytes") or 0),
                    "local_bytes": _local_bytes(nest) if nest is not None else 0,
                    "vector_bytes": vbytes, "vector_where": vwhere})
    return out


# ---------------------------------------------------------------------------
# the checks
# ---------------------------------------------------------------------------

def _ptxas_resources(module: Any, arch: str) -> dict:
    return ptxas_info(module.imported_modules[0].ptx(), arch)


def gpu_program_problems(module: Any, target: Any, hardware_params: HardwareParams | None = None,
                         registers: bool | None = None) -> list[tuple]:
    """Every violation of :func:`check_gpu_program` as ``(check, kernel, value, limit, text)``.

    registers: read registers (and static shared memory) from ``ptxas -v`` on the module's
    PTX; None: when nvcc is available.  Raises BuildError when nvcc/ptxas fail with
    ``registers`` asked for (None: never; the register check is then left out).
    """
    t = Target.parse(target if target is not None else module.target)
    lim = gpu_check_limits(t, hardware_params)
    problems: list[tuple] = []

    def add(check: str, kernel: str, value: int, limit: int, text: str) -> None:
        problems.append((check, kernel, value, limit, text))

    kernels = kernel_resources(module)
    for k in kernels:
        name, threads = k["name"], k["threads"]
        if threads is not None and threads > lim.max_threads_per_block:
            add("threads_per_block", name, threads, lim.max_threads_per_block,
                f"kernel {name} launches {threads} threads per block (block {k['block']}), more than "
                f"max_threads_per_block={lim.max_threads_per_block}")
        for axis, (b, hi) in enumerate(zip(k["block"], BLOCK_DIM_MAX)):
            if b is not None and b > hi:
                add("block_dim", name, b, hi, f"kernel {name}: threadIdx.{'xyz'[axis]} extent {b} exceeds "
                    f"CUDA's limit of {hi}")
        for axis, (g, hi) in enumerate(zip(k["grid"], GRID_DIM_MAX)):
            if g is not None and g > hi:
                add("grid_dim", name, g, hi, f"kernel {name}: blockIdx.{'xyz'[axis]} extent {g} exceeds "
                    f"CUDA's limit of {hi}")
        if k["shared_bytes"] > lim.max_shared_memory_per_block:
            add("shared_memory", name, k["shared_bytes"], lim.max_shared_memory_per_block,
                f"kernel {name} uses {k['shared_bytes']} bytes of shared memory per block, more than "
                f"max_shared_memory_per_block={lim.max_shared_memory_per_block}")
        if k["local_bytes"] > CUDA_MAX_LOCAL_MEMORY_PER_THREAD:
            add("local_memory", name, k["local_bytes"], CUDA_MAX_LOCAL_MEMORY_PER_THREAD,
                f"kernel {name} uses {k['local_bytes']} bytes of local memory per thread, more than CUDA's "
                f"{CUDA_MAX_LOCAL_MEMORY_PER_THREAD} per thread")
        elif threads is not None and k["local_bytes"] * threads > lim.max_local_memory_per_block:
            add("local_memory", name, k["local_bytes"] * threads, lim.max_local_memory_per_block,
                f"kernel {name} uses {k['local_bytes']} bytes of local memory per thread x {threads} threads, "
                f"more than max_local_memory_per_block={lim.max_local_memory_per_block}")
        if k["vector_bytes"] > lim.max_vector_bytes:
            add("vector_bytes", name, k["vector_bytes"], lim.max_vector_bytes,
                f"kernel {name}: {k['vector_where']} moves {k['vector_bytes']} bytes at once, more than "
                f"max_vector_bytes={lim.max_vector_bytes}")
    vthreads = module.launch.get("max_vthread_extent")
    if isinstance(vthreads, int) and vthreads > lim.max_vthread_extent:
        add("vthread_extent", module.entry_name, vthreads, lim.max_vthread_extent,
            f"{module.entry_name}: a vthread loop nest of extent {vthreads}, more than "
            f"max_vthread_extent={lim.max_vthread_extent}")
    if registers is None:
        registers = nvcc_available() is None
        if registers and problems:
            registers = False  # already refused: no need to run nvcc
    if registers:
        info = _ptxas_resources(module, t.arch)
        for k in kernels:
            name, threads = k["name"], k["threads"]
            res = info.get(k["symbol"])
            if res is None:
                continue
            if res["shared_bytes"] > lim.max_shared_memory_per_block and k["shared_bytes"] <= \
                    lim.max_shared_memory_per_block:
                add("shared_memory", name, res["shared_bytes"], lim.max_shared_memory_per_block,
                    f"kernel {name} uses {res['shared_bytes']} bytes of shared memory per block (ptxas), "
                    f"more than max_shared_memory_per_block={lim.max_shared_memory_per_block}")
            if threads is None:
                continue
            warp = max(1, lim.warp_size)
            counted = -(-threads // warp) * warp
            regs = res["registers"] * counted
            if regs > lim.registers_per_block:
                add("registers", name, regs, lim.registers_per_block,
                    f"kernel {name} needs {res['registers']} registers per thread x {counted} threads "
                    f"({threads} rounded up to whole warps) = {regs}, more than "
                    f"registers_per_block={lim.registers_per_block}")
    return problems


def check_gpu_program(module: Any, target: Any = None, hardware_params: HardwareParams | None = None,
                      registers: bool | None = None) -> None:
    """Raise InvalidGpuProgramError, naming every violation, when the CudaModule ``module``
    cannot run on the GPU of ``target`` (default: the module's target); see the module
    docstring for the checks.  ``registers``: also check registers with ``ptxas -v`` (None:
    when nvcc is available).  Raises BuildError when asked for registers and ptxas fails."""
    problems = gpu_program_problems(module, target, hardware_params, registers)
    if problems:
        t = Target.parse(target if target is not None else module.target)
        text = "; ".join(p[4] for p in problems)
        raise InvalidGpuProgramError(f"invalid GPU program for {str(t)!r} (VerifyGPUCode): {text}",
                                     tuple(p[:4] for p in problems))
