"""Seed 002's relax names: ``relax.transform.BindParams``, ``relax.vm.build``, ``relax.VirtualMachine``.

    from scheduler_core.graph import relax
    mod = relax.transform.BindParams("main", nd_params)(MyModuleMixture)
    ex = relax.vm.build(mod, target="llvm")            # (relax.build is the same)
    vm = relax.VirtualMachine(ex, sc.cpu())
    nd_res = vm["main"](data_nd)                      # an NDArray (a tuple for several outputs)
    vm.module.time_evaluator("main", sc.cpu(), number=100)(data_nd).mean   # seconds

The executable is a :class:`~scheduler_core.graph.build.GraphModule` of the module's ``main``
graph (``build_graph``: each prim_func with its own schedule, a record under
``ApplyHistoryBest``, or the default schedule).
"""

from __future__ import annotations

import types
from collections.abc import Callable, Mapping
from typing import Any

from scheduler_core.base.errors import DeviceRuntimeError, InvalidWorkloadError, RuntimeArgumentError
from scheduler_core.runtime.device import device as as_device
from scheduler_core.runtime.ndarray import NDArray
from scheduler_core.runtime.ndarray import array as nd_array

from .build import GraphModule, build_graph
from .script import IRModule, RelaxFunction


def _check_module(mod: Any, what: str) -> IRModule:
    if not isinstance(mod, IRModule):
        raise InvalidWorkloadError(f"{what} takes an IRModule (from @ir_module or IRModule.from_expr), "
                                   f"not {type(mod).__name__}")
    return mod


def BindParams(func_name: str, params: Mapping[str, Any]) -> Callable[[IRModule], IRModule]:  # noqa: N802
    """relax's ``BindParams`` pass: ``BindParams("main", {"w0": nd, ...})(mod)`` returns a new
    module whose ``main`` has those params bound (no longer run-time arguments).  Values are
    NDArrays or numpy arrays (copied).  Raises InvalidWorkloadError for an unknown function,
    a name that is not a param, or a shape/dtype mismatch."""
    def transform(mod: IRModule) -> IRModule:
        mod = _check_module(mod, "BindParams")
        f = mod[func_name]
        if not isinstance(f, RelaxFunction):
            raise InvalidWorkloadError(f"BindParams: {func_name!r} is a prim_func, not a relax function")
        out = mod.copy()
        out[func_name] = f.with_graph(f.graph.bind_params(params))
        return out
    return transform


transform = types.SimpleNamespace(BindParams=BindParams)


class Executable:
    """``relax.vm.build``'s result: the compiled ``main`` (``.lib``, a GraphModule)."""

    def __init__(self, lib: GraphModule, func_name: str = "main"):
        self.lib = lib
        self.func_name = func_name

    def __repr__(self) -> str:
        return f"Executable({self.lib!r})"


def build(mod: IRModule, target: Any = "llvm", params: Mapping[str, Any] | None = None) -> Executable:
    """Compile ``mod["main"]`` and its prim_funcs for a CPU ``target`` (``relax.vm.build`` /
    ``relax.build``).  Raises InvalidWorkloadError for a module without a relax ``main``,
    BuildError for a non-CPU target (see ``build_graph``)."""
    mod = _check_module(mod, "relax.vm.build")
    return Executable(build_graph(mod.graph("main"), target, params))


vm = types.SimpleNamespace(build=build)


class VirtualMachine:
    """Runs an Executable (TVM's ``relax.VirtualMachine``): ``vm["main"](*args)`` takes the
    unbound params of ``main`` in order (NDArrays or numpy arrays) and returns an NDArray
    (a tuple of them for several outputs).  ``vm.module.time_evaluator`` times it.
    Raises DeviceRuntimeError for a device other than the CPU."""

    def __init__(self, exe: Executable, dev: Any = "cpu"):
        if not isinstance(exe, Executable):
            raise InvalidWorkloadError(f"VirtualMachine takes relax.vm.build's Executable, not {type(exe).__name__}")
        self.exe = exe
        self.device = as_device(dev)
        if self.device.kind != "cpu":
            raise DeviceRuntimeError(f"this executable runs on the CPU, not on {self.device}")
        self.module = self

    def _check(self, func_name: str) -> None:
        if func_name != self.exe.func_name:
            raise RuntimeArgumentError(f"no function {func_name!r}; the executable's entry is {self.exe.func_name!r}")

    def __getitem__(self, func_name: str) -> Callable:
        self._check(func_name)

        def run(*args):
            outs = [nd_array(o, self.device) for o in self.exe.lib.run(*args)]
            return outs[0] if len(outs) == 1 else tuple(outs)
        return run

    def time_evaluator(self, func_name: str, dev: Any = "cpu", number: int = 10, repeat: int = 1,
                       min_repeat_ms: float = 0.0) -> Callable:
        """``f(*args) -> ProfileResult`` (seconds per run of ``func_name``; TVM's time_evaluator)."""
        self._check(func_name)
        if as_device(dev).kind != "cpu":
            raise DeviceRuntimeError(f"this executable runs on the CPU, not on {dev}")
        return self.exe.lib.time_evaluator(number, repeat, min_repeat_ms)


__all__ = ["BindParams", "transform", "build", "vm", "VirtualMachine", "Executable", "NDArray"]
