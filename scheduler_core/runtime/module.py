"""A callable compiled function: TVM's ``runtime.Module`` for one CPU entry point.

    CompiledFunction (codegen: JIT address + IR + object) --Module.from_compiled--> Module
    .so / .o / .ll file --load_module--> Module
    Module(*arrays) --Signature.bind--> ctypes call --> 0 or DeviceRuntimeError

The Module checks every argument (dtype, rank, shape, C-contiguity, device;
symbolic sizes bound from the shapes) and calls the entry through one ctypes
prototype built at construction.  ``time_evaluator`` checks the arguments once
and then calls the raw function in a tight loop (see ``timer``).

Only attributes of the codegen's ``CompiledFunction`` are used (``name``,
``func``, ``llvm_ir``, ``object_code``, ``address``, ``engine``, ``get_asm``,
optional ``target``/``warnings``), so this module never imports codegen.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable

from scheduler_core.base.errors import (
    BuildError,
    DeviceRuntimeError,
    RuntimeArgumentError,
    check_return_code,
)

from . import export as _export
from .device import Device, device
from .signature import Signature
from .timer import CacheFlusher, ProfileResult, check_timing_args, time_calls

SOURCE_FORMATS = ("", "ll", "llvm", "asm", "s")


class Module:
    """One compiled entry function, callable on NDArrays or numpy arrays.

    signature: the entry's ``Signature``; address: where the machine code
    starts; keepalive: whatever owns that code (JIT engine, ``ctypes.CDLL``).
    llvm_ir / asm / object_code: the artifacts this module can save, as values or
    zero-argument callables computing them on first use (``None`` if absent).
    """

    def __init__(self, signature: Signature, address: int, *, keepalive=None, llvm_ir=None,
                 asm=None, object_code=None, target=None, warnings=()):
        if not address:
            raise BuildError(f"entry function {signature.name!r} has a null address")
        self.signature = signature
        self.target = target
        self.warnings = list(warnings)
        self.imported_modules: list = []  # device modules (CUDA) would go here
        self.type_key = "llvm"
        self._keepalive = keepalive
        self._artifacts = {"ll": llvm_ir, "asm": asm, "o": object_code}
        arg_types = [ctypes.c_void_p] * len(signature.params) + [ctypes.c_int32] * len(signature.scalar_params)
        self._cfunc = ctypes.CFUNCTYPE(ctypes.c_int32, *arg_types)(address)  # releases the GIL while running

    @classmethod
    def from_compiled(cls, cf) -> Module:
        """Wrap a codegen ``CompiledFunction`` (JIT-compiled; the engine is kept alive)."""
        return cls(
            Signature.from_primfunc(cf.func, cf.name), cf.address, keepalive=cf,
            llvm_ir=cf.llvm_ir or None, asm=cf.get_asm, object_code=cf.object_code or None,
            target=getattr(cf, "target", None), warnings=getattr(cf, "warnings", ()),
        )

    # -- queries ------------------------------------------------------------
    @property
    def entry_name(self) -> str:
        """The C symbol of the entry function (TVM's ``func.entry_name``)."""
        return self.signature.name

    def get_source(self, fmt: str = "") -> str:
        """The module's code as text: ``"ll"``/``""`` LLVM IR, ``"asm"``/``"s"`` assembly.

        Raises ``BuildError`` when this module has no such text (e.g. loaded from a
        ``.so``), ``ValueError`` for an unknown ``fmt``.
        """
        if fmt not in SOURCE_FORMATS:
            raise ValueError(f"unknown source format {fmt!r}; expected one of {SOURCE_FORMATS}")
        return self._artifact("asm" if fmt in ("asm", "s") else "ll")

    def object_code(self) -> bytes:
        """The ELF relocatable object holding the entry (what ``save("x.o")`` writes)."""
        return self._artifact("o")

    def get_function(self, name: str) -> Callable:
        """The entry as a callable (TVM's ``mod[name]``); ``name`` must be ``entry_name``."""
        self._check_name(name)
        return self.__call__

    __getitem__ = get_function

    # -- running ------------------------------------------------------------
    def __call__(self, *args) -> None:
        """Run the entry on ``args``: one NDArray/numpy array per buffer, in parameter order.

        Symbolic sizes are taken from the shapes (or may follow the arrays as ints).
        Outputs are written in place.  Raises ``RuntimeArgumentError`` naming a bad
        argument, ``DeviceRuntimeError`` when the function returns nonzero.
        """
        pointers, sizes = self.signature.bind(args)
        check_return_code(self.entry_name, self._cfunc(*pointers, *sizes))

    def prebind(self, *args) -> Callable[[], None]:
        """A zero-argument callable that runs the entry on ``args``, checked once, here.

        For executors that call one function many times on the same buffers (a model's
        graph executor): the checks and the pointer conversion of :meth:`__call__` (about
        10-20 us a call) are paid once.  The arrays must stay alive and keep their memory
        (write into them, never rebind or resize them); the callable holds references to
        them.  Raises ``RuntimeArgumentError`` here for bad arguments, and the callable
        raises ``DeviceRuntimeError`` when the function returns nonzero.
        """
        pointers, sizes = self.signature.bind(args)
        cargs = (*[ctypes.c_void_p(p) for p in pointers], *[ctypes.c_int32(n) for n in sizes])
        cfunc, name = self._cfunc, self.entry_name

        def call(cargs=cargs, keep=args) -> None:
            code = cfunc(*cargs)
            if code != 0:
                check_return_code(name, code)
        return call

    def time_evaluator(self, func_name: str, dev: Device | str, number: int = 10, repeat: int = 1,
                       min_repeat_ms: float = 0, enable_cpu_cache_flush: bool = False) -> Callable:
        """TVM's ``time_evaluator``: a callable ``f(*args) -> ProfileResult`` (seconds).

        number: calls per measurement; repeat: measurements; min_repeat_ms:
        milliseconds a measurement must at least last (``number`` grows until it
        does); enable_cpu_cache_flush: write a 64 MB scratch array before each
        measurement.  ``results`` holds the per-measurement mean seconds per call.
        Raises ``RuntimeArgumentError`` for an unknown ``func_name``,
        ``DeviceRuntimeError`` for a device that cannot run this CPU code,
        ``ValueError`` for number/repeat < 1 or min_repeat_ms < 0.
        """
        self._check_name(func_name)
        check_timing_args(number, repeat, min_repeat_ms)
        dev = device(dev)  # also accepts "cpu", "llvm ..." or a Target
        dev.check_usable()
        if dev.kind != "cpu":
            raise DeviceRuntimeError(f"{self.entry_name} is CPU code and cannot be timed on {dev}")
        flush = CacheFlusher() if enable_cpu_cache_flush else None

        def evaluator(*args) -> ProfileResult:
            pointers, sizes = self.signature.bind(args)
            return time_calls(self._cfunc, (*pointers, *sizes), number, repeat, min_repeat_ms, flush)

        return evaluator

    # -- export -------------------------------------------------------------
    def save(self, path, fmt: str = "") -> None:
        """Write an object file (.o), LLVM IR (.ll), assembly (.s) or bitcode (.bc), by extension."""
        _export.save_module(self, path, fmt)

    def export_library(self, path):
        """Write a shared library ``path`` (.so, C ABI) and its header next to it; returns the header path."""
        return _export.export_library(self, path)

    def __repr__(self) -> str:
        return f"Module({self.signature.c_prototype()})"

    # -- internals ----------------------------------------------------------
    def _artifact(self, kind: str):
        value = self._artifacts[kind]
        if callable(value):
            value = self._artifacts[kind] = value()
        if not value:
            what = {"ll": "LLVM IR", "asm": "assembly", "o": "object code"}[kind]
            raise BuildError(f"module {self.entry_name} has no {what} (it was loaded without it)")
        return value

    def _check_name(self, name: str) -> None:
        if name != self.entry_name:
            raise RuntimeArgumentError(f"this module has no function {name!r}; its entry is {self.entry_name!r}")
