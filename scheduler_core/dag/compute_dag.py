"""ComputeDAG: the whole computation a schedule is searched for.

A ComputeDAG is built from the list of argument tensors of a workload (inputs
and outputs, as ``register_workload`` functions return them) and holds every
operation reachable from the outputs in topological order.

    tensors --ComputeDAG--> ops (topological) --+--> str(dag)        (Ansor's DAG print)
                                                +--> flop_ct         (FlopEstimator)
                                                +--> access_analyzer (access_analysis)
                                                +--> to_json / workload_key (dag_json)
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from functools import cached_property
from typing import Any

from scheduler_core.base.errors import InvalidWorkloadError
from scheduler_core.ir.expr import (
    BinaryOp,
    Call,
    Cast,
    CmpOp,
    Expr,
    FloatImm,
    IntImm,
    LogicalOp,
    Not,
    Reduce,
    Select,
    TensorLoad,
    Var,
    expr_str,
    is_float,
)
from scheduler_core.ir.expr_functor import free_vars, substitute
from scheduler_core.ir.simplify import const_value

from .access_analysis import analyze
from .dag_json import canonical_dumps, dag_to_json, tensors_from_json
from .tensor import ComputeOp, PlaceholderOp, ScanOp, Tensor, dag_ops

_REDUCE_SYMBOL = {"sum": "+=", "max": "max=", "min": "min=", "prod": "*="}

# How a ComputeDAG makes its initial State.  State lives on the schedule floor, above this
# one, so that floor hands its constructor down once at import (register_init_state) instead
# of this module importing upwards.  Importing any part of scheduler_core runs the package's
# __init__, which imports the schedule floor, so the factory is always set before use.
INIT_STATE_FACTORY: list[Callable[[ComputeDAG], Any]] = []


def register_init_state(factory: Callable[[ComputeDAG], Any]) -> None:
    """Set the constructor of a DAG's initial State (the schedule floor calls this once)."""
    INIT_STATE_FACTORY[:] = [factory]


