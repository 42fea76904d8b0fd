"""Seed 002's TVMScript spelling, with tensor-program bodies written in ``te``.

    from scheduler_core import te
    from scheduler_core.graph.script import IRModule, R, T, Tensor, ir_module

    @ir_module
    class MyModuleMixture:
        @T.prim_func
        def linear0(X: T.Buffer[(1, 784), "float32"], W: T.Buffer[(128, 784), "float32"],
                    B: T.Buffer[(128,), "float32"], Z: T.Buffer[(1, 128), "float32"]):
            T.func_attr({"global_symbol": "linear0", "tir.noalias": True})
            k = te.reduce_axis((0, 784), name="k")
            Y = te.compute((1, 128), lambda i, j: te.sum(X[i, k] * W[j, k], axis=k), name="Y")
            return te.compute((1, 128), lambda i, j: Y[i, j] + B[j], name="Z")

        @R.function
        def main(x: Tensor((1, 784), "float32"), w0: Tensor((128, 784), "float32"), ...):
            with R.dataflow():
                lv0 = R.call_tir(linear0, (x, w0, b0), (1, 128), dtype="float32")
                out = R.call_tir("env.relu", (lv0,), (1, 128), dtype="float32")
                R.output(out)
            return out

``@T.prim_func`` calls the body once with a ``te.placeholder`` per parameter (named after
it); the body returns its output tensor(s), and the last N parameters, N the number of
returned tensors, are the outputs (TVM's destination-passing signature): their annotations
must match the returned shapes and dtypes.  The result is a
:class:`~scheduler_core.graph.ir.PrimFunction`.  ``@R.function`` records the calls of its
body (``R.call_tir`` of a prim_func, or of a registered library function's name) into a
:class:`~scheduler_core.graph.ir.Graph`; inside ``@ir_module`` the body sees the class's
functions by name.  Every ``main`` parameter is a param of the graph (a weight) until
``relax.transform.BindParams`` binds it; the unbound ones are the run-time arguments.
"""

from __future__ import annotations

import inspect
import sys
import types
from collections.abc import Callable, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from scheduler_core.base.errors import InvalidWorkloadError
from scheduler_core.dag.compute_dag import ComputeDAG
from scheduler_core.dag.tensor import PlaceholderOp, post_order_ops
from scheduler_core.dag.tensor import Tensor as TeTensor
from scheduler_core.te import placeholder

from .ir import Call, Graph, GraphVar, PrimFunction, TensorType

_ATTRS: list = []   # attribute dicts of the prim_func bodies being traced (innermost last)
_TRACES: list = []  # _Trace of the R.function bodies being traced


class _BufferSpec:
    """``T.Buffer[(1, 784), "float32"]`` or ``T.Buffer((1, 784), "float32")``: a TensorType."""

    def __getitem__(self, item) -> TensorType:
        if not isinstance(item, tuple) or len(item) not in (1, 2) or not isinstance(item[0], (tuple, list, int)):
            raise InvalidWorkloadError(f"T.Buffer[shape, dtype] expected, got T.Buffer[{item!r}]")
        return self(*item)

    def __call__(self, shape, dtype: str = "float32") -> TensorType:
        shape = (shape,) if isinstance(shape, int) else tuple(shape)
        return TensorType(shape, dtype)


def Tensor(shape, dtype: str = "float32") -> TensorType:  # noqa: N802 -- relax's spelling
    """A relax parameter annotation ``Tensor((1, 784), "float32")``: a TensorType."""
    return TensorType((shape,) if isinstance(shape, int) else tuple(shape), dtype)


def _param_types(fn: Callable, what: str) -> list:
    try:
        sig = inspect.signature(fn, eval_str=True)
    except NameError as e:
        raise InvalidWorkloadError(f"{what} {fn.__name__}: an annotation does not evaluate: {e}") from None
    out = []
    for p in sig.parameters.values():
        if p.kind not in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            raise InvalidWorkloadError(f"{what} {fn.__name__}: parameter {p.name!r} must be a plain positional one")
        if not isinstance(p.annotation, TensorType):
            raise InvalidWorkloadError(f"{what} {fn.__name__}: parameter {p.name!r} needs a tensor annotation "
                                       f"such as T.Buffer[(1, 784), \"float32\"] or Tensor((1, 784), \"float32\")",
                                       p.name)
        out.append((p.name, p.annotation))
    return out


