"""The registry of workload functions: a name -> a function returning a workload's tensors.

    @register_workload                       # or register_workload("name", fn)
    def matmul(N, M, K): ... return [A, B, C]
    dag_of_registered("matmul", [128, 128, 128])   # ComputeDAG(matmul(128, 128, 128))

TVM's ``auto_scheduler/workload_registry.py``: a TVM workload_key of a registered
function is the JSON list ``["name", args...]``, so a record of TVM names the function
and its arguments; ``measure.record`` resolves such keys here.  It lives on the DAG floor
so the record layer can read it; the search floor's ``sc.register_workload`` is this one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from scheduler_core.base.errors import InvalidWorkloadError, SchedulerCoreError
from scheduler_core.ir.expr import as_expr

from .compute_dag import ComputeDAG
from .tensor import PlaceholderOp

WORKLOAD_FUNC_REGISTRY: dict = {}


def register_workload(func: Callable | str, f: Callable | None = None, override: bool = False):
    """Register a function returning a workload's tensor list, by its name (a decorator).

    ``register_workload(fn)``, ``@register_workload`` or ``register_workload("name", fn)``.
    Raises InvalidWorkloadError when the name is taken (unless ``override``).
    """
    if isinstance(func, str):
        name = func

        def register(fn):
            if name in WORKLOAD_FUNC_REGISTRY and not override and WORKLOAD_FUNC_REGISTRY[name] is not fn:
                raise InvalidWorkloadError(f"workload {name!r} is already registered")
            WORKLOAD_FUNC_REGISTRY[name] = fn
            return fn
        return register(f) if f is not None else register
    WORKLOAD_FUNC_REGISTRY[func.__name__] = func
    return func


def _deserialize_arg(arg: Any) -> Any:
    """TVM's ``deserialize_args``: ``["TENSOR", shape, dtype]`` is a placeholder of that shape."""
    if isinstance(arg, list) and len(arg) == 3 and arg[0] == "TENSOR" and isinstance(arg[1], list):
        return PlaceholderOp("placeholder", tuple(as_expr(int(d)) for d in arg[1]), str(arg[2])).output(0)
    return arg


def dag_of_registered(name: str, args: Sequence[Any]) -> ComputeDAG:
    """The ComputeDAG of registered function ``name`` called with ``args``.

    ``args`` are JSON values as a TVM workload_key holds them (a ``["TENSOR", shape,
    dtype]`` argument becomes a placeholder).  Raises InvalidWorkloadError when ``name`` is
    not registered or the function fails on ``args``.
    """
    fn = WORKLOAD_FUNC_REGISTRY.get(name)
    if fn is None:
        raise InvalidWorkloadError(f"no registered workload named {name!r}")
    try:
        return ComputeDAG(fn(*[_deserialize_arg(a) for a in args]))
    except (SchedulerCoreError, TypeError, ValueError) as err:
        raise InvalidWorkloadError(f"registered workload {name!r} failed on args {list(args)!r}: {err}") from None


__all__ = ["WORKLOAD_FUNC_REGISTRY", "register_workload", "dag_of_registered"]