class ComputeDAG:
    """The ops of a workload in topological order.

    Parameters
    ----------
    tensors : list of Tensor, or a schedule
        The workload's arguments in call order: placeholders and outputs.  Or, as TVM's
        ``ComputeDAG(sch)``, a ``te.create_schedule`` schedule: the ops are its stages'
        ops in stage order (so stages that its cache_read / cache_write / rfactor added
        are ops of the DAG), the tensors are the outputs of its placeholder stages and
        then of its output stages, in stage order.  The schedule's loop transforms
        (split, reorder, compute_at, ...) are not kept: the DAG's initial state is a
        fresh one, as in TVM (``src/auto_scheduler/compute_dag.cc``).  A schedule is any
        object with ``stages`` whose items have ``op`` and ``is_output`` (TVM's Stage
        fields), as ``te.create_schedule`` returns.

    Raises
    ------
    InvalidWorkloadError
        On an empty list, non-tensors, a cycle, or a compute with two iterators of one
        name (spatial or reduce; TVM's CheckComputeValidity), naming both.
    """

    def __init__(self, tensors: Sequence[Tensor] | Any):
        stages = None if isinstance(tensors, (list, tuple, Tensor)) else getattr(tensors, "stages", None)
        self.tensors: tuple
        self.ops: tuple
        if stages is not None:
            if not all(hasattr(st, "op") and hasattr(st, "is_output") for st in stages):
                raise InvalidWorkloadError(
                    f"ComputeDAG takes a list of tensors or a te schedule, not a {type(tensors).__name__}")
            self.tensors, self.ops = _from_schedule_stages(stages)
            return
        self.tensors = tuple(tensors)
        self.ops = dag_ops(self.tensors)

    @property
    def outputs(self) -> tuple:
        """The argument tensors that are computed (not placeholders)."""
        return tuple(t for t in self.tensors if not isinstance(t.op, PlaceholderOp))

    @property
    def inputs(self) -> tuple:
        return tuple(t for t in self.tensors if isinstance(t.op, PlaceholderOp))

    # -- schedules -----------------------------------------------------------
    def get_init_state(self) -> Any:
        """The initial State: one stage per op, every stage at root, no transform steps.

        TVM's ``ComputeDAG.get_init_state()`` (``python/tvm/auto_scheduler/compute_dag.py``
        in TVM); the same as ``State.from_dag(dag)``.  A new State each call.
        """
        return INIT_STATE_FACTORY[0](self)

    @property
    def init_state(self) -> Any:
        """TVM's ``ComputeDAG.init_state`` attribute: ``self.get_init_state()``."""
        return self.get_init_state()

    # -- text ----------------------------------------------------------------
    def __str__(self) -> str:
        """Ansor's "Computational DAG" print: one line per op in ``ops`` order, e.g.
        ``A = PLACEHOLDER [1024, 1024]`` and ``matmul(i, j) += (A[i, k]*B[k, j])``."""
        return "\n".join(_op_line(op) for op in self.ops) + "\n"

    def __repr__(self) -> str:
        return f"ComputeDAG({', '.join(t.name for t in self.tensors)})"

    # -- FLOP count ------------------------------------------------------------
    def flop_count(self, bindings: dict | None = None) -> float:
        """Floating-point operations of one run of the whole DAG, counted exactly as TVM's
        ``FlopEstimator`` (``src/auto_scheduler/compute_dag.cc``) counts them.

        Each ComputeOp contributes (its number of output points) x (the count of its
        body), with the op's *type code* taken from its output dtype: float, bfloat,
        int or uint (``bool`` is TVM's ``UInt(1)``, so uint).  Counted per node:

        - add, sub, mul, div, floordiv, floormod, min, max, the comparisons (eq, ne,
          lt, le, gt, ge) and the logical and/or: 1 when either operand has the op's
          type code, else 0 (so integer index arithmetic and integer bounds checks in a
          float op are free; float comparisons in a float op count 1), plus their operands;
        - not: 1 when its (bool, i.e. uint) dtype has the op's type code, plus its operand;
        - ``if_then_else`` / select: 0 for itself, plus its condition and *both*
          branches (TVM's ``tir.if_then_else`` is a Call, whose arguments are summed;
          ``te.select`` builds the same node here and is counted the same way, where
          TVM's ``tir.Select`` would take the costlier branch only);
        - intrinsic calls (exp, log, sqrt, rsqrt, tanh, sigmoid, fabs, erf, ...) and pow
          (a call in TVM): 0 for the call, plus its arguments;
        - casts: their value only; constants, variables and tensor reads (with their
          index expressions) 0;
        - a reduction: (its combiner, 1 when the reduction's dtype has the op's type
          code, + its source) times the product of its reduce extents; its ``where``
          condition and its identity are not counted.

        So a padding stage ``if_then_else(all(y >= 1, ...), X[..], 0.0)`` counts 0,
        matmul+bias N x L x M gives 2*N*M*L + N*M, softmax 4 per element (max, sub,
        sum, div; exp is a call).  An op with an integer ``attrs["FLOP"]`` counts that
        instead.  Placeholders and scans (whose init/update are ops of their own) count 0.

        bindings: ``{var name or Var: int}`` for symbolic shape variables.
        Returns a float.  Raises InvalidWorkloadError when an extent stays symbolic
        (TVM returns -1 there).
        """
        total = 0.0
        for op in self.ops:
            if not isinstance(op, ComputeOp):
                continue
            if isinstance(op.attrs.get("FLOP"), int) and not isinstance(op.attrs["FLOP"], bool):
                total += float(op.attrs["FLOP"])
                continue
            points = _product(op.shape, bindings, op.name)
            total += points * sum(_FlopCounter(_kind(b.dtype), bindings, op.name).count(b) for b in op.bodies)
        return total

    @property
    def flop_ct(self) -> float:
        """``flop_count()`` with no bindings (Ansor's ``ComputeDAG.flop_ct``)."""
        return self.flop_count()

    # -- analysis --------------------------------------------------------------
    @cached_property
    def access_analyzer(self):
        """The :class:`~scheduler_core.dag.access_analysis.AccessAnalyzer` of this DAG."""
        return analyze(self)

    # -- JSON wire format ------------------------------------------------------
    def to_json(self) -> str:
        """The canonical JSON text of this DAG (sorted keys, no whitespace); see
        ``docs/dag_json_schema.md``.  Raises InvalidWorkloadError for DAGs the format
        cannot express (e.g. attrs that are not JSON values)."""
        return self._canonical_json

    @cached_property
    def _canonical_json(self) -> str:
        return canonical_dumps(dag_to_json(self))

    @classmethod
    def from_json(cls, s, *, require_concrete_shapes: bool = False, **limits) -> ComputeDAG:
        """Rebuild a DAG from :meth:`to_json` text (or its dict); ``limits`` are the
        keyword limits of :func:`scheduler_core.dag.dag_json.tensors_from_json`.
        ``require_concrete_shapes``: reject variables in shapes and extents (a DAG to
        tune; manual schedules may keep them symbolic).
        Raises InvalidWorkloadError with a ``path`` on any malformed payload."""
        return cls(tensors_from_json(s, require_concrete_shapes=require_concrete_shapes, **limits))

    @cached_property
    def workload_key(self) -> str:
        """A stable id of the computation: the first 32 hex digits of the SHA-256 of
        :meth:`to_json`.  Equal for DAGs built the same way (in any process); any
        change of name, shape, dtype or expression changes it."""
        return hashlib.sha256(self.to_json().encode("utf-8")).hexdigest()[:32]


