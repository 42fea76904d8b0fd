"""A model as a graph of functions: tensor programs and library functions (seed 002).

    Graph(inputs, params, calls, outputs, functions)
        inputs / params : GraphVar (name, TensorType)       the model's arguments and weights
        calls           : Call, in execution order           one call per node
            kind "tir"     -> functions[func]: PrimFunction   a ComputeDAG (+ an optional State)
            kind "library" -> a registered Python callable    e.g. "env.relu" (numpy or torch)
        outputs         : names of the values returned

This is the relax ``main`` function of seed 002 (``R.call_tir`` of a ``T.prim_func`` or of
a registered ``"env.*"`` function) as plain data.  Every value is a tensor with a concrete
shape and dtype; every call writes fresh output tensors (destination passing, as
``call_tir``).  A Graph is immutable: :meth:`Graph.with_function` and
:meth:`Graph.bind_params` return new graphs.

Weights are not part of the graph's JSON (:meth:`Graph.to_json`): the service tunes a model
from its structure and the DAG of every function, and a user binds the weights when building.
:func:`run_reference` runs a graph with the numpy reference evaluator (the correctness
reference of the compiled model, ``build_graph``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from scheduler_core.base.errors import InvalidWorkloadError
from scheduler_core.dag.compute_dag import ComputeDAG
from scheduler_core.dag.reference import evaluate
from scheduler_core.runtime.device import cpu
from scheduler_core.runtime.ndarray import NDArray
from scheduler_core.schedule.loop_state import State

GRAPH_FORMAT_VERSION = "graph-v1"
CALL_KINDS = ("tir", "library")
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.:\-]*$")


def _check_name(name: Any, path: str) -> str:
    if not isinstance(name, str) or not _NAME.match(name):
        raise InvalidWorkloadError(f"{name!r} is not a valid name (letters, digits, '_', '.', ':', '-')", path)
    return name


@dataclass(frozen=True)
class TensorType:
    """The type of one value: ``shape`` (tuple of int >= 0) and ``dtype`` (e.g. ``"float32"``)."""

    shape: tuple
    dtype: str = "float32"

    def __post_init__(self):
        shape = tuple(self.shape)
        if not all(isinstance(d, (int, np.integer)) and not isinstance(d, bool) and d >= 0 for d in shape):
            raise InvalidWorkloadError(f"shape {self.shape!r} must be a tuple of non-negative ints")
        try:
            np.dtype(self.dtype)
        except TypeError as e:
            raise InvalidWorkloadError(f"unknown dtype {self.dtype!r}") from e
        object.__setattr__(self, "shape", tuple(int(d) for d in shape))

    def to_json(self) -> dict:
        return {"shape": list(self.shape), "dtype": self.dtype}

    @classmethod
    def from_json(cls, obj: Any, path: str) -> TensorType:
        if not isinstance(obj, dict) or "shape" not in obj:
            raise InvalidWorkloadError("expected an object with 'shape' and 'dtype'", path)
        if not isinstance(obj["shape"], list):
            raise InvalidWorkloadError("must be a list of ints", f"{path}.shape")
        try:
            return cls(tuple(obj["shape"]), obj.get("dtype", "float32"))
        except InvalidWorkloadError as e:
            raise InvalidWorkloadError(str(e), path) from None


@dataclass(frozen=True)
class GraphVar:
    """A named value of the graph: a model input, a weight (param) or a call's output."""

    name: str
    type: TensorType

    def to_json(self) -> dict:
        return {"name": self.name, **self.type.to_json()}

    @classmethod
    def from_json(cls, obj: Any, path: str) -> GraphVar:
        if not isinstance(obj, dict):
            raise InvalidWorkloadError("expected an object with 'name', 'shape', 'dtype'", path)
        return cls(_check_name(obj.get("name"), f"{path}.name"), TensorType.from_json(obj, path))


