"""Devices: where arrays live and compiled functions run (TVM's ``tvm.cpu()``/``tvm.cuda()``).

A :class:`Device` is a plain value ``(kind, index)``.  ``cpu`` devices always
exist.  ``cuda`` devices can be named on any machine (so that a script which
builds for ``cuda`` still imports and prints); using one to hold memory or to
run raises :class:`~scheduler_core.base.errors.DeviceRuntimeError`, which says
whether the CUDA driver is missing or the device index is out of range.

Spellings accepted, as in TVM: ``cpu(0)``, ``cuda(0)``, ``device("cpu", 0)``,
``device("llvm -mcpu=core-avx2")``, and the old ``context(target, 0)`` where an
``llvm``/``c`` target means the CPU and ``cuda``/``nvptx`` the GPU.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import importlib.util
from dataclasses import dataclass
from functools import cache

from scheduler_core.base.errors import DeviceRuntimeError

from .cuda_driver import device_attributes, device_context  # pycuda loads only when a CUDA device is used

DEVICE_KINDS = ("cpu", "cuda")
# DLPack device type codes, as TVM reports them in ``Device.device_type``.
_DLPACK_CODES = {"cpu": 1, "cuda": 2}
_KIND_ALIASES = {
    "cpu": "cpu", "llvm": "cpu", "c": "cpu", "stackvm": "cpu",
    "cuda": "cuda", "gpu": "cuda", "nvptx": "cuda",
}


def _cuda_attribute(key: str, doc: str) -> property:
    """A read-only property: the device's CUDA attribute ``key`` (``cuda_driver.device_attributes``)."""
    return property(lambda self: self._attribute(key), doc=doc)


@dataclass(frozen=True)
class Device:
    """A device: ``kind`` is ``"cpu"`` or ``"cuda"``, ``index`` the device number (>= 0)."""

    kind: str
    index: int = 0

    def __post_init__(self) -> None:
        if self.kind not in DEVICE_KINDS:
            raise ValueError(f"unknown device kind {self.kind!r}; expected one of {DEVICE_KINDS}")
        if not isinstance(self.index, int) or self.index < 0:
            raise ValueError(f"device index must be a non-negative int, got {self.index!r}")

    @property
    def device_type(self) -> int:
        """The DLPack device type code (1 for cpu, 2 for cuda), as TVM's ``Device``."""
        return _DLPACK_CODES[self.kind]

    @property
    def device_id(self) -> int:
        """TVM's name for :attr:`index`."""
        return self.index

    @property
    def exist(self) -> bool:
        """Whether the device can be used here: for CUDA, a driver that sees device ``index``
        and pycuda to hold memory and launch kernels (TVM's ``dev.exist``: the runtime can use
        it), so code that checks ``exist`` before running on the GPU falls back where either
        is missing."""
        return self.kind == "cpu" or self.unusable_reason() is None

    def unusable_reason(self) -> str | None:
        """Why this device cannot run or hold memory here, or None when it can.

        A CUDA device needs the NVIDIA driver to see it and pycuda (the optional extra
        ``.[cuda]``), which holds its memory and launches kernels.
        """
        if self.kind == "cpu":
            return None
        reason = cuda_unavailable_reason(self.index)
        if reason is None and importlib.util.find_spec("pycuda") is None:
            reason = "pycuda is not installed (pip install 'autosched[cuda]')"
        return reason

    def check_usable(self) -> None:
        """Raise ``DeviceRuntimeError`` saying why this device cannot run or hold memory
        (:meth:`unusable_reason`)."""
        reason = self.unusable_reason()
        if reason is not None:
            raise DeviceRuntimeError(f"device {self} cannot be used: {reason}")

    def sync(self) -> None:
        """Wait until all work queued on the device is done (a no-op for the CPU).

        Raises ``DeviceRuntimeError`` for a CUDA device that cannot be used here.
        """
        self.check_usable()
        if self.kind == "cuda":
            with device_context(self.index) as drv:
                drv.Context.synchronize()

    def _attribute(self, key: str):
        if self.kind == "cpu":
            raise DeviceRuntimeError(f"{key} is a CUDA device attribute; {self} has none")
        self.check_usable()
        return device_attributes(self.index)[key]

    # The CUDA device attributes (TVM's names); DeviceRuntimeError for the CPU or an unusable device.
    device_name = _cuda_attribute("device_name", 'The GPU\'s name, e.g. "NVIDIA H100 80GB HBM3" (str).')
    compute_version = _cuda_attribute("compute_version", 'The compute capability "major.minor", e.g. "9.0".')
    max_threads_per_block = _cuda_attribute("max_threads_per_block", "Threads one block may have (int).")
    warp_size = _cuda_attribute("warp_size", "Threads of a warp (int).")
    max_shared_memory_per_block = _cuda_attribute(
        "max_shared_memory_per_block", "Bytes of static shared memory one block may use (int).")
    multi_processor_count = _cuda_attribute("multi_processor_count", "Streaming multiprocessors of the GPU (int).")
    total_global_memory = _cuda_attribute("total_memory", "Bytes of device memory (int).")

    def __str__(self) -> str:
        return f"{self.kind}({self.index})"