def prim_func(fn: Callable) -> PrimFunction:
    """``@T.prim_func``: a tensor program from a body written in ``te`` (module docstring).

    Raises InvalidWorkloadError when a parameter lacks a ``T.Buffer`` annotation, the body
    returns no computed tensor, returns as many tensors as there are parameters, reads an
    output parameter, or returns a shape/dtype that differs from its output parameter's.
    """
    params = _param_types(fn, "prim_func")
    holders = [placeholder(t.shape, t.dtype, name) for name, t in params]
    _ATTRS.append({})
    try:
        result = fn(*holders)
    finally:
        attrs = _ATTRS.pop()
    outs = list(result) if isinstance(result, (list, tuple)) else [result]
    if not outs or not all(isinstance(t, TeTensor) and not isinstance(t.op, PlaceholderOp) for t in outs):
        raise InvalidWorkloadError(f"prim_func {fn.__name__} must return its computed output tensor(s) "
                                   f"(te.compute results), got {result!r}")
    n_in = len(params) - len(outs)
    if n_in < 1:
        raise InvalidWorkloadError(f"prim_func {fn.__name__} returns {len(outs)} tensor(s) but has only "
                                   f"{len(params)} parameters: the last parameters are the outputs, "
                                   f"the ones before them the inputs")
    for (name, want), t in zip(params[n_in:], outs):
        got = TensorType(tuple(int(d.value) for d in t.shape), t.dtype)
        if got != want:
            raise InvalidWorkloadError(f"prim_func {fn.__name__}: output parameter {name} is declared "
                                       f"{want.shape} {want.dtype} but the body returns {got.shape} {got.dtype}",
                                       name)
    used = {op for op in post_order_ops(outs) if isinstance(op, PlaceholderOp)}
    for (name, _), h in zip(params[n_in:], holders[n_in:]):
        if h.op in used:
            raise InvalidWorkloadError(f"prim_func {fn.__name__} reads its output parameter {name}", name)
    dag = ComputeDAG([*holders[:n_in], *outs])
    name = attrs.pop("global_symbol", fn.__name__)
    return PrimFunction(name, dag, None, attrs)


def func_attr(attrs: Mapping) -> None:
    """``T.func_attr({...})`` inside a ``@T.prim_func`` body: the function's attributes
    (``"global_symbol"`` names it; the others are kept, not interpreted).  Raises
    InvalidWorkloadError outside a prim_func body or for a non-dict."""
    if not _ATTRS:
        raise InvalidWorkloadError("T.func_attr is only valid inside a @T.prim_func body")
    if not isinstance(attrs, Mapping):
        raise InvalidWorkloadError(f"T.func_attr takes a dict, got {type(attrs).__name__}")
    _ATTRS[-1].update(attrs)


T = types.SimpleNamespace(prim_func=prim_func, Buffer=_BufferSpec(), func_attr=func_attr)
"""The ``T`` of TVMScript: ``T.prim_func``, ``T.Buffer``, ``T.func_attr``."""


# -- relax ----------------------------------------------------------------------------
class RValue:
    """A value inside an ``@R.function`` body being traced (a parameter or a call's output)."""

    def __init__(self, name: str, type: TensorType, trace: _Trace):
        self.name, self.type, self.trace = name, type, trace

    def __repr__(self) -> str:
        return f"RValue({self.name}: {list(self.type.shape)} {self.type.dtype})"


@dataclass
class _Trace:
    params: list
    calls: list          # (kind, func name, [RValue args], [RValue outputs])
    functions: dict
    namespace: Mapping


