"""Building a Graph from operators, fusing elementwise consumers into their producer.

The importer (``pytorch.py``) walks a model's operators in execution order and calls a
:class:`GraphBuilder`; values are

    str         a graph value (a model input, a weight, or a call's output)
    View        a layout view of a graph value (reshape / permute / expand): no copy; a
                consumer reads the base through an index map (TVM folds such injective
                ops into the consumer the same way)
    Group       the pending output of an open fused function (a tail not yet materialized)

A :class:`Group` is one fused function: an *anchor* stage (dense, conv2d, softmax, ...)
followed by elementwise stages, each reading the previous stage's output (the group's
tail) and graph values.  An elementwise operator joins the group of its input when that
input is the group's tail, has no other user and has the operator's output shape: the
rule of Ansor's task extraction (relay ``FuseOps``: an injective consumer fuses into an
out-elemwise-fusable producer; Zheng et al., OSDI 2020).  A group is closed, becoming one
``call_tir`` of a PrimFunction, when another consumer needs its tail.  Placeholders are
named by role and computes by operator, so identical subgraphs give identical DAGs and
the same workload_key.

A model weight read by the weight operand of a ``dense`` or ``conv2d`` anchor is marked as a
layout-free placeholder of that compute (``LAYOUT_FREE_ROLES``; TVM's relay integration does
the same for constant weights): the tuned schedule chooses its layout, and ``graph.build``
packs the weight into that layout once, when the model is built.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from scheduler_core import te
from scheduler_core.base.errors import InvalidWorkloadError
from scheduler_core.dag.compute_dag import ComputeDAG
from scheduler_core.graph.ir import Call, Graph, GraphVar, PrimFunction, TensorType
from scheduler_core.ir.name_supply import fresh_name

from . import ops
from .ops import Operand

__all__ = ["View", "Group", "Stage", "TAIL", "CONV_LAYOUTS", "GraphBuilder", "sanitize"]

TAIL = "<tail>"  # a stage argument that reads the previous stage's output
CONV_LAYOUTS = ("NCHW", "NHWC")  # the layouts convolutions and the values between them may take
NCHW_TO_NHWC = (0, 2, 3, 1)  # a permute step that reads an NCHW tensor as NHWC
NHWC_TO_NCHW = (0, 3, 1, 2)  # and back
LAYOUT_FREE_ROLES = {"dense": "weight", "conv2d": "kernel"}  # anchor kind -> role of its weight operand
# operators with an NHWC form: layout-agnostic elementwise ones, and those taking a layout or axis
_NHWC_CAPABLE = (ops.conv2d, ops.pool2d, ops.global_avg_pool2d, ops.unary, ops.binary, ops.clip,
                 ops.channel_affine)


def sanitize(name: str) -> str:
    """A valid graph name made of ``name`` (letters, digits, ``_ . : -``)."""
    s = re.sub(r"[^A-Za-z0-9_.:\-]", "_", str(name))
    return s if s and (s[0].isalpha() or s[0] == "_") else f"v_{s}"


@dataclass(frozen=True)
class View:
    """A layout view of the graph value ``base`` (of ``base_shape``): ``steps`` as in
    :func:`ops.layout_shape`."""

    base: str
    base_shape: tuple
    steps: tuple
    dtype: str = "float32"

    @property
    def shape(self) -> tuple:
        return ops.layout_shape(self.base_shape, self.steps)

    def then(self, *steps: tuple) -> View:
        """This view followed by ``steps``; two permutations in a row are composed, and one that
        leaves every axis in place is dropped (an NHWC value read back in NHWC is the base)."""
        out = list(self.steps)
        for st in steps:
            if st[0] == "permute" and out and out[-1][0] == "permute":
                composed = tuple(out[-1][1][d] for d in st[1])
                out[-1:] = [] if composed == tuple(range(len(composed))) else [("permute", composed)]
            else:
                out.append(st)
        return View(self.base, self.base_shape, tuple(out), self.dtype)


@dataclass
class Stage:
    """One operator of a fused function: ``fn(*operands, name=, **attrs)`` -> te tensor.
    ``args`` are TAIL, graph values (str or View, read through a placeholder named by the
    ``roles`` entry at the same position), open Groups (before the stage is added) or
    Python numbers."""

    kind: str
    fn: Callable
    args: list
    roles: list
    attrs: dict = field(default_factory=dict)


@dataclass
class Group:
    """An open fused function: its stages, the tail's shape and dtype, and how many users
    the tail has (it can take an elementwise consumer only while it has exactly one)."""

    stages: list
    shape: tuple
    dtype: str
    uses: int = 1
    closed: str | None = None  # the graph value name once materialized
    name: str = ""  # the name its output takes (the operator that made the tail)
    perm: tuple | None = None  # once closed in NHWC: the permutation that reads it back as NCHW

    @property
    def kinds(self) -> list:
        return [s.kind for s in self.stages]


class GraphBuilder:
    """Collects inputs, weights and fused calls; :meth:`finish` returns the Graph."""

    def __init__(self, conv_layout: str = "NCHW") -> None:
        if conv_layout not in CONV_LAYOUTS:
            raise InvalidWorkloadError(f"conv_layout must be one of {CONV_LAYOUTS}, got {conv_layout!r}")
        self.conv_layout = conv_layout
        self.inputs: list = []
        self.params: dict = {}  # name -> numpy array
        self.calls: list = []
        self.functions: dict = {}
        self.types: dict = {}  # value name -> TensorType
        self._names: set = set()
        self._fn_counter = itertools.count()

    # -- names and values ----------------------------------------------------------
    def fresh(self, name: str) -> str:
        return fresh_name(sanitize(name), self._names)

    def add_input(self, name: str, shape: Sequence[int], dtype: str) -> str:
        n = self.fresh(name)
        self.inputs.append(GraphVar(n, TensorType(tuple(shape), dtype)))
        self.types[n] = TensorType(tuple(shape), dtype)
        return n

    def add_param(self, name: str, array: Any) -> str:
        """A weight (bound when the graph is finished); returns its graph name."""
        arr = np.ascontiguousarray(np.asarray(array))
        n = self.fresh(name)
        self.params[n] = arr
        self.types[n] = TensorType(arr.shape, str(arr.dtype))
        return n

    def param_array(self, value: Any) -> np.ndarray | None:
        """The array of a weight (or of a view of one, with the view applied), else None."""
        if isinstance(value, str):
            return self.params.get(value)
        if isinstance(value, View) and value.base in self.params:
            arr = self.params[value.base]
            for kind, arg in value.steps:
                if kind == "slice":
                    arr = np.take(arr, range(arg[1], arg[2]), axis=arg[0])
                else:
                    arr = (arr.reshape(arg) if kind == "reshape" else np.transpose(arr, arg) if kind == "permute"
                           else np.broadcast_to(arr, arg))
            return np.ascontiguousarray(arr)
        return None

    def shape_of(self, value: Any) -> tuple:
        if isinstance(value, str):
            return self.types[value].shape
        return tuple(value.shape)

    def dtype_of(self, value: Any) -> str:
        if isinstance(value, str):
            return self.types[value].dtype
        return value.dtype

    # -- groups --------------------------------------------------------------------
    def materialize(self, value: Any, name: str = "v") -> Any:
        """A str or View for ``value``: an open group is closed into a call (a group computed in
        NHWC is seen through the permutation that reads it as NCHW)."""
        if isinstance(value, Group):
            vname = self.close(value, name)
            if value.perm is not None:
                return View(vname, self.types[vname].shape, (("permute", value.perm),), value.dtype)
            return vname
        return value

    def view(self, value: Any, *steps: tuple, name: str = "v") -> View:
        """``value`` seen through layout ``steps`` (an open group is closed first)."""
        v = self.materialize(value, name)
        base = v if isinstance(v, View) else View(v, self.types[v].shape, (), self.types[v].dtype)
        out = base.then(*steps)
        out.shape  # noqa: B018 - validates the steps
        return out

    def anchor(self, stage: Stage, shape: Sequence[int], dtype: str = "float32", uses: int = 1) -> Group:
        """Open a group whose first stage is ``stage`` (its tensor args are made graph values)."""
        stage.args = [a if a is TAIL or not isinstance(a, (Group, str, View)) else self.materialize(a)
                      for a in stage.args]
        return Group([stage], tuple(shape), dtype, uses)

    def elementwise(self, stage: Stage, shape: Sequence[int], dtype: str = "float32", uses: int = 1) -> Group:
        """Add an elementwise ``stage`` whose args may include open groups: it joins the first
        open group that it can fuse into (its tail used once, same shape), the others are
        closed; with none, it opens a group of its own."""
        shape = tuple(shape)
        target = None
        for a in stage.args:
            if isinstance(a, Group) and a.closed is None and a.uses == 1 and a.shape == shape \
                    and a.dtype == dtype and target is None:
                target = a
        args = []
        for a in stage.args:
            if a is target:
                args.append(TAIL)
            elif isinstance(a, Group):
                args.append(self.materialize(a))
            else:
                args.append(a)
        stage.args = args
        if target is None:
            return Group([stage], shape, dtype, uses)
        target.stages.append(stage)
        target.uses = uses
        return target

    def close(self, group: Group, name: str = "v", convert: bool = True) -> str:
        """Emit the call of ``group`` (once) and return its output's graph name (``convert``:
        whether it may compute in NHWC, see :meth:`_nhwc_stages`)."""
        if group.closed is not None:
            return group.closed
        placeholders: list = []
        call_args: list = []
        seen: dict = {}
        placeholder_of: dict = {}
        op_names: dict = {}

        def external(value: Any, role: str) -> Operand:
            key = (value.base, value.steps) if isinstance(value, View) else value
            if key in seen:
                return seen[key]
            base = value.base if isinstance(value, View) else value
            t = self.types[base]
            taken = {p.op.name for p in placeholders}
            pname, k = role, 1
            while pname in taken:
                pname, k = f"{role}{k}", k + 1
            ph = te.placeholder(t.shape, t.dtype, name=pname)
            placeholders.append(ph)
            call_args.append(base)
            if isinstance(value, View) and value.steps:
                steps, shape = value.steps, t.shape
                opnd = Operand(value.shape, t.dtype,
                               lambda idx, ph=ph: ph[tuple(ops.layout_index(shape, steps, idx))])
            else:
                opnd = ops.operand(ph)
            seen[key] = opnd
            placeholder_of[key] = ph
            return opnd

        def layout_free(st: Stage) -> list:
            """The placeholders of ``st``'s weight operand that are model weights (constants)."""
            role = LAYOUT_FREE_ROLES.get(st.kind)
            out = []
            for a, r in zip(st.args, st.roles):
                if r == role and isinstance(a, (str, View)) and (a.base if isinstance(a, View) else a) in self.params:
                    out.append(placeholder_of[(a.base, a.steps) if isinstance(a, View) else a])
            return out

        nhwc = self._nhwc_stages(group) if convert else None
        stages = nhwc if nhwc is not None else group.stages
        tail = None
        for st in stages:
            operands = []
            for a, role in zip(st.args, st.roles):
                if a is TAIL:
                    operands.append(tail)
                elif isinstance(a, (str, View)):
                    operands.append(external(a, role))
                else:
                    operands.append(a)
            k = op_names.get(st.kind, 0)
            op_names[st.kind] = k + 1
            extra = {"layout_free": free} if (free := layout_free(st)) else {}
            out = st.fn(*operands, name=st.kind if k == 0 else f"{st.kind}_{k}", **st.attrs, **extra)
            tail = ops.operand(out)
        out_tensor = out
        dag = ComputeDAG([*placeholders, out_tensor])
        fname = f"fused_{'_'.join(dict.fromkeys(group.kinds))}_{next(self._fn_counter)}"
        self.functions[fname] = PrimFunction(fname, dag)
        vname = self.fresh(group.name or name)
        shape = tuple(group.shape)
        if nhwc is not None:
            group.perm = NHWC_TO_NCHW
            shape = tuple(shape[d] for d in NCHW_TO_NHWC)
        vtype = TensorType(shape, group.dtype)
        self.types[vname] = vtype
        self.calls.append(Call("tir", fname, tuple(call_args), (GraphVar(vname, vtype),)))
        group.closed = vname
        return vname

    def _nhwc_stages(self, group: Group) -> list | None:
        """The stages of ``group`` rewritten to compute in NHWC, or None to keep NCHW.

        With ``conv_layout="NHWC"``, a 4-D group is computed in NHWC when its stages all have an
        NHWC form (conv2d, pooling, elementwise, per-channel scale) and it starts with a conv2d
        or reads a value already stored in NHWC: its tensor operands are read through
        permutations (which cancel on a value stored in NHWC), a conv2d or pooling stage gets
        ``layout="NHWC"``, a per-channel stage the channel axis 3.  This is TVM's ConvertLayout
        to NHWC, done as the importer closes each fused function, after batch-norm folding.
        """
        if self.conv_layout != "NHWC" or len(group.shape) != 4:
            return None
        if any(st.fn not in _NHWC_CAPABLE for st in group.stages):
            return None
        first = group.stages[0]
        reads_nhwc = any(isinstance(a, View) and a.steps[-1:] == (("permute", NHWC_TO_NCHW),)
                         for a in first.args)
        if first.fn is not ops.conv2d and not reads_nhwc:
            return None
        out = []
        for st in group.stages:
            attrs = dict(st.attrs)
            converted = len(st.args)  # how many leading operands are read in NHWC
            if st.fn in (ops.conv2d, ops.pool2d, ops.global_avg_pool2d):
                attrs["layout"] = "NHWC"
                converted = 1  # the data; a conv2d's weight stays OIHW
            elif st.fn is ops.channel_affine:
                if attrs.get("axis", 1) != 1:
                    return None
                attrs["axis"] = 3
                converted = 1  # scale and shift stay 1-D
            args = [self._to_nhwc(a) if k < converted and isinstance(a, (str, View)) and a is not TAIL else a
                    for k, a in enumerate(st.args)]
            out.append(Stage(st.kind, st.fn, args, list(st.roles), attrs))
        return out

    def _to_nhwc(self, value: Any) -> View:
        """``value`` (an NCHW-shaped operand of rank <= 4, broadcast from the right) read in NHWC."""
        v = value if isinstance(value, View) else View(value, self.types[value].shape, (), self.types[value].dtype)
        if len(v.shape) < 4:
            v = v.then(("reshape", (1,) * (4 - len(v.shape)) + tuple(v.shape)))
        return v.then(("permute", NCHW_TO_NHWC))

    def library(self, func: str, args: Sequence[str], outs: Sequence[tuple]) -> list:
        """A library call ``func(*args)`` with outputs ``(name, shape, dtype)``; returns their names."""
        names = []
        gvs = []
        for name, shape, dtype in outs:
            n = self.fresh(name)
            t = TensorType(tuple(shape), dtype)
            self.types[n] = t
            gvs.append(GraphVar(n, t))
            names.append(n)
        self.calls.append(Call("library", func, tuple(args), tuple(gvs)))
        return names

    def output(self, value: Any, name: str = "out") -> str:
        """A graph value for a model output (a view is copied by a function of its own; a fused
        function still open computes in the model's layout, so that it needs no such copy)."""
        if isinstance(value, Group) and value.closed is None:
            return self.close(value, name, convert=False)
        v = self.materialize(value, name)
        if isinstance(v, View) and v.steps:
            g = Group([Stage("copy", ops.copy, [v], ["data"])], v.shape, v.dtype)
            return self.close(g, name)
        return v.base if isinstance(v, View) else v

    def finish(self, outputs: Sequence[str]) -> Graph:
        """The Graph (only the weights some call reads are kept, bound to their arrays)."""
        used = {a for c in self.calls for a in c.args} | set(outputs)
        params = tuple(GraphVar(n, self.types[n]) for n in self.params if n in used)
        graph = Graph(tuple(self.inputs), params, tuple(self.calls), tuple(outputs), self.functions)
        return graph.bind_params({p.name: self.params[p.name] for p in params})