@dataclass(frozen=True)
class PrimFunction:
    """A tensor program of the graph (a ``T.prim_func``): its ComputeDAG and an optional schedule.

    dag : ComputeDAG; its placeholders (in ``dag.tensors`` order) are the call's arguments,
        its computed tensors the call's outputs
    state : State or None, a schedule chosen by hand or by tuning (None: the build picks one:
        the best record under ``ApplyHistoryBest``, else a default schedule)
    name : the function's name in the graph (its ``global_symbol``)
    attrs : plain JSON-able attributes (e.g. ``{"tir.noalias": True}``), kept, not interpreted
    """

    name: str
    dag: ComputeDAG
    state: State | None = None
    attrs: Mapping = field(default_factory=dict)

    @property
    def workload_key(self) -> str:
        """The key of this function's records (the DAG's hash: identical functions share it)."""
        return self.dag.workload_key

    @property
    def arg_types(self) -> tuple:
        return tuple(_tensor_type(t) for t in self.dag.inputs)

    @property
    def out_types(self) -> tuple:
        return tuple(_tensor_type(t) for t in self.dag.outputs)

    def with_attr(self, key: str, value: Any) -> PrimFunction:
        """A copy with one attribute set; ``"global_symbol"`` renames the function (TVM's ``with_attr``)."""
        if key == "global_symbol":
            return replace(self, name=_check_name(value, "global_symbol"))
        return replace(self, attrs={**self.attrs, key: value})

    def with_state(self, state: State | None) -> PrimFunction:
        """A copy scheduled by ``state`` (a State of this function's DAG; None drops the schedule)."""
        return replace(self, state=state)


def _tensor_type(t) -> TensorType:
    try:
        shape = tuple(int(d) if isinstance(d, (int, np.integer)) else int(d.value) for d in t.shape)
    except (AttributeError, TypeError, ValueError) as e:
        raise InvalidWorkloadError(f"tensor {t.name!r} of a graph function needs a concrete shape") from e
    return TensorType(shape, t.dtype)


@dataclass(frozen=True)
class Call:
    """One node: ``outputs = func(*args)``.

    kind : "tir" (``func`` names a PrimFunction of the graph) or "library" (``func`` names a
        function registered with :func:`register_func`, called as ``f(*args, *outs)`` on
        NDArrays that it writes into, as TVM's packed functions)
    args : names of graph values (inputs, params or earlier outputs)
    outputs : GraphVar per output (the value names this call defines)
    """

    kind: str
    func: str
    args: tuple
    outputs: tuple

    def to_json(self) -> dict:
        return {"kind": self.kind, "func": self.func, "args": list(self.args),
                "outputs": [o.to_json() for o in self.outputs]}