def _current_trace() -> _Trace:
    if not _TRACES:
        raise InvalidWorkloadError("R.call_tir / R.dataflow / R.output are only valid inside an @R.function body "
                                   "that is being built (inside @ir_module or IRModule.from_expr)")
    return _TRACES[-1]


def call_tir(func: Any, args: Any, shape: Any, dtype: Any = "float32"):
    """``R.call_tir(func, (args...), shape, dtype=)``: call a prim_func (a PrimFunction) or a
    registered library function (its name, e.g. ``"env.relu"``).  ``shape`` is one shape
    (returns one value) or a list of shapes (returns a tuple; ``dtype`` one string or a list).
    Raises InvalidWorkloadError for a callee of another type or an argument that is not a value
    of this function."""
    tr = _current_trace()
    if isinstance(func, PrimFunction):
        kind, name = "tir", func.name
        known = tr.functions.get(name)
        if known is not None and known is not func:
            raise InvalidWorkloadError(f"two different prim_funcs are named {name!r}")
        tr.functions[name] = func
    elif isinstance(func, str):
        kind, name = "library", func
    else:
        raise InvalidWorkloadError(f"R.call_tir calls a @T.prim_func or a registered function's name, "
                                   f"not {type(func).__name__}")
    args = tuple(args) if isinstance(args, (tuple, list)) else (args,)
    for j, a in enumerate(args):
        if not isinstance(a, RValue) or a.trace is not tr:
            raise InvalidWorkloadError(f"R.call_tir({name}): argument {j} is {a!r}, not a value of this function")
    multi = isinstance(shape, list) and shape and isinstance(shape[0], (tuple, list))
    shapes = list(shape) if multi else [shape]
    dtypes = list(dtype) if isinstance(dtype, (list, tuple)) else [dtype] * len(shapes)
    if len(dtypes) != len(shapes):
        raise InvalidWorkloadError(f"R.call_tir({name}): {len(shapes)} output shapes but {len(dtypes)} dtypes")
    outs = [RValue("", Tensor(s, d), tr) for s, d in zip(shapes, dtypes)]
    tr.calls.append((kind, name, list(args), outs))
    return tuple(outs) if multi else outs[0]


@contextmanager
def dataflow():
    """``with R.dataflow():`` a block of calls without side effects (kept as plain calls)."""
    _current_trace()
    yield


def output(*values) -> None:
    """``R.output(v, ...)``: the values of a dataflow block used after it (checked, no effect)."""
    tr = _current_trace()
    for v in values:
        if not isinstance(v, RValue) or v.trace is not tr:
            raise InvalidWorkloadError(f"R.output({v!r}): not a value of this function")


class RelaxFunction:
    """An ``@R.function``: its Python body and, once traced, its Graph (``.graph``)."""

    def __init__(self, fn: Callable | None = None, graph: Graph | None = None, name: str = "main"):
        self.fn = fn
        self.name = fn.__name__ if fn is not None else name
        self._graph = graph

    @property
    def graph(self) -> Graph:
        """The traced Graph (traced on first use with the body's own globals)."""
        if self._graph is None:
            self._graph = self.trace({})
        return self._graph

    def with_graph(self, graph: Graph) -> RelaxFunction:
        return RelaxFunction(None, graph, self.name)

    def trace(self, namespace: Mapping) -> Graph:
        """Run the body on symbolic values, the names in ``namespace`` visible as globals.

        Raises InvalidWorkloadError for a bad annotation, call or return value."""
        fn = self.fn
        if fn is None:
            return self.graph
        params = _param_types(fn, "R.function")
        body = types.FunctionType(fn.__code__, {**fn.__globals__, **namespace}, fn.__name__,
                                  fn.__defaults__, fn.__closure__)
        tr = _Trace([], [], {}, namespace)
        tr.params = [RValue(n, t, tr) for n, t in params]
        local_names: dict = {}

        def profile(frame, event, arg):
            if event == "return" and frame.f_code is body.__code__:
                local_names.update(frame.f_locals)

        _TRACES.append(tr)
        old = sys.getprofile()
        sys.setprofile(profile)
        try:
            ret = body(*tr.params)
        finally:
            sys.setprofile(old)
            _TRACES.pop()
        rets = list(ret) if isinstance(ret, (tuple, list)) else [ret]
        if not rets or not all(isinstance(v, RValue) and v.trace is tr for v in rets):
            raise InvalidWorkloadError(f"R.function {fn.__name__} must return the value(s) of its calls, got {ret!r}")
        self._name_values(tr, local_names)
        calls = tuple(Call(kind, name, tuple(a.name for a in args), tuple(GraphVar(o.name, o.type) for o in outs))
                      for kind, name, args, outs in tr.calls)
        return Graph((), tuple(GraphVar(p.name, p.type) for p in tr.params), calls,
                     tuple(v.name for v in rets), tr.functions)

    @staticmethod
    def _name_values(tr: _Trace, local_names: Mapping) -> None:
        """Call outputs take the body's local variable names (``lv0``, ``out``); others ``lv<k>``."""
        used = {p.name for p in tr.params}
        for local, v in local_names.items():
            if isinstance(v, RValue) and not v.name and local not in used:
                v.name = local
                used.add(local)
        k = 0
        for _, _, _, outs in tr.calls:
            for o in outs:
                while not o.name:
                    if f"lv{k}" not in used:
                        o.name = f"lv{k}"
                        used.add(o.name)
                    k += 1