def cpu(index: int = 0) -> Device:
    """The CPU device ``index`` (TVM's ``tvm.cpu(0)``)."""
    return Device("cpu", index)


def cuda(index: int = 0) -> Device:
    """The CUDA GPU ``index`` (TVM's ``tvm.cuda(0)``); see ``Device.exist`` before using it."""
    return Device("cuda", index)


gpu = cuda  # TVM's old spelling


def device(kind_or_target, index: int = 0) -> Device:
    """A device from a kind name, a target string/object, a DLPack code or a ``Device``.

    ``device("cpu", 0)``, ``device("llvm -mcpu=core-avx2")`` (a CPU), ``device("cuda", 1)``,
    ``device(target)`` for an object with ``.kind`` (e.g. ``codegen.Target``), ``device(2)``.
    Raises ``ValueError`` for a kind that names no device.
    """
    if isinstance(kind_or_target, Device):
        return kind_or_target
    if isinstance(kind_or_target, int):
        for kind, code in _DLPACK_CODES.items():
            if code == kind_or_target:
                return Device(kind, index)
        raise ValueError(f"unknown DLPack device type {kind_or_target}")
    if hasattr(kind_or_target, "kind") and not isinstance(kind_or_target, str):
        kind_or_target = kind_or_target.kind
    text = str(kind_or_target).strip()
    head = text.split()[0].lower() if text else ""
    if head not in _KIND_ALIASES:
        raise ValueError(f"cannot tell the device of {text!r}; expected cpu/llvm/c or cuda/gpu/nvptx")
    return Device(_KIND_ALIASES[head], index)


def context(target, index: int = 0) -> Device:
    """TVM's old ``tvm.context(target, 0)``: the same as :func:`device`."""
    return device(target, index)


@cache
def cuda_unavailable_reason(index: int = 0) -> str | None:
    """Why CUDA device ``index`` cannot be used here, or ``None`` when the driver sees it.

    Asks the CUDA driver (``libcuda``) through ``cuInit``/``cuDeviceGetCount``;
    the answer is cached for the life of the process.
    """
    name = ctypes.util.find_library("cuda") or "libcuda.so.1"
    try:
        lib = ctypes.CDLL(name)
    except OSError:
        return "no CUDA driver (libcuda) found on this machine"
    if lib.cuInit(0) != 0:
        return "the CUDA driver failed to initialise (cuInit)"
    count = ctypes.c_int(0)
    if lib.cuDeviceGetCount(ctypes.byref(count)) != 0:
        return "the CUDA driver could not count devices"
    if index >= count.value:
        return f"only {count.value} CUDA device(s) present"
    return None
