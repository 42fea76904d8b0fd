"""Tensors and the operations that produce them.

An operation is one of ``PlaceholderOp`` (an input), ``ComputeOp`` (every
element given by an index expression, possibly a reduction) or ``ScanOp`` (a
recurrence over its first axis, seed 001).  A ``Tensor`` is output
``value_index`` of an operation.  Operations are immutable and hash by identity.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from scheduler_core.base.errors import InvalidWorkloadError
from scheduler_core.ir.expr import Expr, IterVar, Reduce, TensorLoad, Var, as_expr
from scheduler_core.ir.expr_functor import structural_equal, walk


@dataclass(frozen=True, eq=False)
class Tensor:
    """Output ``value_index`` of ``op``; ``T[i, j]`` builds a :class:`TensorLoad`."""

    op: Any
    value_index: int = 0

    @property
    def shape(self) -> tuple:
        return self.op.output_shape(self.value_index)

    @property
    def dtype(self) -> str:
        return self.op.output_dtype(self.value_index)

    @property
    def name(self) -> str:
        if self.op.num_outputs == 1:
            return self.op.name
        return f"{self.op.name}.v{self.value_index}"

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __getitem__(self, indices) -> TensorLoad:
        if not isinstance(indices, tuple):
            indices = (indices,)
        if len(indices) != len(self.shape):
            raise InvalidWorkloadError(
                f"tensor {self.name} has {len(self.shape)} dimensions, indexed with {len(indices)}"
            )
        idx = tuple(as_expr(i) for i in indices)
        for k, i in enumerate(idx):
            if i.dtype.startswith("float") or i.dtype == "bool":
                raise InvalidWorkloadError(
                    f"index {k} of tensor {self.name} has dtype {i.dtype}; indices must be integers"
                )
        return TensorLoad(self, idx, self.dtype)

    def __repr__(self) -> str:
        return f"Tensor({self.name}, shape={list(map(str, self.shape))}, dtype={self.dtype})"

    def __eq__(self, other):  # identity, so tensors work in sets and dicts
        return self is other or (
            isinstance(other, Tensor) and other.op is self.op and other.value_index == self.value_index
        )

    def __hash__(self):  # same identity as (op, value_index)
        return hash((id(self.op), self.value_index))


class Operation:
    """Common queries of every operation."""

    name: str
    num_outputs: int = 1

    def output(self, i: int = 0) -> Tensor:
        return Tensor(self, i)

    def input_tensors(self) -> list:
        raise NotImplementedError

    __hash__ = object.__hash__


@dataclass(frozen=True, eq=False)
class PlaceholderOp(Operation):
    name: str
    shape: tuple
    dtype: str = "float32"

    def output_shape(self, i: int) -> tuple:
        return self.shape

    def output_dtype(self, i: int) -> str:
        return self.dtype

    def input_tensors(self) -> list:
        return []

    __hash__ = object.__hash__


@dataclass(frozen=True, eq=False)
class ComputeOp(Operation):
    """``out[axis] = body`` for every point of ``axis`` (a reduction if body is Reduce).

    A compute with several outputs (TVM's multi-output ComputeOp, ``te.compute`` whose
    function returns a tuple) is one op: output 0 is ``body``, output ``k >= 1`` is
    ``extra_bodies[k - 1]``; ``bodies`` lists them all.  The outputs share the shape and
    the loop nest; their dtypes may differ.  Either no body is a reduction or all are,
    over the same reduce axes (the same variables and domains) with the same combiner
    and condition, sources free (TVM's ComputeOp verifier asks the same of the Reduce
    nodes of one op, "except value_index").  A reduction is always a whole body.

    Raises InvalidWorkloadError at construction when the bodies break these rules.
    """

    name: str
    axis: tuple  # tuple[IterVar] spatial axes, outermost first
    body: Expr
    attrs: dict = field(default_factory=dict)
    tag: str = ""
    extra_bodies: tuple = ()  # tuple[Expr], the bodies of outputs 1, 2, ...

    def __post_init__(self):
        if self.extra_bodies:
            check_multi_output_bodies(self.name, self.bodies)

    @property
    def bodies(self) -> tuple:
        """The body of every output, output 0 first (TVM's ``ComputeOp.body``)."""
        return (self.body,) + tuple(self.extra_bodies)

    @property
    def num_outputs(self) -> int:  # type: ignore[override]
        return 1 + len(self.extra_bodies)

    @property
    def reduce_axis(self) -> tuple:
        return self.body.axis if isinstance(self.body, Reduce) else ()

    @property
    def shape(self) -> tuple:
        return tuple(iv.dom_extent for iv in self.axis)

    @property
    def dtype(self) -> str:
        """The dtype of output 0."""
        return self.body.dtype

    def output_shape(self, i: int) -> tuple:
        return self.shape

    def output_dtype(self, i: int) -> str:
        return self.bodies[i].dtype

    def input_tensors(self) -> list:
        if not self.extra_bodies:
            return tensors_read(self.body)
        out: list = []
        for b in self.bodies:
            out.extend(t for t in tensors_read(b) if t not in out)
        return out

    __hash__ = object.__hash__


def check_multi_output_bodies(name: str, bodies: Sequence) -> None:
    """Raise InvalidWorkloadError unless ``bodies`` (of compute ``name``) may form one op:
    all reductions or none; reductions over the same reduce axes (same variables and
    domains), with the same combiner and the same condition; a reduction only as a whole
    body.  TVM: ``ComputeVerifier`` in ``src/te/operation/compute_op.cc``."""
    first = bodies[0]
    for k, b in enumerate(bodies):
        if not isinstance(b, Expr):
            raise InvalidWorkloadError(f"compute {name}: output {k} is {type(b).__name__}, not an expression")
        if isinstance(b, Reduce) != isinstance(first, Reduce):
            raise InvalidWorkloadError(
                f"compute {name}: output 0 {'is' if isinstance(first, Reduce) else 'is not'} a reduction "
                f"but output {k} {'is' if isinstance(b, Reduce) else 'is not'}; the outputs of one compute "
                "are all reductions or none")
        for n in walk(b.source if isinstance(b, Reduce) else b):
            if isinstance(n, Reduce):
                raise InvalidWorkloadError(
                    f"compute {name}: a reduction must be the whole body of output {k}, not nested inside it")
        if k == 0 or not isinstance(b, Reduce):
            continue
        assert isinstance(first, Reduce)
        if b.combiner != first.combiner:
            raise InvalidWorkloadError(f"compute {name}: output {k} reduces with {b.combiner} but output 0 "
                                       f"with {first.combiner}; the reductions of one compute share the combiner")
        if len(b.axis) != len(first.axis) or any(
                x.var is not y.var or not structural_equal(x.dom_min, y.dom_min)
                or not structural_equal(x.dom_extent, y.dom_extent) for x, y in zip(b.axis, first.axis)):
            raise InvalidWorkloadError(
                f"compute {name}: output {k} reduces over [{', '.join(iv.var.name for iv in b.axis)}] but "
                f"output 0 over [{', '.join(iv.var.name for iv in first.axis)}]; the reductions of one "
                "compute share the same reduce_axis objects")
        same_cond = (b.condition is None and first.condition is None) or (
            b.condition is not None and first.condition is not None
            and structural_equal(b.condition, first.condition))
        if not same_cond:
            raise InvalidWorkloadError(f"compute {name}: output {k} has another reduction condition (where=) "
                                       "than output 0; the reductions of one compute share it")


def check_iter_names(op: Any, path: str = "") -> None:
    """Raise InvalidWorkloadError(path=path) when two iterators of compute ``op`` (its
    spatial axes and reduce axes) share a name, naming both and the compute.  Stages,
    step records and lowering tell a stage's iterators apart by name, so they must be
    unique; TVM's ``CheckComputeValidity`` (``src/auto_scheduler/compute_dag.cc``)
    rejects the same when a ComputeDAG is built.  Other ops pass."""
    if not isinstance(op, ComputeOp):
        return
    seen: dict = {}
    labelled = [(iv, f"axis {iv.var.name} (axis[{j}])") for j, iv in enumerate(op.axis)]
    labelled += [(iv, f"reduce axis {iv.var.name} (reduce_axis[{j}])") for j, iv in enumerate(op.reduce_axis)]
    for iv, label in labelled:
        if iv.var.name in seen:
            raise InvalidWorkloadError(
                f"compute {op.name}: {label} has the same name as {seen[iv.var.name]}; iterator names "
                "must be unique within a compute (give each axis its own name)", path)
        seen[iv.var.name] = label


@dataclass(frozen=True, eq=False)
class ScanOp(Operation):
    """A recurrence over the first axis (seed 001's ``te.scan``).

    ``init[k]`` gives the first ``init_len`` time steps of state ``k``;
    ``update[k]`` gives step ``t`` of state ``k`` from ``state_placeholder[k]``
    at steps ``< t`` and from ``inputs``.  Output ``k`` has ``update[k]``'s shape.
    """

    name: str
    scan_axis: IterVar  # the time axis, domain [init_len, T)
    init: tuple  # tuple[Tensor]
    update: tuple  # tuple[Tensor]
    state_placeholder: tuple  # tuple[Tensor]
    inputs: tuple = ()  # tuple[Tensor], documentation only

    @property
    def num_outputs(self) -> int:  # type: ignore[override]
        return len(self.update)

    def output_shape(self, i: int) -> tuple:
        return self.update[i].shape

    def output_dtype(self, i: int) -> str:
        return self.update[i].dtype

    def input_tensors(self) -> list:
        return list(self.init) + list(self.update)

    @property
    def axis(self) -> tuple:
        return (self.scan_axis,)

    __hash__ = object.__hash__


def tensors_read(e: Expr) -> list:
    """Tensors loaded anywhere in ``e``, in first-use order, without repeats."""
    out: list = []
    seen: set = set()
    for n in walk(e):
        if isinstance(n, TensorLoad):
            key = (id(n.tensor.op), n.tensor.value_index)
            if key not in seen:
                seen.add(key)
                out.append(n.tensor)
    return out


def post_order_ops(outputs) -> list:
    """Every operation reachable from ``outputs`` in topological (producer-first) order.

    Raises InvalidWorkloadError on a cycle.
    """
    order: list = []
    state: dict[int, int] = {}  # 1 = visiting, 2 = done
    stack: list = []
    for t in outputs:
        op = t.op if isinstance(t, Tensor) else t
        stack.append((op, False))
        while stack:
            cur, expanded = stack.pop()
            key = id(cur)
            if expanded:
                state[key] = 2
                order.append(cur)
                continue
            if state.get(key) == 2:
                continue
            if state.get(key) == 1:
                raise InvalidWorkloadError(f"the compute graph has a cycle through {cur.name}")
            state[key] = 1
            stack.append((cur, True))
            for inp in reversed(cur.input_tensors()):
                if state.get(id(inp.op)) == 1:
                    raise InvalidWorkloadError(f"the compute graph has a cycle through {inp.op.name}")
                if state.get(id(inp.op)) != 2:
                    stack.append((inp.op, False))
    return order


def make_iter_var(name: str, extent: Any, kind: str = "spatial", dom_min: Any = 0) -> IterVar:
    return IterVar(Var(name, "int32"), as_expr(dom_min), as_expr(extent), kind)


def dag_ops(tensors: Sequence[Tensor]) -> tuple:
    """The operations of the DAG whose arguments are ``tensors``, producers first.

    Ops are those reachable from the computed tensors (or from all tensors when none is
    computed).  Raises InvalidWorkloadError for an empty list, a non-Tensor entry, a cycle,
    a placeholder that the computation reads but that is not among ``tensors`` (scan
    states excepted), or a compute with two iterators of one name (:func:`check_iter_names`).
    """
    tensors = list(tensors)
    if not tensors:
        raise InvalidWorkloadError("a ComputeDAG needs at least one tensor")
    for k, t in enumerate(tensors):
        if not isinstance(t, Tensor):
            raise InvalidWorkloadError(f"tensors[{k}] is {type(t).__name__}, not a Tensor")
    outputs = [t for t in tensors if not isinstance(t.op, PlaceholderOp)]
    ops = tuple(post_order_ops(outputs or tensors))
    arg_ops = {id(t.op) for t in tensors}
    scan_states = {id(s.op) for o in ops if isinstance(o, ScanOp) for s in o.state_placeholder}
    for op in ops:
        if isinstance(op, PlaceholderOp) and id(op) not in arg_ops and id(op) not in scan_states:
            raise InvalidWorkloadError(
                f"placeholder {op.name} is read by the computation but is not among the tensors"
            )
        check_iter_names(op)
    return ops
