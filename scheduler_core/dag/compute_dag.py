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
from collections.abc import Sequence
from functools import cached_property

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
from .tensor import ComputeOp, PlaceholderOp, Tensor, dag_ops

_REDUCE_SYMBOL = {"sum": "+=", "max": "max=", "min": "min=", "prod": "*="}


class ComputeDAG:
    """The ops of a workload in topological order.

    Parameters
    ----------
    tensors : list of Tensor
        The workload's arguments in call order: placeholders and outputs.

    Raises
    ------
    InvalidWorkloadError
        On an empty list, non-tensors, or a cycle.
    """

    def __init__(self, tensors: Sequence[Tensor]):
        self.tensors: tuple = tuple(tensors)
        self.ops: tuple = dag_ops(self.tensors)

    @property
    def outputs(self) -> tuple:
        """The argument tensors that are computed (not placeholders)."""
        return tuple(t for t in self.tensors if not isinstance(t.op, PlaceholderOp))

    @property
    def inputs(self) -> tuple:
        return tuple(t for t in self.tensors if isinstance(t.op, PlaceholderOp))

    # -- text ----------------------------------------------------------------
    def __str__(self) -> str:
        """Ansor's "Computational DAG" print: one line per op in ``ops`` order, e.g.
        ``A = PLACEHOLDER [1024, 1024]`` and ``matmul(i, j) += (A[i, k]*B[k, j])``."""
        return "\n".join(_op_line(op) for op in self.ops) + "\n"

    def __repr__(self) -> str:
        return f"ComputeDAG({', '.join(t.name for t in self.tensors)})"

    # -- FLOP count ------------------------------------------------------------
    def flop_count(self, bindings: dict | None = None) -> float:
        """Floating-point operations of one run of the whole DAG (Ansor's FlopEstimator).

        Per output point of each ComputeOp: 1 per arithmetic node (add, sub, mul,
        div, mod, min, max, pow), comparison, logical op, ``if_then_else`` (plus its
        condition and its costlier branch) and intrinsic call whose operands are
        floating point (or, for an integer-valued op, of its integer kind); index
        expressions inside tensor reads, casts, loads and constants count 0.  A
        reduction counts its combiner plus its source, times the product of its
        reduce extents.  An op with an integer ``attrs["FLOP"]`` counts that
        instead.  Placeholders and scans (whose init/update are ops of their own)
        count 0.  E.g. matmul+bias N x L x M gives 2*N*M*L + N*M.

        bindings: ``{var name or Var: int}`` for symbolic shape variables.
        Raises InvalidWorkloadError when an extent stays symbolic.
        """
        total = 0.0
        for op in self.ops:
            if not isinstance(op, ComputeOp):
                continue
            if isinstance(op.attrs.get("FLOP"), int) and not isinstance(op.attrs["FLOP"], bool):
                total += float(op.attrs["FLOP"])
                continue
            points = _product(op.shape, bindings, op.name)
            total += points * _FlopCounter(_kind(op.dtype), bindings, op.name).count(op.body)
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


# ---------------------------------------------------------------------------
# Printing
# ---------------------------------------------------------------------------

def _op_line(op) -> str:
    if isinstance(op, PlaceholderOp):
        return f"{op.name} = PLACEHOLDER [{', '.join(expr_str(s) for s in op.shape)}]"
    if isinstance(op, ComputeOp):
        head = f"{op.name}({', '.join(iv.var.name for iv in op.axis)})"
        body = op.body
        if isinstance(body, Reduce):
            where = "" if body.condition is None else f" where {expr_str(body.condition)}"
            return f"{head} {_REDUCE_SYMBOL[body.combiner]} {expr_str(body.source)}{where}"
        return f"{head} = {expr_str(body)}"
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
    return "float" if is_float(dtype) else ("bool" if dtype == "bool" else "int")


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
    """Counts the flops of one output point of a compute whose value kind is ``kind``."""

    def __init__(self, kind: str, bindings: dict | None, where: str):
        self.kind, self.bindings, self.where = kind, bindings, where

    def _counts(self, dtype: str) -> float:
        return 1.0 if is_float(dtype) or _kind(dtype) == self.kind else 0.0

    def count(self, e: Expr) -> float:
        if isinstance(e, (IntImm, FloatImm, Var, TensorLoad)):
            return 0.0
        if isinstance(e, Cast):
            return self.count(e.value)
        if isinstance(e, (BinaryOp, CmpOp, LogicalOp)):
            return self._counts(e.a.dtype) + self.count(e.a) + self.count(e.b)
        if isinstance(e, Not):
            return self._counts(e.a.dtype) + self.count(e.a)
        if isinstance(e, Select):
            branches = max(self.count(e.true_value), self.count(e.false_value))
            return self._counts(e.dtype) + self.count(e.cond) + branches
        if isinstance(e, Call):
            return self._counts(e.dtype) + sum(self.count(a) for a in e.args)
        if isinstance(e, Reduce):
            iters = _product([iv.dom_extent for iv in e.axis], self.bindings, self.where)
            return iters * (self._counts(e.dtype) + self.count(e.source))
        raise InvalidWorkloadError(f"{self.where}: cannot count flops of {type(e).__name__}")
