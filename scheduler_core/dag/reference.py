"""Reference evaluator: computes any ComputeDAG with numpy, for correctness checks.

    input arrays --resolve_bindings (shape_binding)--> symbolic shape values
        --ops in topological order--> ComputeOp: vectorized over its index grid
                                      ScanOp: init, then one update step per time t
        --> output arrays (the DAG's non-placeholder arguments, in order)

Reading guide: :func:`evaluate` is the entry point.  :class:`_ExprEvaluator`
evaluates one expression over a grid of broadcasting index arrays (an open
grid, as ``np.ix_`` builds); a ``mask`` argument carries the grid points where
the expression is really evaluated, so that ``if_then_else`` and ``&&``/``||``
are lazy as in the compiled code: a load in an untaken branch may be out of
range, a load out of range on a taken path raises.  :class:`_DagEvaluator`
walks the ops; a reduction adds its reduce axes as extra grid dimensions and
reduces over them, in chunks over the outermost spatial axis (and, for very
long reductions, over the outermost reduce axis) so that no temporary holds
more than ``max_chunk_elements`` elements.  A product-sum reduction of two plain loads
(``sum(A[i, k] * B[k, j])``: matmul, batch matmul, dense) is one ``np.einsum`` instead, so the
check of a 1024^3 matmul takes tens of milliseconds, not seconds.

Semantics follow TVM's: integer ``floordiv``/``floormod`` round toward minus
infinity (Python's ``//`` and ``%``; an integer ``div`` node is treated as
``floordiv``); float ``div`` is true division; each node's result has the
node's dtype (float32 stays float32, integers wrap); float->int casts
truncate; ``round`` rounds half to even (``llvm.nearbyint``, as TVM); the
identity of a ``max`` reduction is the lowest finite value (``te.min_value``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

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
    is_float,
)
from scheduler_core.ir.expr_functor import children
from scheduler_core.ir.intrinsics import INTRINSIC_BY_NAME

from .compute_dag import ComputeDAG
from .shape_binding import as_dag, bind_shapes, input_arrays, resolve_bindings
from .tensor import ComputeOp, PlaceholderOp, ScanOp, Tensor

__all__ = ["evaluate", "evaluate_dict", "resolve_bindings", "MAX_CHUNK_ELEMENTS"]

MAX_CHUNK_ELEMENTS = 2 ** 22  # elements of the largest temporary grid of one chunk

_BINARY = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.true_divide,
    "floordiv": np.floor_divide, "floormod": np.mod, "min": np.minimum, "max": np.maximum,
    "pow": np.power,
}
_CMP = {
    "eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal,
    "gt": np.greater, "ge": np.greater_equal,
}
_REDUCE = {"sum": np.add, "prod": np.multiply, "max": np.maximum, "min": np.minimum}


def _identity(combiner: str, dtype: str):
    """The initial value of a reduction (TVM's: 0, 1, lowest, highest)."""
    if combiner == "sum":
        return np.zeros((), dtype)[()]
    if combiner == "prod":
        return np.ones((), dtype)[()]
    if dtype == "bool":
        return np.bool_(combiner == "min")
    info = np.finfo(dtype) if is_float(dtype) else np.iinfo(dtype)
    return np.array(info.min if combiner == "max" else info.max, dtype)[()]


def _and(mask, cond):
    """The grid points where both ``mask`` (None = everywhere) and ``cond`` hold."""
    return cond if mask is None else np.logical_and(mask, cond)


def _outputs_apart(op: ComputeOp) -> list:
    """One single-output compute per output of ``op`` (``op`` itself when it has one):
    the outputs of a multi-output compute are independent functions of the same indices."""
    if op.num_outputs == 1:
        return [op]
    return [ComputeOp(op.name, op.axis, b, op.attrs, op.tag) for b in op.bodies]


def _use_counts(e: Expr) -> dict:
    """How many parents each node of ``e`` has (shared sub-expressions count > 1)."""
    counts: dict[int, int] = {}
    stack = [e]
    while stack:
        node = stack.pop()
        counts[id(node)] = counts.get(id(node), 0) + 1
        if counts[id(node)] == 1:
            stack.extend(children(node))
    return counts


class _ExprEvaluator:
    """Evaluates expressions over one grid of broadcasting index arrays.

    ``values`` maps Tensor -> ndarray (the tensors computed so far), ``env`` maps
    Var -> ndarray (index arrays of the grid and symbolic shape values), ``where``
    names the op for error messages.  Shared sub-expressions are computed once.
    """

    def __init__(self, values: Mapping, env: Mapping, where: str, root: Expr | None = None):
        self.values = values
        self.env = env
        self.where = where
        self._shared = {k for k, n in _use_counts(root).items() if n > 1} if root is not None else set()
        self._memo: dict = {}

    def eval(self, e: Expr, mask=None) -> np.ndarray:
        """``e`` on the grid points of ``mask`` (None = all); elsewhere the value is arbitrary."""
        key = (id(e), id(mask))
        hit = self._memo.get(key)
        if hit is not None:
            return hit[0]
        method = getattr(self, "_" + type(e).__name__, None)
        if method is None:
            raise InvalidWorkloadError(f"{self.where}: cannot evaluate a {type(e).__name__} node")
        out = np.asarray(method(e, mask))
        if out.dtype != np.dtype(e.dtype):
            out = out.astype(e.dtype)
        if id(e) in self._shared:
            self._memo[key] = (out, mask)  # keeps ``mask`` alive so its id stays unique
        return out

    # -- leaves --------------------------------------------------------------
    def _IntImm(self, e: IntImm | FloatImm, mask):
        return np.array(e.value, e.dtype)

    _FloatImm = _IntImm

    def _Var(self, e: Var, mask):
        if e not in self.env:
            raise InvalidWorkloadError(f"{self.where}: variable {e.name} has no value "
                                       "(an unbound shape, or a loop variable of another op)")
        return self.env[e]

    # -- arithmetic ----------------------------------------------------------
    def _BinaryOp(self, e: BinaryOp, mask):
        if e.op not in _BINARY:
            raise InvalidWorkloadError(f"{self.where}: unknown binary op {e.op!r}")
        a, b = self.eval(e.a, mask), self.eval(e.b, mask)
        if is_float(e.dtype):
            return _BINARY[e.op](a, b)
        if e.op in ("div", "floordiv", "floormod"):
            b = self._safe_divisor(b, mask)
            return (np.mod if e.op == "floormod" else np.floor_divide)(a, b)
        if e.op == "pow":
            bad = b < 0
            if np.any(_and(mask, bad)):
                raise InvalidWorkloadError(f"{self.where}: integer power with a negative exponent")
            b = np.where(bad, 0, b).astype(b.dtype)
        return _BINARY[e.op](a, b)

    def _safe_divisor(self, b: np.ndarray, mask) -> np.ndarray:
        zero = b == 0
        if not zero.any():
            return b
        if np.any(_and(mask, zero)):
            raise InvalidWorkloadError(f"{self.where}: integer division by zero")
        return np.where(zero, 1, b).astype(b.dtype)

    def _CmpOp(self, e: CmpOp, mask):
        if e.op not in _CMP:
            raise InvalidWorkloadError(f"{self.where}: unknown comparison {e.op!r}")
        return _CMP[e.op](self.eval(e.a, mask), self.eval(e.b, mask))

    def _LogicalOp(self, e: LogicalOp, mask):
        a = self.eval(e.a, mask).astype(bool)
        if e.op == "and":
            return np.logical_and(a, self._lazy(e.b, _and(mask, a)))
        if e.op == "or":
            return np.logical_or(a, self._lazy(e.b, _and(mask, ~a)))
        raise InvalidWorkloadError(f"{self.where}: unknown logical op {e.op!r}")

    def _Not(self, e: Not, mask):
        return np.logical_not(self.eval(e.a, mask))

    def _Select(self, e: Select, mask):
        cond = self.eval(e.cond, mask).astype(bool)
        t = self._lazy(e.true_value, _and(mask, cond))
        f = self._lazy(e.false_value, _and(mask, ~cond))
        return np.where(cond, t, f)

    def _lazy(self, e: Expr, mask) -> np.ndarray:
        """``e`` where ``mask`` holds; a zero constant (no evaluation) where it never does."""
        if not np.any(mask):
            return np.zeros((), e.dtype)
        return self.eval(e, mask).astype(e.dtype, copy=False)

    def _Cast(self, e: Cast, mask):
        v = self.eval(e.value, mask)
        return v != 0 if e.dtype == "bool" else v.astype(e.dtype)

    def _Call(self, e: Call, mask):
        args = [self.eval(a, mask) for a in e.args]
        row = INTRINSIC_BY_NAME.get(e.name)
        if row is None or row.arity != len(args):
            raise InvalidWorkloadError(f"{self.where}: unknown intrinsic {e.name}/{len(args)}")
        return row.numpy(*args)

    def _Reduce(self, e: Reduce, mask):
        raise InvalidWorkloadError(f"{self.where}: a reduction must be the whole body of a compute")

    # -- loads ---------------------------------------------------------------
    def _TensorLoad(self, e: TensorLoad, mask):
        arr = self.values.get(e.tensor)
        if arr is None:
            raise InvalidWorkloadError(f"{self.where}: tensor {e.tensor.name} has no value")
        if len(e.indices) != arr.ndim:
            raise InvalidWorkloadError(f"{self.where}: {e.tensor.name} has {arr.ndim} "
                                       f"dimensions, indexed with {len(e.indices)}")
        idx = [self._checked_index(self.eval(ix, mask), n, d, e, mask)
               for d, (ix, n) in enumerate(zip(e.indices, arr.shape))]
        if arr.size == 0:  # every load is masked off (else _checked_index raised)
            return np.zeros(np.broadcast_shapes(*(i.shape for i in idx)), arr.dtype)
        return arr[tuple(idx)]

    def _checked_index(self, ix: np.ndarray, n: int, dim: int, e: TensorLoad, mask) -> np.ndarray:
        """``ix`` clipped into ``[0, n)``; raises if a point of ``mask`` is out of range."""
        if ix.size == 0 or (ix.min() >= 0 and ix.max() < n):
            return ix
        bad = np.logical_or(ix < 0, ix >= n)
        taken = _and(mask, bad)
        if np.any(taken):
            value = np.broadcast_to(ix, np.shape(taken))[taken].flat[0]
            raise InvalidWorkloadError(
                f"{self.where}: load of {e.tensor.name} out of range: index {dim} is {value}, "
                f"outside [0, {n})"
            )
        return np.clip(ix, 0, max(n - 1, 0))


class _DagEvaluator:
    """Evaluates the ops of a DAG in order; ``values`` maps Tensor -> ndarray."""

    def __init__(self, dag: ComputeDAG, scalars: dict, max_chunk_elements: int):
        self.dag = dag
        self.scalars = scalars  # Var -> 0-d ndarray: symbolic shapes, scan steps
        self.values: dict = {}
        self.max_chunk = max(1, int(max_chunk_elements))

    def run(self, arrays: Sequence[np.ndarray]) -> None:
        for t, arr in zip(self.dag.inputs, arrays):
            self.values[t] = arr
        bodies = {id(op): self._scan_body(op) for op in self.dag.ops if isinstance(op, ScanOp)}
        in_scan = {id(b) for body in bodies.values() for b in body}
        for op in self.dag.ops:
            if isinstance(op, PlaceholderOp) or id(op) in in_scan:
                continue
            if isinstance(op, ScanOp):
                self._eval_scan(op, bodies[id(op)])
            elif isinstance(op, ComputeOp):
                for k, one in enumerate(_outputs_apart(op)):
                    out = np.empty(self.shape(op.output(k)), one.dtype)
                    self._fill_compute(one, out)
                    self.values[op.output(k)] = out
            else:
                raise InvalidWorkloadError(f"cannot evaluate operation {type(op).__name__}")

    # -- queries -------------------------------------------------------------
    def int_value(self, e: Any, where: str = "shape") -> int:
        """A scalar integer expression (a shape, an extent) under the bound shape vars."""
        if isinstance(e, (int, np.integer)):
            return int(e)
        return int(_ExprEvaluator({}, self.scalars, where).eval(e))

    def shape(self, t: Tensor) -> tuple:
        return tuple(self.int_value(s, t.name) for s in t.shape)

    def _ranges(self, axes: Sequence, where: str) -> list:  # (min, extent) of each IterVar
        return [(self.int_value(iv.dom_min, where), self.int_value(iv.dom_extent, where))
                for iv in axes]

    def _scan_body(self, scan: ScanOp) -> list:
        """The ComputeOps that read a state of ``scan`` (directly or not), in topological order."""
        dep = {id(s.op) for s in scan.state_placeholder}
        body = []
        for op in self.dag.ops:
            if isinstance(op, ComputeOp) and any(id(t.op) in dep for t in op.input_tensors()):
                dep.add(id(op))
                body.append(op)
        return body

    # -- compute ops ---------------------------------------------------------
    def _fill_compute(self, op: ComputeOp, out: np.ndarray, rows: tuple | None = None) -> None:
        """Write ``op`` into ``out`` for the axis-0 positions ``rows = (lo, hi)`` (default all)."""
        spatial = self._ranges(op.axis, op.name)
        reduce = self._ranges(op.reduce_axis, op.name)
        if not spatial:
            out[...] = self._reduce_chunks(op, [], reduce)
            return
        lo, hi = rows if rows is not None else (0, spatial[0][1])
        if lo < 0 or hi > spatial[0][1]:
            raise InvalidWorkloadError(f"{op.name}: axis 0 has extent {spatial[0][1]}, "
                                       f"positions [{lo}, {hi}) requested")
        mn0 = spatial[0][0]
        fast = self._product_sum(op, [(mn0 + lo, mn0 + hi)] + [(mn, mn + n) for mn, n in spatial[1:]],
                                 [(mn, mn + n) for mn, n in reduce])
        if fast is not None:
            out[lo:hi] = fast
            return
        row_elems = math.prod(n for _, n in spatial[1:]) * math.prod(n for _, n in reduce)
        step = max(1, self.max_chunk // max(row_elems, 1))
        for start in range(lo, hi, step):
            stop = min(hi, start + step)
            spans = [(mn0 + start, mn0 + stop)] + [(mn, mn + n) for mn, n in spatial[1:]]
            out[start:stop] = self._reduce_chunks(op, spans, reduce)

    def _product_sum(self, op: ComputeOp, spans: list, red_spans: list) -> np.ndarray | None:
        """``sum(A[...] * B[...])`` as one ``np.einsum`` (BLAS for a matmul), or None when ``op``
        is not that form: a float sum with no condition whose source multiplies two loads of
        same-dtype tensors, each index one distinct axis variable, each reduce axis used, every
        slice inside its tensor (an out-of-range read takes the general path, which raises)."""
        body = op.body
        if not (isinstance(body, Reduce) and body.combiner == "sum" and body.condition is None
                and is_float(body.dtype) and isinstance(body.source, BinaryOp) and body.source.op == "mul"):
            return None
        loads = (body.source.a, body.source.b)
        axes = list(op.axis) + list(op.reduce_axis)
        span_of = {id(iv.var): span for iv, span in zip(axes, spans + red_spans)}
        letter = {id(iv.var): chr(ord("a") + k) for k, iv in enumerate(axes)}
        if len(axes) > 26:
            return None
        operands, subscripts, used = [], [], set()
        for ld in loads:
            if not isinstance(ld, TensorLoad) or ld.tensor not in self.values:
                return None
            arr = self.values[ld.tensor]
            if str(arr.dtype) != body.dtype or len(ld.indices) != arr.ndim:
                return None
            names = [id(ix) for ix in ld.indices]
            if len(set(names)) != len(names) or any(n not in span_of for n in names):
                return None
            view = []
            for n, dim in zip(names, arr.shape):
                a, b = span_of[n]
                if a < 0 or b > dim:
                    return None
                view.append(slice(a, b))
            operands.append(arr[tuple(view)])
            subscripts.append("".join(letter[n] for n in names))
            used.update(names)
        if any(id(iv.var) not in used for iv in op.reduce_axis):
            return None
        out_subs = "".join(letter[id(iv.var)] for iv in op.axis if id(iv.var) in used)
        res = np.einsum(f"{subscripts[0]},{subscripts[1]}->{out_subs}", *operands, optimize=True)
        shape = tuple(b - a for a, b in spans)
        keep = [k for k, iv in enumerate(op.axis) if id(iv.var) in used]
        res = res.reshape([shape[k] if k in keep else 1 for k in range(len(shape))])
        return np.broadcast_to(res, shape).astype(body.dtype, copy=False)

    def _reduce_chunks(self, op: ComputeOp, spans: list, reduce: list) -> np.ndarray:
        """``op`` on the spatial block ``spans``; a long reduction is split on its first axis."""
        red_spans = [(mn, mn + n) for mn, n in reduce]
        if not reduce or not isinstance(op.body, Reduce):
            return self._eval_block(op, spans, red_spans)
        block = math.prod(b - a for a, b in spans) * math.prod(n for _, n in reduce[1:])
        step = max(1, self.max_chunk // max(block, 1))
        mn, n = reduce[0]
        if step >= n:
            return self._eval_block(op, spans, red_spans)
        combine = _REDUCE[op.body.combiner]
        acc = None
        for start in range(mn, mn + n, step):
            part = self._eval_block(op, spans, [(start, min(mn + n, start + step))] + red_spans[1:])
            acc = part if acc is None else combine(acc, part)
        assert acc is not None  # step < n: at least one chunk
        return acc

    def _eval_block(self, op: ComputeOp, spans: list, red_spans: list) -> np.ndarray:
        """``op`` over the grid ``spans`` x ``red_spans`` (half-open ranges of axis values)."""
        axes = list(op.axis) + list(op.reduce_axis)
        ranges = spans + red_spans
        env = dict(self.scalars)
        for k, (iv, (a, b)) in enumerate(zip(axes, ranges)):
            shape = [1] * len(ranges)
            shape[k] = b - a
            env[iv.var] = np.arange(a, b, dtype=iv.var.dtype).reshape(shape)
        ev = _ExprEvaluator(self.values, env, op.name, op.body)
        body = op.body
        if not isinstance(body, Reduce):
            return ev.eval(body)
        full = tuple(b - a for a, b in ranges)
        cond = None if body.condition is None else ev.eval(body.condition).astype(bool)
        src = np.broadcast_to(ev.eval(body.source, cond), full)
        kwargs = {"axis": tuple(range(len(spans), len(ranges))), "dtype": body.dtype,
                  "initial": _identity(body.combiner, body.dtype)}
        if cond is not None:
            kwargs["where"] = np.broadcast_to(cond, full)
        return _REDUCE[body.combiner].reduce(src, **kwargs)

    # -- scan ops ------------------------------------------------------------
    def _eval_scan(self, scan: ScanOp, body: list) -> None:
        """Seed 001's recurrence: ``init`` for the first steps, then ``update`` step by step.

        At step ``t`` every body op (each op between a state placeholder and an
        update) is evaluated at its axis-0 position ``t`` only, reading the states'
        values of steps ``< t``; then step ``t`` of each update becomes step ``t``
        of its output.
        """
        outs = [self._scan_init(scan, k) for k in range(scan.num_outputs)]
        init_lens = {self.values[t].shape[0] for t in scan.init}
        if len(init_lens) != 1:
            raise InvalidWorkloadError(f"{scan.name}: the inits differ in length {sorted(init_lens)}")
        for state, out in zip(scan.state_placeholder, outs):
            self.values[state] = out
        for op in body:
            for k, one in enumerate(_outputs_apart(op)):
                self.values[op.output(k)] = np.zeros(self.shape(op.output(k)), one.dtype)
        for t in range(init_lens.pop(), outs[0].shape[0]):
            self.scalars[scan.scan_axis.var] = np.array(t, scan.scan_axis.var.dtype)
            for op in body:
                p = t - self.int_value(op.axis[0].dom_min, op.name) if op.axis else 0
                for k, one in enumerate(_outputs_apart(op)):
                    self._fill_compute(one, self.values[op.output(k)], (p, p + 1))
            for upd, out in zip(scan.update, outs):
                out[t] = self.values[upd][t]
        for k, out in enumerate(outs):
            self.values[scan.output(k)] = out
        self.scalars.pop(scan.scan_axis.var, None)

    def _scan_init(self, scan: ScanOp, k: int) -> np.ndarray:
        """Output ``k`` of ``scan`` with its first ``init_len`` steps filled from ``init[k]``."""
        upd = scan.update[k]
        shape = self.shape(upd)
        init = self.values[scan.init[k]]
        if not shape or init.shape[1:] != shape[1:] or init.shape[0] > shape[0]:
            raise InvalidWorkloadError(
                f"{scan.name}: init[{k}] has shape {init.shape}, update[{k}] has shape {shape}"
            )
        out = np.zeros(shape, upd.dtype)
        out[: init.shape[0]] = init
        return out


# ---------------------------------------------------------------------------
# Entry points
# ---------------------------------------------------------------------------

def _run(dag: Any, inputs: Any, bindings: Mapping | None, max_chunk_elements: int):
    dag = as_dag(dag)
    arrays = input_arrays(dag, inputs)
    values = bind_shapes(dag, arrays, bindings)
    ev = _DagEvaluator(dag, {v: np.array(n, v.dtype) for v, n in values.items()}, max_chunk_elements)
    with np.errstate(all="ignore"):  # inf/nan as the compiled code gives them
        ev.run(arrays)
    return dag, ev.values


def evaluate(dag: Any, inputs: Any, bindings: Mapping | None = None, *,
             max_chunk_elements: int = MAX_CHUNK_ELEMENTS) -> list:
    """Compute the outputs of ``dag`` with numpy: the reference for correctness checks.

    Parameters
    ----------
    dag : ComputeDAG, or the list of tensors to build one from
    inputs : list of numpy arrays, one per placeholder argument in ``dag.tensors``
        order, or a dict ``{Tensor or tensor name: array}``.  Dtypes must match the
        placeholders' exactly; shapes must match after binding symbolic variables.
    bindings : ``{Var or var name: int}``, optional
        Values of symbolic shape variables that cannot be read off the inputs'
        shapes (see :func:`resolve_bindings`).
    max_chunk_elements : int
        The largest number of grid points (spatial x reduce) evaluated at once.

    Returns
    -------
    list of numpy.ndarray
        The output tensors (the non-placeholder entries of ``dag.tensors``) in
        order, each with its tensor's shape and dtype.

    Raises
    ------
    InvalidWorkloadError
        Bad inputs or bindings (see :func:`resolve_bindings`); a load out of range
        or an integer division by zero on a taken path (an untaken
        ``if_then_else`` branch may do either); an expression the evaluator
        does not know.
    """
    dag, values = _run(dag, inputs, bindings, max_chunk_elements)
    return [values[t] for t in dag.outputs]


def evaluate_dict(dag: Any, inputs: Any, bindings: Mapping | None = None, *,
                  max_chunk_elements: int = MAX_CHUNK_ELEMENTS) -> dict:
    """Like :func:`evaluate`, as ``{output tensor name: array}``.

    Raises InvalidWorkloadError as :func:`evaluate` does, and when two outputs share a name.
    """
    names = [t.name for t in as_dag(dag).outputs]
    if len(set(names)) != len(names):
        raise InvalidWorkloadError(f"outputs share a name {names}; use evaluate() instead")
    dag, values = _run(dag, inputs, bindings, max_chunk_elements)
    return {t.name: values[t] for t in dag.outputs}