@dataclass(frozen=True)
class Graph:
    """A model: typed inputs and weights, calls in execution order, the returned values.

    Raises InvalidWorkloadError (naming the offending field) when a call uses an undefined
    value or function, when argument shapes or dtypes do not match the callee's, or when a
    name is defined twice.
    """

    inputs: tuple
    params: tuple = ()
    calls: tuple = ()
    outputs: tuple = ()
    functions: Mapping = field(default_factory=dict)
    bound: Mapping = field(default_factory=dict, compare=False)

    def __post_init__(self):
        for name in ("inputs", "params", "calls", "outputs"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        object.__setattr__(self, "functions", dict(self.functions))
        self.validate()

    # -- structure -------------------------------------------------------------
    def validate(self) -> None:
        """Check names, the def-before-use order and the argument types of every tir call."""
        types: dict = {}
        for where, vs in (("inputs", self.inputs), ("params", self.params)):
            for i, v in enumerate(vs):
                self._define(types, v, f"{where}[{i}]")
        for k, f in self.functions.items():
            if f.name != k:
                raise InvalidWorkloadError(f"function stored as {k!r} is named {f.name!r}", f"functions.{k}")
        for i, c in enumerate(self.calls):
            path = f"calls[{i}]"
            if c.kind not in CALL_KINDS:
                raise InvalidWorkloadError(f"kind must be one of {CALL_KINDS}, got {c.kind!r}", f"{path}.kind")
            for j, a in enumerate(c.args):
                if not isinstance(a, str):
                    raise InvalidWorkloadError(f"must be a value name (a string), not {type(a).__name__}",
                                               f"{path}.args[{j}]")
                if a not in types:
                    raise InvalidWorkloadError(f"value {a!r} is used before it is defined", f"{path}.args[{j}]")
            if c.kind == "tir":
                self._check_tir_call(c, types, path)
            for j, o in enumerate(c.outputs):
                self._define(types, o, f"{path}.outputs[{j}]")
        for j, o in enumerate(self.outputs):
            if not isinstance(o, str):
                raise InvalidWorkloadError(f"must be a value name (a string), not {type(o).__name__}", f"outputs[{j}]")
            if o not in types:
                raise InvalidWorkloadError(f"output {o!r} is not a value of the graph", f"outputs[{j}]")
        for name, arr in self.bound.items():
            self._check_array(types.get(name), name, arr, f"bound.{name}")

    @staticmethod
    def _define(types: dict, v: GraphVar, path: str) -> None:
        _check_name(v.name, f"{path}.name")
        if v.name in types:
            raise InvalidWorkloadError(f"value {v.name!r} is defined twice", path)
        types[v.name] = v.type

    def _check_tir_call(self, c: Call, types: dict, path: str) -> None:
        f = self.functions.get(c.func)
        if f is None:
            raise InvalidWorkloadError(f"no function named {c.func!r} in the graph", f"{path}.func")
        want_in, want_out = f.arg_types, f.out_types
        got_in = tuple(types[a] for a in c.args)
        if got_in != want_in:
            raise InvalidWorkloadError(
                f"{c.func} takes {[(t.shape, t.dtype) for t in want_in]}, got {[(t.shape, t.dtype) for t in got_in]}",
                f"{path}.args")
        got_out = tuple(o.type for o in c.outputs)
        if got_out != want_out:
            raise InvalidWorkloadError(
                f"{c.func} returns {[(t.shape, t.dtype) for t in want_out]}, "
                f"the call declares {[(t.shape, t.dtype) for t in got_out]}", f"{path}.outputs")

    @staticmethod
    def _check_array(t: TensorType | None, name: str, arr: Any, path: str) -> None:
        if t is None:
            raise InvalidWorkloadError(f"{name!r} is not an input or param of the graph", path)
        a = np.asarray(arr)
        if a.shape != t.shape or str(a.dtype) != t.dtype:
            raise InvalidWorkloadError(f"{name}: expected {t.shape} {t.dtype}, got {a.shape} {a.dtype}", path)

    def value_types(self) -> dict:
        """``{value name: TensorType}`` for inputs, params and every call output."""
        out = {v.name: v.type for v in (*self.inputs, *self.params)}
        out.update({o.name: o.type for c in self.calls for o in c.outputs})
        return out

    @property
    def free_params(self) -> tuple:
        """The params that :meth:`bind_params` has not bound yet: runtime arguments after the inputs."""
        return tuple(p for p in self.params if p.name not in self.bound)

    def tir_calls(self) -> list:
        """``[(index, Call, PrimFunction)]`` for every call of a tensor program."""
        return [(i, c, self.functions[c.func]) for i, c in enumerate(self.calls) if c.kind == "tir"]

    # -- edits (new graphs) ------------------------------------------------------
    def with_function(self, func: PrimFunction, name: str | None = None) -> Graph:
        """A graph where the function ``name`` (default ``func.name``) is replaced by ``func``
        (renamed to ``name``); its calls must still type-check.  Raises InvalidWorkloadError
        for an unknown name."""
        name = name or func.name
        if name not in self.functions:
            raise InvalidWorkloadError(f"no function named {name!r} in the graph (have {sorted(self.functions)})")
        return replace(self, functions={**self.functions, name: replace(func, name=name)})

    def bind_params(self, values: Mapping[str, Any]) -> Graph:
        """A graph with the weights in ``values`` (``{param name: array}``) bound, as relax's
        ``BindParams``; bound params are no longer runtime arguments.  Arrays are copied;
        NDArrays are read with ``.numpy()``.  Raises InvalidWorkloadError for an unknown
        name or a shape/dtype that differs from the param's."""
        bound = dict(self.bound)
        params = {p.name for p in self.params}
        for name, arr in values.items():
            if name not in params:
                raise InvalidWorkloadError(f"{name!r} is not a param of the graph (params: {sorted(params)})",
                                           f"params.{name}")
            a = arr.numpy() if hasattr(arr, "numpy") and not isinstance(arr, np.ndarray) else arr
            bound[name] = np.ascontiguousarray(np.array(a, copy=True))
        return replace(self, bound=bound)

    # -- wire format ------------------------------------------------------------
    def to_json(self) -> dict:
        """The graph as JSON-able data (bound weights are left out; the DAG of every function
        is in the DAG wire format of ``ComputeDAG.to_json``)."""
        return {
            "version": GRAPH_FORMAT_VERSION,
            "inputs": [v.to_json() for v in self.inputs],
            "params": [v.to_json() for v in self.params],
            "calls": [c.to_json() for c in self.calls],
            "outputs": list(self.outputs),
            "functions": {k: {"dag": json.loads(f.dag.to_json()), "attrs": dict(f.attrs)}
                          for k, f in self.functions.items()},
        }

    @classmethod
    def from_json(cls, obj: Any, **dag_limits) -> Graph:
        """Parse :meth:`to_json`'s output (a dict or its JSON text).

        Raises InvalidWorkloadError naming the field (e.g. ``calls[2].args[0]``,
        ``functions.linear0.dag.ops[1]``) for anything malformed.
        """
        if isinstance(obj, (str, bytes)):
            try:
                obj = json.loads(obj)
            except json.JSONDecodeError as e:
                raise InvalidWorkloadError(f"not JSON: {e}") from None
        if not isinstance(obj, dict):
            raise InvalidWorkloadError("a graph is a JSON object")
        if obj.get("version", GRAPH_FORMAT_VERSION) != GRAPH_FORMAT_VERSION:
            raise InvalidWorkloadError(f"unknown graph version {obj.get('version')!r} "
                                       f"(this build reads {GRAPH_FORMAT_VERSION})", "version")
        for key in ("inputs", "calls", "outputs"):
            if not isinstance(obj.get(key), list):
                raise InvalidWorkloadError("missing or not a list", key)
        if not isinstance(obj.get("params", []), list):
            raise InvalidWorkloadError("not a list", "params")
        functions = {}
        fobj = obj.get("functions", {})
        if not isinstance(fobj, dict):
            raise InvalidWorkloadError("must be an object {name: {dag: ...}}", "functions")
        for name, f in fobj.items():
            path = f"functions.{name}"
            _check_name(name, path)
            if not isinstance(f, dict) or "dag" not in f:
                raise InvalidWorkloadError("expected an object with 'dag'", path)
            try:
                dag = ComputeDAG.from_json(json.dumps(f["dag"]), require_concrete_shapes=True, **dag_limits)
            except InvalidWorkloadError as e:
                raise InvalidWorkloadError(str(e), f"{path}.dag") from None
            attrs = f.get("attrs", {})
            if not isinstance(attrs, dict):
                raise InvalidWorkloadError("must be an object", f"{path}.attrs")
            functions[name] = PrimFunction(name, dag, None, attrs)
        calls = []
        for i, c in enumerate(obj["calls"]):
            path = f"calls[{i}]"
            if not isinstance(c, dict):
                raise InvalidWorkloadError("expected an object with kind, func, args, outputs", path)
            for key, typ in (("func", str), ("args", list), ("outputs", list)):
                if not isinstance(c.get(key), typ):
                    raise InvalidWorkloadError(f"missing or not a {typ.__name__}", f"{path}.{key}")
            outs = tuple(GraphVar.from_json(o, f"{path}.outputs[{j}]") for j, o in enumerate(c["outputs"]))
            calls.append(Call(c.get("kind", "tir"), c["func"], tuple(c["args"]), outs))
        ins = tuple(GraphVar.from_json(v, f"inputs[{i}]") for i, v in enumerate(obj["inputs"]))
        params = tuple(GraphVar.from_json(v, f"params[{i}]") for i, v in enumerate(obj.get("params", [])))
        return cls(ins, params, tuple(calls), tuple(obj["outputs"]), functions)

    def __str__(self) -> str:
        """A relax-like listing: one line per call."""
        def sig(vs):
            return ", ".join(f"{v.name}: {list(v.type.shape)} {v.type.dtype}" for v in vs)
        lines = [f"def main({sig(self.inputs)}" + (f"; params {sig(self.params)}" if self.params else "") + "):"]
        for c in self.calls:
            outs = ", ".join(o.name for o in c.outputs)
            callee = c.func if c.kind == "tir" else repr(c.func)
            lines.append(f"    {outs} = call_{c.kind}({callee}, ({', '.join(c.args)}))  # "
                         + ", ".join(f"{list(o.type.shape)} {o.type.dtype}" for o in c.outputs))
        lines.append(f"    return {', '.join(self.outputs)}")
        return "\n".join(lines)


# -- library functions (TVM's register_func) --------------------------------------
LIBRARY_FUNCS: dict[str, Callable] = {}


def register_func(name: str, f: Callable | None = None, override: bool = False):
    """Register ``f`` as the library function ``name`` (TVM's ``tvm.register_func``); usable as a
    decorator.  A library call ``outs = call(name, args)`` runs ``f(*args, *outs)`` on NDArrays
    (``.numpy()`` views of the graph's arrays; ``torch.from_dlpack`` works on them) and ``f``
    writes the outputs in place.  Raises ValueError when ``name`` is taken and not ``override``.
    """
    def do(fn: Callable) -> Callable:
        _check_name(name, "name")
        if name in LIBRARY_FUNCS and not override:
            raise ValueError(f"library function {name!r} is already registered (pass override=True)")
        LIBRARY_FUNCS[name] = fn
        return fn
    return do if f is None else do(f)


def get_func(name: str) -> Callable:
    """The registered library function ``name``; InvalidWorkloadError if none is registered."""
    fn = LIBRARY_FUNCS.get(name)
    if fn is None:
        raise InvalidWorkloadError(f"no library function registered as {name!r} "
                                   f"(registered: {sorted(LIBRARY_FUNCS)})")
    return fn


def bind_inputs(graph: Graph, args: Sequence[Any]) -> dict:
    """``{name: contiguous numpy array}`` for the runtime arguments (inputs, then unbound params)
    and the bound weights.  Raises InvalidWorkloadError for a wrong count, shape or dtype."""
    wanted = (*graph.inputs, *graph.free_params)
    if len(args) != len(wanted):
        raise InvalidWorkloadError(f"the model takes {len(wanted)} arguments "
                                   f"({', '.join(v.name for v in wanted)}), got {len(args)}")
    values = {k: v for k, v in graph.bound.items()}
    for v, a in zip(wanted, args):
        arr = a.numpy() if hasattr(a, "numpy") and not isinstance(a, np.ndarray) else a
        arr = np.ascontiguousarray(arr)
        Graph._check_array(v.type, v.name, arr, v.name)
        values[v.name] = arr
    return values


def as_ndarray(a: np.ndarray) -> NDArray:
    """An NDArray on the CPU that shares ``a``'s memory (what a library function receives)."""
    return NDArray(np.ascontiguousarray(a), cpu(0))


def run_reference(graph: Graph, *args, wrap: Callable | None = None) -> list:
    """Run ``graph`` on numpy arrays with the reference evaluator (no compilation).

    args : the inputs, then the unbound params, as numpy arrays (or NDArrays)
    wrap : how a library function sees an array (default: an NDArray sharing the array's
        memory, as the compiled executor passes them)
    Returns the graph's outputs as a list of numpy arrays.  Raises InvalidWorkloadError
    for bad arguments or a missing library function.
    """
    values = bind_inputs(graph, args)
    for c in graph.calls:
        ins = [values[a] for a in c.args]
        if c.kind == "tir":
            outs = evaluate(graph.functions[c.func].dag, ins)
        else:
            outs = [np.zeros(o.type.shape, o.type.dtype) for o in c.outputs]
            w = wrap or as_ndarray
            get_func(c.func)(*[w(a) for a in ins], *[w(o) for o in outs])
        for o, arr in zip(c.outputs, outs):
            values[o.name] = arr
    return [values[o] for o in graph.outputs]