def function(fn: Callable) -> RelaxFunction:
    """``@R.function``: a model's ``main``; traced when its module is built (module docstring)."""
    return RelaxFunction(fn)


R = types.SimpleNamespace(function=function, call_tir=call_tir, dataflow=dataflow, output=output, Tensor=Tensor)
"""The ``R`` of TVMScript: ``R.function``, ``R.call_tir``, ``R.dataflow``, ``R.output``, ``R.Tensor``."""


# -- modules ----------------------------------------------------------------------------
@dataclass(frozen=True)
class GlobalVar:
    """The name of a module's function (TVM's ``GlobalVar``; ``name_hint``)."""

    name_hint: str


class IRModule:
    """Named functions: PrimFunctions and (at most one) relax ``main`` (TVM's ``IRModule``).

    Mutable as TVM's (``update_func``, ``mod[name] = f``).  ``graph()`` is ``main``'s Graph
    with the module's current prim_funcs (so an updated ``linear0`` is what a build uses).
    """

    def __init__(self, functions: Mapping[str, Any] | None = None):
        self.functions: dict = {}
        for name, f in (functions or {}).items():
            self[name] = f

    @staticmethod
    def from_expr(expr: Any) -> IRModule:
        """A module holding ``expr`` (a PrimFunction under its name, usually ``"main"`` after
        ``.with_attr("global_symbol", "main")``; a relax function as ``"main"``)."""
        if isinstance(expr, PrimFunction):
            return IRModule({expr.name: expr})
        if isinstance(expr, RelaxFunction):
            return IRModule({"main": expr})
        raise InvalidWorkloadError(f"IRModule.from_expr takes a prim_func or an R.function, not {type(expr).__name__}")

    def _key(self, name: Any) -> str:
        key = name.name_hint if isinstance(name, GlobalVar) else name
        if key not in self.functions:
            raise InvalidWorkloadError(f"the module has no function {key!r} (has {sorted(self.functions)})", str(key))
        return key

    def __getitem__(self, name: Any):
        return self.functions[self._key(name)]

    def __setitem__(self, name: Any, func: Any) -> None:
        key = name.name_hint if isinstance(name, GlobalVar) else name
        if isinstance(func, PrimFunction):
            func = func if func.name == key else func.with_attr("global_symbol", key)
        elif not isinstance(func, RelaxFunction):
            raise InvalidWorkloadError(f"a module holds prim_funcs and R.functions, not {type(func).__name__}", key)
        self.functions[key] = func

    def __contains__(self, name: Any) -> bool:
        return (name.name_hint if isinstance(name, GlobalVar) else name) in self.functions

    def get_global_var(self, name: str) -> GlobalVar:
        """The GlobalVar of function ``name``; InvalidWorkloadError if there is none."""
        return GlobalVar(self._key(name))

    def get_global_vars(self) -> list:
        return [GlobalVar(k) for k in self.functions]

    def update_func(self, gv: GlobalVar, func: Any) -> None:
        """Replace the function ``gv`` names (in place).  A PrimFunction keeps the name ``gv``."""
        self[self.get_global_var(gv.name_hint if isinstance(gv, GlobalVar) else gv)] = func

    def copy(self) -> IRModule:
        return IRModule(self.functions)

    def graph(self, name: str = "main") -> Graph:
        """The Graph of relax function ``name`` using this module's prim_funcs.  Raises
        InvalidWorkloadError when ``name`` is not a relax function or a call no longer type-checks."""
        f = self[name]
        if not isinstance(f, RelaxFunction):
            raise InvalidWorkloadError(f"{name!r} is a prim_func, not a relax function", name)
        g = f.graph
        for k in g.functions:
            mine = self.functions.get(k)
            if isinstance(mine, PrimFunction):
                g = g.with_function(mine, k)
        return g

    def script(self) -> str:
        """A readable TVMScript-like text of the module (prim_func bodies as their DAG)."""
        lines = ["@ir_module", "class Module:"]
        for name, f in self.functions.items():
            if isinstance(f, PrimFunction):
                n_in = len(f.dag.inputs)
                args = [f"{t.name}: T.Buffer[{tuple(ty.shape)}, \"{ty.dtype}\"]"
                        for t, ty in zip(f.dag.inputs, f.arg_types)]
                args += [f"{t.name}: T.Buffer[{tuple(ty.shape)}, \"{ty.dtype}\"]"
                         for t, ty in zip(f.dag.outputs, f.out_types)]
                lines += ["    @T.prim_func", f"    def {name}({', '.join(args)}):",
                          f"        T.func_attr({ {'global_symbol': name, **f.attrs}!r})"]
                lines += [f"        # {line}" for line in str(f.dag).splitlines()]
                lines.append(f"        # inputs: {n_in}; schedule: {'set' if f.state is not None else 'none'}")
            else:
                g = f.graph
                sig = ", ".join(f"{p.name}: Tensor({p.type.shape}, \"{p.type.dtype}\")" for p in g.free_params)
                lines += ["    @R.function", f"    def {name}({sig}):", "        with R.dataflow():"]
                for c in g.calls:
                    callee = c.func if c.kind == "tir" else repr(c.func)
                    outs = ", ".join(o.name for o in c.outputs)
                    shapes = ", ".join(str(o.type.shape) for o in c.outputs)
                    dtype = c.outputs[0].type.dtype if c.outputs else "float32"
                    arg_text = ", ".join(c.args) + ("," if len(c.args) == 1 else "")  # a 1-tuple
                    lines.append(f"            {outs} = R.call_tir({callee}, ({arg_text}), {shapes}, "
                                 f"dtype=\"{dtype}\")")
                lines += [f"            R.output({', '.join(g.outputs)})", f"        return {', '.join(g.outputs)}"]
                if g.bound:
                    lines.append(f"    # bound params: {', '.join(sorted(g.bound))}")
        return "\n".join(lines) + "\n"

    def __repr__(self) -> str:
        return f"IRModule({sorted(self.functions)})"


def ir_module(cls: type) -> IRModule:
    """``@ir_module`` on a class: its ``@T.prim_func`` and ``@R.function`` members as an IRModule;
    each relax body sees the class's functions by name.  Raises InvalidWorkloadError for a
    class with no function."""
    members = {k: v for k, v in vars(cls).items() if isinstance(v, (PrimFunction, RelaxFunction))}
    if not members:
        raise InvalidWorkloadError(f"@ir_module class {cls.__name__} has no @T.prim_func or @R.function")
    prims = {k: v for k, v in members.items() if isinstance(v, PrimFunction)}
    out = {}
    for k, v in members.items():
        out[k] = v if isinstance(v, PrimFunction) else v.with_graph(v.trace(prims))
    return IRModule(out)