def _from_schedule_stages(stages) -> tuple:
    """(tensors, ops) of TVM's ``ComputeDAG(sch)``: ops in stage order; tensors the
    outputs of placeholder stages and output stages, in stage order."""
    stages = list(stages)
    ops = tuple(st.op for st in stages)
    # A scan's state placeholders stand for its outputs, not for inputs (as ComputeDAG(tensors)).
    states = {id(t.op) for op in ops if isinstance(op, ScanOp) for t in op.state_placeholder}
    tensors = tuple(op.output(i) for st, op in zip(stages, ops)
                    if (isinstance(op, PlaceholderOp) and id(op) not in states) or
                    (not isinstance(op, PlaceholderOp) and st.is_output)
                    for i in range(op.num_outputs))
    reachable = dag_ops(tensors)  # validates (names, cycles, placeholders) as for tensors
    if {id(op) for op in reachable} != {id(op) for op in ops}:
        extra = [op.name for op in ops if id(op) not in {id(o) for o in reachable}]
        raise InvalidWorkloadError(f"the schedule's stages {extra} are not read by its outputs")
    return tensors, ops


# ---------------------------------------------------------------------------
# Printing
# ---------------------------------------------------------------------------

def _op_line(op) -> str:
    if isinstance(op, PlaceholderOp):
        return f"{op.name} = PLACEHOLDER [{', '.join(expr_str(s) for s in op.shape)}]"
    if isinstance(op, ComputeOp):
        lines = []
        for k, body in enumerate(op.bodies):
            name = op.name if op.num_outputs == 1 else op.output(k).name
            head = f"{name}({', '.join(iv.var.name for iv in op.axis)})"
            if isinstance(body, Reduce):
                where = "" if body.condition is None else f" where {expr_str(body.condition)}"
                lines.append(f"{head} {_REDUCE_SYMBOL[body.combiner]} {expr_str(body.source)}{where}")
            else:
                lines.append(f"{head} = {expr_str(body)}")
        return "\n".join(lines)
    ax = op.scan_axis

    def names(ts):
        return "[" + ", ".join(t.name for t in ts) + "]"
    return (f"{op.name} = SCAN(axis={ax.var.name}, min={expr_str(ax.dom_min)}, "
            f"extent={expr_str(ax.dom_extent)}, init={names(op.init)}, "
            f"update={names(op.update)}, state={names(op.state_placeholder)})")


# ---------------------------------------------------------------------------
# FLOP estimation
# ---------------------------------------------------------------------------

def _kind(dtype: str) -> str:
    """TVM's ``DataType.code()`` of ``dtype`` as a word: "float", "bfloat", "int" or "uint"
    (``bool`` is ``UInt(1)`` in TVM, so "uint")."""
    if dtype == "bool" or dtype.startswith("uint"):
        return "uint"
    if dtype.startswith("bfloat"):
        return "bfloat"
    return "float" if is_float(dtype) else "int"


def _extent(e: Expr, bindings: dict | None, where: str) -> int:
    by_name = {k: v for k, v in (bindings or {}).items() if isinstance(k, str)}
    by_var = {id(k): v for k, v in (bindings or {}).items() if isinstance(k, Var)}
    mapping = {}
    for v in free_vars(e):
        value = by_var.get(id(v), by_name.get(v.name))
        if value is not None:
            mapping[v] = IntImm(int(value), v.dtype)
    value = const_value(substitute(e, mapping))
    if value is None:
        raise InvalidWorkloadError(
            f"{where}: extent {expr_str(e)} is symbolic; pass bindings={{name: int}}")
    return int(value)


def _product(extents, bindings: dict | None, where: str) -> float:
    out = 1.0
    for e in extents:
        out *= _extent(e, bindings, where)
    return out


class _FlopCounter:
    """Counts the flops of one output point of a compute whose type code (``_kind`` of its
    output dtype) is ``kind``, node by node as TVM's FlopEstimator (see ``flop_count``)."""

    def __init__(self, kind: str, bindings: dict | None, where: str):
        self.kind, self.bindings, self.where = kind, bindings, where

    def _counts(self, *dtypes: str) -> float:
        """1 when any of ``dtypes`` has the op's type code (TVM's ``base`` of a node)."""
        return 1.0 if any(_kind(d) == self.kind for d in dtypes) else 0.0

    def count(self, e: Expr) -> float:
        if isinstance(e, (IntImm, FloatImm, Var, TensorLoad)):
            return 0.0
        if isinstance(e, Cast):
            return self.count(e.value)
        if isinstance(e, BinaryOp) and e.op == "pow":  # tir.pow is a Call in TVM
            return self.count(e.a) + self.count(e.b)
        if isinstance(e, (BinaryOp, CmpOp, LogicalOp)):
            return self._counts(e.a.dtype, e.b.dtype) + self.count(e.a) + self.count(e.b)
        if isinstance(e, Not):
            return self._counts(e.dtype) + self.count(e.a)
        if isinstance(e, Select):  # tir.if_then_else, a Call: its arguments summed
            return self.count(e.cond) + self.count(e.true_value) + self.count(e.false_value)
        if isinstance(e, Call):
            return sum(self.count(a) for a in e.args)
        if isinstance(e, Reduce):
            iters = _product([iv.dom_extent for iv in e.axis], self.bindings, self.where)
            return iters * (self._counts(e.dtype) + self.count(e.source))
        raise InvalidWorkloadError(f"{self.where}: cannot count flops of {type(e).__name__}")
