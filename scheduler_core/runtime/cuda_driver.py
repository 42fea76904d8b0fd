"""The CUDA device path through pycuda: device memory, module load, kernel launch, CUDA-event timing.

    numpy array --to_device--> DeviceBuffer (device memory, shape, dtype) --.get()--> numpy array
    device_attributes(index) -> {name, compute_version, max_threads_per_block, ...}
    device_hardware_params(index) -> HardwareParams of the device itself
    PTX or cubin bytes --load_kernels--> {kernel name: pycuda Function}
    launch(functions, symbol, args, grid, block)    one kernel launch, waited for
    LaunchSequence(functions, [KernelCall...])      launches prepared once, enqueued many times
    time_launches(...) -> seconds per call, measured with CUDA events

pycuda is the optional extra ``.[cuda]`` (it builds only where the NVIDIA driver is
installed); it is imported on first use, and every entry point raises
``DeviceRuntimeError`` saying what is missing when it cannot run (no pycuda, no driver,
no such device).  Nothing else in the package imports this module at import time.

Each device is used through its primary context (what the CUDA runtime API and PyTorch
use), pushed around every call and popped after it, so several threads and libraries can
share the GPU.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from scheduler_core.base.errors import DeviceRuntimeError, check_return_code
from scheduler_core.base.target import HardwareParams, Target

_LOCK = threading.Lock()
DEFAULT_DYNAMIC_SHARED_BYTES = 48 * 1024  # what a kernel may use without setting MAX_DYNAMIC_SHARED_SIZE_BYTES
_CONTEXTS: dict[int, Any] = {}


def pycuda_driver():
    """``pycuda.driver``, initialised; DeviceRuntimeError naming what is missing otherwise."""
    try:
        import pycuda.driver as drv  # the optional extra .[cuda]
    except ImportError as err:
        raise DeviceRuntimeError("running on a CUDA device needs pycuda (pip install 'autosched[cuda]', on a "
                                 f"machine with the NVIDIA driver): {err}") from None
    try:
        drv.init()
    except Exception as err:  # pycuda.driver.Error: no driver / no device
        raise DeviceRuntimeError(f"the CUDA driver failed to initialise: {err}") from None
    return drv


@contextlib.contextmanager
def device_context(index: int) -> Iterator[Any]:
    """The primary context of CUDA device ``index``, current for the ``with`` body."""
    drv = pycuda_driver()
    with _LOCK:
        ctx = _CONTEXTS.get(index)
        if ctx is None:
            if index >= drv.Device.count():
                raise DeviceRuntimeError(f"CUDA device {index} does not exist ({drv.Device.count()} present)")
            ctx = _CONTEXTS[index] = drv.Device(index).retain_primary_context()
    ctx.push()
    try:
        yield drv
    finally:
        drv.Context.pop()


def device_name(index: int = 0) -> tuple[str, str]:
    """``(name, arch)`` of CUDA device ``index``, e.g. ``("NVIDIA H100 80GB HBM3", "sm_90")``."""
    with device_context(index) as drv:
        dev = drv.Device(index)
        major, minor = dev.compute_capability()
        return dev.name(), f"sm_{major}{minor}"


# TVM's Device attribute names -> the CUDA driver's device attribute (pycuda.driver.device_attribute).
_ATTRIBUTES = {
    "max_threads_per_block": "MAX_THREADS_PER_BLOCK",
    "warp_size": "WARP_SIZE",
    "max_shared_memory_per_block": "MAX_SHARED_MEMORY_PER_BLOCK",
    "max_shared_memory_per_block_optin": "MAX_SHARED_MEMORY_PER_BLOCK_OPTIN",
    "max_registers_per_block": "MAX_REGISTERS_PER_BLOCK",
    "multi_processor_count": "MULTIPROCESSOR_COUNT",
    "max_block_dim_x": "MAX_BLOCK_DIM_X",
    "max_block_dim_y": "MAX_BLOCK_DIM_Y",
    "max_block_dim_z": "MAX_BLOCK_DIM_Z",
    "max_grid_dim_x": "MAX_GRID_DIM_X",
    "clock_rate_khz": "CLOCK_RATE",
}


def device_attributes(index: int = 0) -> dict[str, Any]:
    """What CUDA device ``index`` reports of itself (TVM's ``Device`` attributes).

    Keys: ``device_name`` (str), ``compute_version`` (``"9.0"``), ``arch`` (``"sm_90"``),
    ``total_memory`` (bytes) and the ints of ``_ATTRIBUTES``: ``max_threads_per_block``,
    ``warp_size``, ``max_shared_memory_per_block`` (bytes, static),
    ``max_shared_memory_per_block_optin`` (bytes, dynamic with opt-in; 0 where the driver
    does not report it), ``max_registers_per_block``, ``multi_processor_count``, the block
    and grid dimension limits, ``clock_rate_khz``.  Raises DeviceRuntimeError without a device.
    """
    with device_context(index) as drv:
        dev = drv.Device(index)
        major, minor = dev.compute_capability()
        out: dict[str, Any] = {"device_name": dev.name(), "compute_version": f"{major}.{minor}",
                               "arch": f"sm_{major}{minor}", "total_memory": int(dev.total_memory())}
        for key, attr in _ATTRIBUTES.items():
            code = getattr(drv.device_attribute, attr, None)
            out[key] = int(dev.get_attribute(code)) if code is not None else 0
        return out


def device_hardware_params(index: int = 0) -> HardwareParams:
    """The HardwareParams of CUDA device ``index`` as the device reports them (TVM's default
    hardware parameters of a cuda target, which it queries from device 0): the limits of
    ``cuda -arch=<its arch>`` with threads, shared memory, registers and warp size replaced
    by the device's own; ``max_vthread_extent`` = warp size / 4 as Ansor.  Raises
    DeviceRuntimeError without a device."""
    a = device_attributes(index)
    base = HardwareParams.for_target(Target.parse(f"cuda -arch={a['arch']}"))
    return dataclasses.replace(
        base,
        max_threads_per_block=a["max_threads_per_block"] or base.max_threads_per_block,
        max_shared_memory_per_block=a["max_shared_memory_per_block"] or base.max_shared_memory_per_block,
        max_dynamic_shared_memory_per_block=(a["max_shared_memory_per_block_optin"]
                                             or base.max_dynamic_shared_memory_per_block),
        registers_per_block=a["max_registers_per_block"] or base.registers_per_block,
        warp_size=a["warp_size"] or base.warp_size,
        max_vthread_extent=max(1, (a["warp_size"] or base.warp_size) // 4))


class DeviceBuffer:
    """A C-contiguous array in the memory of CUDA device ``index``.

    shape: tuple of ints; dtype: numpy dtype; ``ptr``: the device address kernels receive.
    The memory is freed when the buffer is garbage collected.
    """

    def __init__(self, shape: Sequence[int], dtype, index: int = 0):
        self.shape = tuple(int(s) for s in shape)
        self.dtype = np.dtype(dtype)
        self.index = index
        nbytes = max(1, int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize)
        with device_context(index) as drv:
            self._alloc = drv.mem_alloc(nbytes)

    @property
    def ptr(self) -> int:
        return int(self._alloc)

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize

    def set(self, host: np.ndarray) -> DeviceBuffer:
        """Copy ``host`` (this shape; converted to this dtype) to the device."""
        src = np.asarray(host, dtype=self.dtype, order="C")  # (ascontiguousarray would make () (1,))
        if src.shape != self.shape:
            raise ValueError(f"copy to device: shape {src.shape} does not match {self.shape}")
        with device_context(self.index) as drv:
            drv.memcpy_htod(self._alloc, src)
        return self

    def get(self) -> np.ndarray:
        """A numpy copy of the contents."""
        out = np.empty(self.shape, dtype=self.dtype)
        with device_context(self.index) as drv:
            drv.memcpy_dtoh(out, self._alloc)
        return out


def to_device(host: np.ndarray, index: int = 0) -> DeviceBuffer:
    """A new DeviceBuffer holding a copy of ``host``."""
    host = np.asarray(host, order="C")  # a zero-rank array stays shape ()
    return DeviceBuffer(host.shape, host.dtype, index).set(host)


def load_kernels(image: bytes, names: Sequence[str], index: int = 0) -> dict[str, Any]:
    """Load a PTX or cubin ``image`` on device ``index``; its kernels by name."""
    with device_context(index) as drv:
        try:
            module = drv.module_from_buffer(image)
        except Exception as err:  # pycuda.driver.Error (wrong arch, bad image)
            raise DeviceRuntimeError(f"the CUDA driver could not load the kernels: {err}") from None
        return {name: module.get_function(name) for name in names} | {"__module__": module}


def launch(functions: dict[str, Any], symbol: str, args: Sequence[Any], grid: Sequence[int],
           block: Sequence[int], index: int = 0) -> None:
    """Launch kernel ``symbol`` (from :func:`load_kernels`) with ``args`` (DeviceBuffers and numpy
    int32/int64 scalars), ``grid`` and ``block`` (3 ints each), and wait for it."""
    raw = [a._alloc if isinstance(a, DeviceBuffer) else a for a in args]
    with device_context(index) as drv:
        functions[symbol](*raw, grid=tuple(int(g) for g in grid), block=tuple(int(b) for b in block))
        drv.Context.synchronize()


@dataclasses.dataclass(frozen=True)
class KernelCall:
    """One kernel launch: kernel ``symbol``, ``args`` (DeviceBuffers and numpy int32/int64
    scalars, in the kernel's parameter order), ``grid`` and ``block`` (3 ints each), and the
    bytes of dynamic shared memory per block (``extern __shared__``; 0 for none)."""

    symbol: str
    args: tuple
    grid: tuple
    block: tuple
    dynamic_shared_bytes: int = 0


class LaunchSequence:
    """Kernel launches prepared once, to be enqueued many times (what ``time_evaluator`` times).

    functions: from :func:`load_kernels`; calls: KernelCalls in order; keep: objects (the
    intermediate DeviceBuffers) that must live as long as the sequence.  Each kernel's argument
    format is set once (pycuda's ``Function.prepare``) and the raw arguments converted once, so
    ``enqueue()`` only hands each launch to the driver: no argument inspection, no context
    switch, no allocation, no synchronisation.  ``enqueue()`` must run with the device's
    context current (inside :func:`device_context`, as :func:`time_launches` does); calling the
    sequence makes it current, enqueues and waits.  KeyError when a kernel is not in ``functions``.

    ``status_symbol``: the module's ``__device__`` uint32 status word (the launch description's
    ``status_symbol``), or None.  Calling the sequence clears it first and reads it after the
    wait; a nonzero word raises as the CPU code's return code does (``check_return_code``:
    IndexOutOfBoundsError for bit 2).  ``clear_status`` / ``check_status`` do the same around
    enqueued launches (``time_launches``).
    """

    def __init__(self, functions: dict[str, Any], calls: Sequence[KernelCall], index: int = 0,
                 keep: Sequence[Any] = (), status_symbol: str | None = None, name: str = "kernels"):
        self.index, self._keep, self.name = index, list(keep), name
        self._status: int | None = None
        if status_symbol:
            with device_context(index):
                self._status = int(functions["__module__"].get_global(status_symbol)[0])
        self._steps: list[tuple[Any, tuple, tuple, list, int]] = []
        for c in calls:
            fn = functions[c.symbol]
            fmt = "".join("P" if isinstance(a, DeviceBuffer) else np.dtype(a.dtype).char for a in c.args)
            fn.prepare(fmt)
            if c.dynamic_shared_bytes > DEFAULT_DYNAMIC_SHARED_BYTES:
                # more than 48 KiB of dynamic shared memory needs the kernel's opt-in
                with device_context(index) as drv:
                    try:
                        fn.set_attribute(drv.function_attribute.MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                         int(c.dynamic_shared_bytes))
                    except Exception as err:  # pycuda.driver.Error: more than this device allows
                        raise DeviceRuntimeError(
                            f"kernel {c.symbol} needs {c.dynamic_shared_bytes} bytes of shared memory per "
                            f"block, more than CUDA device {index} allows: {err}") from None
            raw = [int(a._alloc) if isinstance(a, DeviceBuffer) else a for a in c.args]
            self._steps.append((fn, tuple(int(g) for g in c.grid), tuple(int(b) for b in c.block), raw,
                                int(c.dynamic_shared_bytes)))

    def __len__(self) -> int:
        return len(self._steps)

    def enqueue(self) -> None:
        """Launch every kernel on the default stream, in order, without waiting."""
        for fn, grid, block, raw, shared in self._steps:
            fn.prepared_async_call(grid, block, None, *raw, shared_size=shared)

    def __call__(self) -> None:
        """Launch every kernel and wait for the last; a fault in any of them, or a bit set in the
        status word, raises here."""
        if not self._steps:
            return
        with device_context(self.index) as drv:
            self.clear_status()
            self.enqueue()
            drv.Context.synchronize()
            self.check_status()

    def clear_status(self) -> None:
        """Zero the status word (no-op without one)."""
        if self._status is not None:
            with device_context(self.index) as drv:
                drv.memset_d32(self._status, 0, 1)

    def check_status(self) -> None:
        """Read the status word after the launches (waits for them; no-op without one) and raise
        for a nonzero word."""
        if self._status is not None:
            word = np.zeros(1, np.uint32)
            with device_context(self.index) as drv:
                drv.memcpy_dtoh(word, self._status)
            check_return_code(self.name, int(word[0]))


def time_launches(run, number: int, repeat: int, min_repeat_ms: float, index: int = 0) -> list[float]:
    """Seconds per call of ``run()`` (which enqueues kernels and does not wait for them), ``repeat``
    times, with CUDA events recorded around ``number`` back-to-back calls.

    One warm-up call first, waited for; ``number`` grows until a measurement lasts
    ``min_repeat_ms``.  A fault in a kernel raises when the end event is waited for.
    """
    with device_context(index) as drv:
        run()
        drv.Context.synchronize()
        results = []
        for _ in range(repeat):
            n = number
            while True:
                start, end = drv.Event(), drv.Event()
                start.record()
                for _ in range(n):
                    run()
                end.record()
                end.synchronize()
                ms = end.time_since(start)
                if ms >= min_repeat_ms or n >= 1 << 20:
                    break
                n = max(n * 2, int(n * min_repeat_ms / max(ms, 1e-3)) + 1)
            results.append(ms / 1e3 / n)
        return results
