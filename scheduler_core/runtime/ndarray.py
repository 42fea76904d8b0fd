"""Arrays handed to compiled functions (TVM's ``tvm.nd``).

    numpy array --array()--> NDArray (C-contiguous copy on a Device) --Module(...)--> results
    NDArray --numpy()/asnumpy()--> numpy array (a copy)

An :class:`NDArray` on the CPU owns a C-contiguous numpy array in host memory;
compiled CPU functions read and write it in place through its data pointer.  On a
CUDA device it owns device memory (``cuda_driver.DeviceBuffer``, through pycuda, the
optional extra ``.[cuda]``); where no GPU, driver or pycuda is present, asking for a
CUDA array raises ``DeviceRuntimeError`` saying which is missing.

This module is meant to be used as ``sc.nd`` (``sc.nd.array``, ``sc.nd.empty``,
``sc.nd.NDArray``, ``sc.nd.cpu``), as seeds use ``tvm.nd``.
"""

from __future__ import annotations

import numpy as np

from scheduler_core.base.errors import DeviceRuntimeError

from .cuda_driver import DeviceBuffer, to_device  # pycuda loads only when a CUDA array is made
from .device import Device, context, cpu, cuda, device  # re-exported: tvm.nd.cpu etc.

__all__ = ["NDArray", "array", "empty", "Device", "cpu", "cuda", "device", "context"]


def _resolve_device(dev: Device | None, ctx: Device | None) -> Device:
    """The device named by ``device=`` or the old ``ctx=`` keyword (default ``cpu(0)``)."""
    if dev is not None and ctx is not None and dev != ctx:
        raise ValueError(f"device={dev} and ctx={ctx} disagree; pass only one")
    chosen = dev if dev is not None else ctx
    if chosen is None:
        return cpu(0)
    if not isinstance(chosen, Device):
        chosen = device(chosen)
    chosen.check_usable()
    return chosen


class NDArray:
    """An n-dimensional array on a device, as TVM's ``tvm.nd.NDArray``.

    Holds a C-contiguous numpy array (never a view of user memory); use
    :func:`array` or :func:`empty` to make one.  ``shape`` is a tuple of ints,
    ``dtype`` a string such as ``"float32"``.
    """

    __slots__ = ("_data", "_device")

    def __init__(self, data, dev: Device):
        if isinstance(data, np.ndarray) and not data.flags.c_contiguous:
            raise ValueError("NDArray needs C-contiguous storage")
        self._data = data
        self._device = dev

    # -- queries ------------------------------------------------------------
    @property
    def shape(self) -> tuple:
        """The extents, e.g. ``(1024, 1024)``."""
        return self._data.shape

    @property
    def dtype(self) -> str:
        """The element type as a string, e.g. ``"float32"``."""
        return str(self._data.dtype)

    @property
    def device(self) -> Device:
        """The device holding the data."""
        return self._device

    ctx = device  # TVM's old name

    @property
    def ndim(self) -> int:
        return len(self._data.shape)

    @property
    def data_ptr(self) -> int:
        """The address of the first element (what a compiled function receives; a device
        address for a CUDA array)."""
        return self._data.ctypes.data if isinstance(self._data, np.ndarray) else self._data.ptr

    def numpy(self) -> np.ndarray:
        """A numpy copy of the contents (same shape and dtype), copied from the device if needed."""
        return self._data.copy() if isinstance(self._data, np.ndarray) else self._data.get()

    def asnumpy(self) -> np.ndarray:
        """TVM's old name for :meth:`numpy`."""
        return self.numpy()

    def host_view(self) -> np.ndarray:
        """The backing numpy array itself (no copy): writes to it change this NDArray.

        Raises ``DeviceRuntimeError`` for an array in device memory (use :meth:`numpy`)."""
        if not isinstance(self._data, np.ndarray):
            raise DeviceRuntimeError(f"array on {self._device} has no host view; use .numpy()")
        return self._data

    def device_buffer(self):
        """The ``cuda_driver.DeviceBuffer`` of a CUDA array; ``DeviceRuntimeError`` for a CPU array."""
        if isinstance(self._data, np.ndarray):
            raise DeviceRuntimeError(f"array on {self._device} is in host memory, not on a CUDA device")
        return self._data

    def __dlpack__(self, **kwargs):
        """DLPack export of a CPU array (``torch.from_dlpack(x)`` shares the memory, as TVM's
        NDArray does); raises ``DeviceRuntimeError`` for an array in device memory."""
        return self.host_view().__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.host_view().__dlpack_device__()

    def __array__(self, dtype=None, copy=None):
        """``np.asarray(x)``: a copy for a CUDA array, the backing array for a CPU one."""
        data = self._data if isinstance(self._data, np.ndarray) else self._data.get()
        return data if dtype is None else data.astype(dtype)

    # -- mutations ----------------------------------------------------------
    def copyfrom(self, source) -> NDArray:
        """Overwrite the contents with ``source`` (numpy array, list or NDArray).

        ``source`` must have this array's shape; its values are converted to this
        array's dtype.  Returns ``self``.  Raises ``ValueError`` on a shape mismatch.
        """
        src = source.numpy() if isinstance(source, NDArray) else np.asarray(source)
        if src.shape != self.shape:
            raise ValueError(f"copyfrom: array shape {self.shape} does not match source shape {src.shape}")
        if isinstance(self._data, np.ndarray):
            np.copyto(self._data, src, casting="unsafe")
        else:
            self._data.set(src.astype(self._data.dtype, copy=False))
        return self

    def copyto(self, target) -> NDArray:
        """Copy into ``target`` (an NDArray, returned) or onto a new array on a ``Device``."""
        if isinstance(target, NDArray):
            return target.copyfrom(self)
        return array(self.numpy(), device=target)

    def __repr__(self) -> str:
        return f"<NDArray {self.shape} {self.dtype} @{self._device}>\n{self.numpy()!r}"

    def __str__(self) -> str:
        return str(self.numpy())


def array(arr, device: Device | None = None, ctx: Device | None = None) -> NDArray:
    """Copy ``arr`` (numpy array, nested list or NDArray) into a new C-contiguous NDArray.

    ``device``/``ctx`` (TVM's new and old keyword; either may be passed
    positionally as the second argument) default to ``cpu(0)``.  The dtype is
    kept (a list becomes numpy's default dtype).  Raises ``DeviceRuntimeError``
    for a device that cannot hold memory here.
    """
    dev = _resolve_device(device, ctx)
    src = arr.numpy() if isinstance(arr, NDArray) else arr
    host = np.array(src, copy=True, order="C")
    if dev.kind == "cuda":
        return NDArray(to_device(host, dev.index), dev)
    return NDArray(host, dev)


def empty(shape, dtype: str = "float32", device: Device | None = None, ctx: Device | None = None) -> NDArray:
    """A new uninitialised NDArray of ``shape`` (ints) and ``dtype`` on ``device`` (default cpu(0))."""
    dev = _resolve_device(device, ctx)
    shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(int(s) for s in shape)
    if dev.kind == "cuda":
        return NDArray(DeviceBuffer(shape, dtype, dev.index), dev)
    return NDArray(np.empty(shape, dtype=np.dtype(dtype), order="C"), dev)
