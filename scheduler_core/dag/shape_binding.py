"""Inputs and symbolic shapes of the reference evaluator (see :mod:`.reference`).

Holds :func:`resolve_bindings` and its helpers: the checks of the input arrays
(count, dtype, rank, then shape once bound), the symbolic shape variables of a
DAG, and their values, from ``bindings`` or read off the inputs' dimensions.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from scheduler_core.base.errors import InvalidWorkloadError
from scheduler_core.ir.expr import Expr, IntImm, Var
from scheduler_core.ir.expr_functor import free_vars, substitute
from scheduler_core.ir.simplify import const_value, simplify

from .compute_dag import ComputeDAG
from .tensor import ComputeOp, PlaceholderOp, ScanOp

__all__ = ["resolve_bindings", "as_dag", "input_arrays", "bind_shapes"]


def as_dag(dag: Any) -> ComputeDAG:
    if isinstance(dag, ComputeDAG):
        return dag
    if isinstance(dag, (list, tuple)):
        return ComputeDAG(dag)
    raise InvalidWorkloadError(f"expected a ComputeDAG or a list of tensors, got {type(dag).__name__}")


def _from_mapping(params: tuple, inputs: Mapping) -> list:
    """The arrays of ``params`` from ``{Tensor or name: array}``; unknown keys raise."""
    keys = [t if t in inputs else t.name for t in params]
    for t, key in zip(params, keys):
        if key not in inputs:
            raise InvalidWorkloadError(f"no array given for input {t.name}")
    extra = [str(getattr(k, "name", k)) for k in inputs if k not in set(keys)]
    if extra:
        raise InvalidWorkloadError(f"arrays given for {extra}, which are not inputs of the DAG "
                                   f"(inputs: {[t.name for t in params]})")
    return [inputs[k] for k in keys]


def input_arrays(dag: ComputeDAG, inputs: Any) -> list:
    """The arrays of ``dag.inputs`` in order, checked for count, dtype and rank."""
    params = dag.inputs
    arrays = _from_mapping(params, inputs) if isinstance(inputs, Mapping) else list(inputs)
    if len(arrays) != len(params):
        raise InvalidWorkloadError(f"the DAG has {len(params)} inputs {[t.name for t in params]}, "
                                   f"{len(arrays)} arrays given")
    out = [np.asarray(a) for a in arrays]
    for t, arr in zip(params, out):
        if arr.dtype != np.dtype(t.dtype):
            raise InvalidWorkloadError(f"input {t.name} has dtype {arr.dtype}, expected {t.dtype}")
        if arr.ndim != len(t.shape):
            raise InvalidWorkloadError(f"input {t.name} has {arr.ndim} dimensions {arr.shape}, "
                                       f"expected {len(t.shape)}")
    return out


def _free_vars(dag: ComputeDAG) -> list:
    """The symbolic variables of ``dag``: those in shapes and bodies not bound by an axis."""
    exprs: list = [s for t in dag.inputs for s in t.shape]
    bound: set = set()
    for op in dag.ops:
        if isinstance(op, PlaceholderOp):
            exprs.extend(op.shape)
        elif isinstance(op, ComputeOp):
            axes = list(op.axis) + list(op.reduce_axis)
            bound.update(id(iv.var) for iv in axes)
            exprs.extend(x for iv in axes for x in (iv.dom_min, iv.dom_extent))
            exprs.extend(op.bodies)
        elif isinstance(op, ScanOp):
            bound.add(id(op.scan_axis.var))
            exprs.extend((op.scan_axis.dom_min, op.scan_axis.dom_extent))
    found = {id(v): v for e in exprs if isinstance(e, Expr) for v in free_vars(e)
             if id(v) not in bound}
    return sorted(found.values(), key=lambda v: v.name)


def _as_size(value: Any, name: str) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise InvalidWorkloadError(f"binding of {name} is {value!r}, not an integer")
    if value < 0:
        raise InvalidWorkloadError(f"binding of {name} is negative ({value})")
    return int(value)


def resolve_bindings(dag: Any, inputs: Any, bindings: Mapping | None = None) -> dict:
    """The value of every symbolic variable of ``dag``, as ``{Var: int}``.

    Parameters
    ----------
    dag : ComputeDAG (or its list of tensors)
    inputs : list of numpy arrays in ``dag.inputs`` order, or ``{Tensor or name: array}``
    bindings : ``{Var or var name: int}``, optional
        A name binds every variable of that name; names the DAG does not use are
        ignored.  Variables not bound here are inferred from input dimensions that
        are a bare variable (an input of shape ``(m, n)`` binds ``m`` and ``n``).

    Raises
    ------
    InvalidWorkloadError
        An input of the wrong dtype or rank; a variable with two different values
        (from ``bindings`` and an input, or two inputs); a variable with no value;
        an input whose shape differs from its evaluated declared shape.
    """
    dag = as_dag(dag)
    arrays = input_arrays(dag, inputs)
    return bind_shapes(dag, arrays, bindings)


def bind_shapes(dag: ComputeDAG, arrays: list, bindings: Mapping | None) -> dict:
    free = _free_vars(dag)
    values: dict = {}
    source: dict = {}
    for key, val in (bindings or {}).items():
        name = key.name if isinstance(key, Var) else str(key)
        for v in ([key] if isinstance(key, Var) else [v for v in free if v.name == key]):
            values[v], source[v] = _as_size(val, name), "bindings"
    for t, arr in zip(dag.inputs, arrays):
        for d, (e, n) in enumerate(zip(t.shape, arr.shape)):
            if not isinstance(e, Var):
                continue
            here = f"dimension {d} of input {t.name}"
            if e in values and values[e] != n:
                raise InvalidWorkloadError(
                    f"conflicting values for {e.name}: {values[e]} from {source[e]}, {n} from {here}"
                )
            values[e], source[e] = n, here
    missing = [v.name for v in free if v not in values]
    if missing:
        raise InvalidWorkloadError(
            f"no value for symbolic variable(s) {', '.join(missing)}: they are not a dimension "
            f"of any input; pass bindings={{{', '.join(repr(m) + ': ...' for m in missing)}}}"
        )
    for t, arr in zip(dag.inputs, arrays):
        expected = _shape_of(t, values)
        if expected != arr.shape:
            raise InvalidWorkloadError(f"input {t.name} has shape {arr.shape}, expected {expected}")
    return values


def _shape_of(t, values: dict) -> tuple:
    """The shape of tensor ``t`` with its symbolic variables given by ``values`` (Var -> int).

    Raises InvalidWorkloadError when a dimension does not fold to a non-negative integer.
    """
    ints = {v: IntImm(n, v.dtype) for v, n in values.items()}
    dims = []
    for d, e in enumerate(t.shape):
        value = const_value(simplify(substitute(e, ints)))
        if not isinstance(value, int) or value < 0:
            raise InvalidWorkloadError(f"dimension {d} of {t.name} ({e}) is not a non-negative integer")
        dims.append(value)
    return tuple(dims)
