"""A program built for a ``cuda`` target: TVM's host module with its CUDA device module imported.

    driver.build(..., "cuda") --> CudaModule
        .imported_modules[0]            CudaSourceModule: get_source() -> CUDA C (seed 004),
                                        get_source("ptx"), save(.cu / .ptx / .cubin / .json)
        .emulate(*numpy arrays)         the same kernels run on the CPU with CUDA's semantics
                                        (every block and thread, barriers honoured)
        mod(*arrays on sc.cuda(i))      the kernels launched on the GPU (pycuda, extra .[cuda])
        .time_evaluator(name, sc.cuda(0), number, repeat, min_repeat_ms)   CUDA-event timing

The module never compiles anything itself: the driver hands it the CUDA source, the launch
descriptions (``docs/gpu_kernel_form.md``), and zero-argument callables that produce the PTX,
the cubin and the CPU emulation module on first use.  So this file imports neither the code
generators nor pycuda; ``cuda_driver`` imports pycuda only when
a kernel is launched on a GPU.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from scheduler_core.base.errors import BuildError, DeviceRuntimeError, RuntimeArgumentError
from scheduler_core.base.gpu_spec import GPU_TAGS
from scheduler_core.ir import expr as E
from scheduler_core.ir import tir as T
from scheduler_core.ir.expr_functor import substitute
from scheduler_core.ir.simplify import const_value, simplify

from .cuda_driver import (  # pycuda loads on first use
    DeviceBuffer,
    KernelCall,
    LaunchSequence,
    load_kernels,
    time_launches,
)
from .device import Device, device
from .ndarray import NDArray
from .signature import Signature
from .timer import ProfileResult, check_timing_args

CUDA_SOURCE_FORMATS = ("", "cu", "cuda", "ptx")


def _once(value_or_factory):
    """A getter that computes ``value_or_factory()`` on first use (or returns the value)."""
    box: dict[str, Any] = {}

    def get():
        if "v" not in box:
            box["v"] = value_or_factory() if callable(value_or_factory) else value_or_factory
        return box["v"]
    return get


class CudaSourceModule:
    """The device module: CUDA C source, PTX / cubin for ``arch``, and the launch descriptions.

    source: the CUDA C text; ptx / cubin: bytes or zero-argument callables producing them
    (nvcc); launches: one dict per kernel (name, grid, block, shared_bytes, params).
    """

    type_key = "cuda"

    def __init__(self, source: str, launches: Sequence[dict], arch: str,
                 ptx: bytes | Callable[[], bytes] | None = None, cubin: bytes | Callable[[], bytes] | None = None):
        self.source, self.launches, self.arch = source, [dict(d) for d in launches], arch
        self._ptx = _once(ptx) if ptx is not None else None
        self._cubin = _once(cubin) if cubin is not None else None

    def get_source(self, fmt: str = "") -> str:
        """``""``/``"cu"``/``"cuda"``: the CUDA C source; ``"ptx"``: the PTX (needs nvcc).

        Raises ValueError for an unknown format, BuildError when the PTX cannot be made.
        """
        if fmt not in CUDA_SOURCE_FORMATS:
            raise ValueError(f"unknown source format {fmt!r}; expected one of {CUDA_SOURCE_FORMATS}")
        if fmt == "ptx":
            return self.ptx().decode()
        return self.source

    def ptx(self) -> bytes:
        if self._ptx is None:
            raise BuildError("this CUDA module was built without a PTX compiler")
        return self._ptx()

    def cubin(self) -> bytes:
        if self._cubin is None:
            raise BuildError("this CUDA module was built without a cubin compiler")
        return self._cubin()

    def launch_json(self) -> str:
        """The launch descriptions as JSON: ``{"arch", "kernels": [{name, grid, block, ...}]}``."""
        return json.dumps({"arch": self.arch, "kernels": self.launches}, indent=1)

    def save(self, path, fmt: str = "") -> None:
        """Write the CUDA source (.cu), PTX (.ptx), cubin (.cubin) or launch JSON (.json), by extension."""
        fmt = fmt or os.path.splitext(str(path))[1].lstrip(".")
        data: bytes
        if fmt in ("cu", "cuda"):
            data = self.source.encode()
        elif fmt == "ptx":
            data = self.ptx()
        elif fmt == "cubin":
            data = self.cubin()
        elif fmt == "json":
            data = self.launch_json().encode()
        else:
            raise ValueError(f"cannot save a CUDA module as {fmt!r}; use .cu, .ptx, .cubin or .json")
        with open(path, "wb") as f:
            f.write(data)

    def __repr__(self) -> str:
        return f"CudaSourceModule({len(self.launches)} kernel(s), {self.arch})"


class CudaModule:
    """A program built for ``cuda``: callable on CUDA arrays, emulated on numpy arrays.

    signature: the entry's buffers and symbolic sizes (as a CPU Module's); device_module:
    the CudaSourceModule (also ``imported_modules[0]``); emulator: a zero-argument
    callable returning the CPU Module that runs the kernels with CUDA's semantics
    (built on first use); kernel_func: the kernel-form PrimFunc, whose host code (loops,
    conditions, lets around kernels) this module runs; launch: the code generator's launch
    description (kernel symbols, arguments, intermediate buffers).
    """

    type_key = "cuda_host"

    def __init__(self, signature: Signature, device_module: CudaSourceModule, kernel_func: T.PrimFunc,
                 launch: dict, emulator: Callable[[], Any], target=None):
        self.signature, self.target = signature, target
        self.kernel_func, self.launch = kernel_func, launch
        self.lowered = str(kernel_func)
        self.device_module = device_module
        self.imported_modules: list = [device_module]
        self._emulator = _once(emulator)
        self._kernels: dict[int, dict] = {}
        self._stored_names: set[str] | None = None
        self.warnings: list = []

    @property
    def entry_name(self) -> str:
        return self.signature.name

    def get_source(self, fmt: str = "") -> str:
        """The host side: ``""`` the launch descriptions (JSON); ``"cu"``/``"ptx"`` the device code."""
        if fmt in ("cu", "cuda", "ptx"):
            return self.device_module.get_source(fmt)
        if fmt not in ("", "json"):
            raise ValueError(f"unknown source format {fmt!r}; expected '', 'json', 'cu' or 'ptx'")
        return self.device_module.launch_json()

    def get_function(self, name: str) -> Callable:
        if name != self.entry_name:
            raise RuntimeArgumentError(f"this module has no function {name!r}; its entry is {self.entry_name!r}")
        return self.__call__

    __getitem__ = get_function

    # -- running ------------------------------------------------------------
    def emulate(self, *args) -> None:
        """Run the program on the CPU with CUDA's semantics; outputs are written in place.

        ``args`` as for a CPU Module: numpy arrays or CPU NDArrays (one per buffer, in
        parameter order), optionally followed by the symbolic sizes.  Every block and thread
        of every kernel runs; ``__syncthreads()`` is honoured (docs/gpu_kernel_form.md).
        """
        self._emulator()(*args)

    def __call__(self, *args) -> None:
        """Launch the kernels on the GPU holding ``args`` (NDArrays made on ``sc.cuda(i)``).

        Raises RuntimeArgumentError naming a bad argument (a host array: use
        ``sc.nd.array(x, sc.cuda(0))``, or ``mod.emulate`` where there is no GPU),
        DeviceRuntimeError when the GPU, its driver or pycuda is missing.
        """
        self._launcher(args)()

    def time_evaluator(self, func_name: str, dev: Device | str, number: int = 10, repeat: int = 1,
                       min_repeat_ms: float = 0, enable_cpu_cache_flush: bool = False) -> Callable:
        """TVM's ``time_evaluator`` on a CUDA device: ``f(*args) -> ProfileResult`` (seconds),
        timed with CUDA events around ``number`` back-to-back calls after one warm-up.

        The host code is walked, intermediates allocated and kernel arguments packed once per
        ``f(*args)``, before the timed loop; inside it each call only enqueues its launches
        (no synchronisation, no allocation), so a small kernel is not timed with host work."""
        self.get_function(func_name)
        check_timing_args(number, repeat, min_repeat_ms)
        dev = device(dev)
        if dev.kind != "cuda":
            raise DeviceRuntimeError(f"{self.entry_name} is CUDA code and cannot be timed on {dev}; "
                                     "use emulate() to check it on the CPU")
        dev.check_usable()

        def evaluator(*args) -> ProfileResult:
            launches = self._launcher(args)
            launches.clear_status()
            results = time_launches(launches.enqueue, number, repeat, min_repeat_ms, dev.index)
            launches.check_status()  # a gathered index out of range in any timed call raises
            return ProfileResult(float(np.mean(results)), tuple(results))
        return evaluator

    def _launcher(self, args: tuple) -> LaunchSequence:
        """Check ``args`` (CUDA NDArrays on one device, then optional sizes); the host code of
        the kernel form walked once for these sizes (:func:`plan_host`) and bound to their
        memory: calling it launches every kernel and waits, ``.enqueue()`` only launches."""
        n_buf = len(self.signature.params)
        if len(args) not in (n_buf, n_buf + len(self.signature.scalar_params)):
            raise RuntimeArgumentError(f"{self.entry_name} takes {n_buf} array arguments, got {len(args)}")
        index: int | None = None
        buffers: dict[str, Any] = {}
        bound: dict[str, int] = {}
        for i, (p, a) in enumerate(zip(self.signature.params, args)):
            if not isinstance(a, NDArray) or a.device.kind != "cuda":
                where = a.device if isinstance(a, NDArray) else type(a).__name__
                raise RuntimeArgumentError(
                    f"argument {i} ({p.name}): the kernels run on a CUDA device, got {where}; pass "
                    "sc.nd.array(x, sc.cuda(0)), or call mod.emulate(...) to run them on the CPU")
            if index is not None and a.device.index != index:
                raise RuntimeArgumentError(f"argument {i} ({p.name}) is on {a.device}, the others on cuda({index})")
            index = a.device.index
            if a.dtype != p.dtype or len(a.shape) != len(p.shape):
                raise RuntimeArgumentError(f"argument {i} ({p.name}): expected {p.dtype} of rank {len(p.shape)}, "
                                           f"got {a.dtype} {a.shape}")
            for d, got in zip(p.shape, a.shape):
                if isinstance(d, int) and d != got:
                    raise RuntimeArgumentError(f"argument {i} ({p.name}): expected shape "
                                               f"{tuple(str(x) for x in p.shape)}, got {a.shape}")
                if isinstance(d, str) and bound.setdefault(d, got) != got:
                    raise RuntimeArgumentError(f"argument {i} ({p.name}): {d} = {got} contradicts {bound[d]}")
            buffers[p.name] = a.device_buffer()
        self._check_no_aliasing(buffers)
        for name, given in zip(self.signature.scalar_params, args[n_buf:]):
            bound[name] = int(given)
        dev_index = index or 0
        plan = plan_host(self.kernel_func, self.launch["kernels"], bound)
        if not plan.calls:
            return LaunchSequence({}, [], dev_index)
        return prepare_host(plan, self._load(dev_index), buffers, dev_index, self.launch.get("status_symbol"),
                            self.entry_name)

    def _check_no_aliasing(self, buffers: dict) -> None:
        """RuntimeArgumentError when two parameters share device memory and a kernel writes
        one of them: the kernels declare every buffer ``__restrict__`` (as TVM's ``tir.noalias``
        functions), so nvcc may keep a value read through one in a register across a write
        through the other, and the result would be silently wrong."""
        seen: dict[int, str] = {}
        for name, buf in buffers.items():
            other = seen.setdefault(buf.ptr, name)
            if other == name:
                continue
            if self._stored_names is None:
                self._stored_names = {st.buffer.name for st in T.walk_stmts(self.kernel_func.body)
                                      if isinstance(st, T.Store)}
            if {name, other} & self._stored_names:
                raise RuntimeArgumentError(
                    f"arguments {other} and {name} are the same device memory, and the program writes "
                    f"{other if other in self._stored_names else name}: its kernels assume their buffers do "
                    "not overlap (__restrict__); pass a separate array for the output")

    def _load(self, index: int) -> dict:
        if index not in self._kernels:
            names = [d["symbol"] for d in self.launch["kernels"]]
            try:
                self._kernels[index] = load_kernels(self.device_module.cubin(), names, index)
            except DeviceRuntimeError as err:
                if "no kernel image" not in str(err):
                    raise
                # a cubin for another compute capability (built on a host with another GPU, or
                # none): the PTX of an older arch is compiled for this device by the driver
                self._kernels[index] = load_kernels(self.device_module.ptx(), names, index)
        return self._kernels[index]

    # -- export -------------------------------------------------------------
    def save(self, path, fmt: str = "") -> None:
        """Write the device code (.cu, .ptx, .cubin) or the launch descriptions (.json), by extension."""
        self.device_module.save(path, fmt)

    def export_library(self, path) -> list[str]:
        """Write ``<stem>.cu``, ``<stem>.ptx``, ``<stem>.json`` (and ``<stem>.cubin`` when nvcc can make
        it) next to ``path``; returns the paths written."""
        stem = os.path.splitext(str(path))[0]
        written = []
        for ext in ("cu", "ptx", "json", "cubin"):
            try:
                self.save(f"{stem}.{ext}")
            except BuildError:
                if ext in ("cu", "json"):
                    raise
                continue
            written.append(f"{stem}.{ext}")
        return written

    def __repr__(self) -> str:
        return f"CudaModule({self.entry_name}, {len(self.device_module.launches)} kernel(s))"


# -- the host side of a kernel-form program -------------------------------------------------

def host_value(e: E.Expr, env: dict) -> int:
    """The integer value of a host expression given ``env`` (Var -> int); DeviceRuntimeError if not constant."""
    v = const_value(simplify(substitute(e, {var: E.const(int(x), var.dtype) for var, x in env.items()})))
    if not isinstance(v, int):
        raise DeviceRuntimeError(f"host expression {E.expr_str(e)} is not an integer here")
    return v


def launch_dims(kernel: T.For, env: dict) -> tuple[list[int], list[int]]:
    """``(grid, block)`` of a kernel nest: the extents of its blockIdx / threadIdx loops."""
    dims = {}
    stack: list[T.Stmt] = [kernel]
    while stack:
        s = stack.pop()
        if isinstance(s, T.For) and s.kind in GPU_TAGS:
            dims[s.kind] = host_value(s.extent, env)
        stack.extend(c for c in T.stmt_children(s) if isinstance(c, T.Stmt))
    grid = [dims.get(f"blockIdx.{a}", 1) for a in "xyz"]
    block = [dims.get(f"threadIdx.{a}", 1) for a in "xyz"]
    return grid, block


@dataclasses.dataclass(frozen=True)
class HostPlan:
    """The host code of a kernel-form program for one binding of its sizes, flattened.

    calls: the kernel launches in program order, each ``KernelCall(symbol, args, grid,
    block)`` where an arg is ``("buffer", name)`` (a parameter or an intermediate) or a numpy
    int32/int64 scalar; allocations: ``(name, shape, dtype)`` of the intermediate global
    buffers the program allocates.  The host code reads only sizes (never device memory),
    so one walk gives every launch of every later call with the same sizes.
    """

    calls: tuple[KernelCall, ...]
    allocations: tuple[tuple[str, tuple[int, ...], str], ...]


def plan_host(func: T.PrimFunc, kernels_desc: list, bound: dict) -> HostPlan:
    """Walk the host code of the kernel-form ``func`` once with ``bound`` (symbolic size name ->
    int): serial loops, conditions and lets around kernels are evaluated here; each kernel nest
    (a loop with ``annotations["kernel"]``) becomes a KernelCall with the arguments its launch
    description names, unless a grid or block extent is 0 (nothing to run; ``cuLaunchKernel``
    would fail with "invalid argument").  Raises DeviceRuntimeError on a host expression that is
    not an integer or a statement the host cannot run.
    """
    by_name = {d["name"]: d for d in kernels_desc}
    env: dict = {v: bound[v.name] for v in func.scalar_params if v.name in bound}
    calls: list[KernelCall] = []
    allocations: list[tuple[str, tuple[int, ...], str]] = []

    def go(s: T.Stmt) -> None:
        if isinstance(s, T.SeqStmt):
            for c in s.seq:
                go(c)
        elif isinstance(s, T.For) and s.annotations.get("kernel"):
            desc = by_name[s.annotations["kernel"]]
            grid, block = launch_dims(s, env)
            if min(grid) <= 0 or min(block) <= 0:
                return  # a loop of no iterations (a size bound to 0): CUDA refuses an empty launch
            names = {v.name: x for v, x in env.items()}
            args: list[Any] = []
            for a in desc["args"]:
                if a["kind"] in ("param", "intermediate"):
                    args.append(("buffer", a["name"]))
                else:
                    args.append(np.int64(names[a["name"]]) if a.get("dtype") == "int64"
                                else np.int32(names[a["name"]]))
            calls.append(KernelCall(desc["symbol"], tuple(args), tuple(grid), tuple(block),
                                    int(desc.get("dynamic_shared_bytes") or 0)))
        elif isinstance(s, T.For):
            lo = host_value(s.min, env)
            for v in range(lo, lo + host_value(s.extent, env)):
                env[s.loop_var] = v
                go(s.body)
            env.pop(s.loop_var, None)
        elif isinstance(s, T.IfThenElse):
            if host_value(s.cond, env):
                go(s.then_case)
            elif s.else_case is not None:
                go(s.else_case)
        elif isinstance(s, T.LetStmt):
            env[s.var] = host_value(s.value, env)
            go(s.body)
        elif isinstance(s, T.Allocate):
            allocations.append((s.buffer.name, tuple(host_value(d, env) for d in s.buffer.shape), s.buffer.dtype))
            go(s.body)
        elif isinstance(s, T.Evaluate):
            pass
        else:
            raise DeviceRuntimeError(f"unexpected host statement {type(s).__name__} in {func.name}")

    go(func.body)
    return HostPlan(tuple(calls), tuple(allocations))


def prepare_host(plan: HostPlan, functions: dict, buffers: dict, index: int, status_symbol: str | None = None,
                 name: str = "kernels") -> LaunchSequence:
    """The launches of ``plan`` bound to device memory: ``buffers`` (parameter name ->
    DeviceBuffer) and a new DeviceBuffer for each intermediate, allocated here once; the
    returned LaunchSequence owns them and checks the module's ``status_symbol`` word (named
    ``name`` in its errors).  KeyError when a kernel is missing from ``functions``."""
    memory = dict(buffers)
    for name, shape, dtype in plan.allocations:
        memory[name] = DeviceBuffer(shape, dtype, index)
    calls = [dataclasses.replace(c, args=tuple(memory[a[1]] if isinstance(a, tuple) else a for a in c.args))
             for c in plan.calls]
    return LaunchSequence(functions, calls, index, keep=list(memory.values()), status_symbol=status_symbol,
                          name=name)


def run_host(func: T.PrimFunc, kernels_desc: list, functions: dict, buffers: dict, bound: dict,
             index: int) -> None:
    """Run the host code of the kernel-form ``func`` on CUDA device ``index`` once and wait for
    it: :func:`plan_host`, then :func:`prepare_host`, then the launches (nothing is launched,
    and no device touched, when the plan has no kernel call)."""
    plan = plan_host(func, kernels_desc, bound)
    if plan.calls:
        prepare_host(plan, functions, buffers, index)()
