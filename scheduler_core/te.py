"""The tensor-expression language, spelled as TVM's ``tvm.te`` (seeds 000-004).

    from scheduler_core import te
    A = te.placeholder((n, m), name="A")
    k = te.reduce_axis((0, m), name="k")
    B = te.compute((n,), lambda i: te.sum(A[i, k], axis=k), name="B")
"""

from __future__ import annotations

import inspect
import itertools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from scheduler_core.base.errors import InvalidWorkloadError
from scheduler_core.dag.tensor import (
    ComputeOp,
    PlaceholderOp,
    ScanOp,
    Tensor,
    make_iter_var,
)
from scheduler_core.ir.expr import (
    DTYPES,
    Expr,
    FloatImm,
    IntImm,
    IterVar,
    LogicalOp,
    Reduce,
    Var,
    as_expr,
    binary,
    call,
    cast,
    const,
    is_float,
    select,
)
from scheduler_core.ir.expr_functor import walk
from scheduler_core.ir.intrinsics import INTRINSIC_TABLE, Intrinsic
from scheduler_core.ir.simplify import simplify
from scheduler_core.schedule.schedule_api import Schedule

__all__ = [
    "var", "size_var", "const", "placeholder", "compute", "reduce_axis", "sum", "max", "min",
    "prod", "if_then_else", "select", "floordiv", "floormod", "truncdiv", "min_value",
    "max_value", "abs", "pow", "all", "any", "scan", "create_schedule", "thread_axis",
    "const_matrix", "Tensor", "IterVar", "Var", "Expr",
]

_counter = itertools.count()


def var(name: str = "v", dtype: str = "int32") -> Var:
    """A symbolic scalar (e.g. a shape ``n``); dtype defaults to int32."""
    return Var(name, dtype)


size_var = var


def _shape(shape: Any) -> tuple:
    if isinstance(shape, (int, Expr, IterVar, np.integer)):
        shape = (shape,)
    out = []
    for k, s in enumerate(shape):
        e = as_expr(int(s) if isinstance(s, np.integer) else s)
        if is_float(e.dtype) or e.dtype == "bool":
            raise InvalidWorkloadError(f"shape[{k}] has dtype {e.dtype}; shapes must be integers")
        if isinstance(e, IntImm) and e.value < 0:
            raise InvalidWorkloadError(f"shape[{k}] is negative ({e.value})")
        out.append(e)
    return tuple(out)


def placeholder(shape: Any, dtype: str = "float32", name: str = "placeholder") -> Tensor:
    """An input tensor of ``shape`` (ints or ``te.var``) and ``dtype``."""
    if dtype not in DTYPES:
        raise InvalidWorkloadError(f"unknown dtype {dtype!r}")
    return PlaceholderOp(name, _shape(shape), dtype).output(0)


def _arg_names(fcompute: Callable, n: int) -> list:
    try:
        params = list(inspect.signature(fcompute).parameters.values())
    except (TypeError, ValueError):
        params = []
    if params and params[0].kind == inspect.Parameter.VAR_POSITIONAL:
        return [f"i{k}" for k in range(n)]
    names = [p.name for p in params][:n]
    if len(names) != n:
        raise InvalidWorkloadError(
            f"fcompute takes {len(params)} index arguments but the shape has {n} dimensions"
        )
    return names


def compute(shape: Any, fcompute: Callable, name: str = "compute", tag: str = "",
            attrs: dict | None = None) -> Any:
    """``out[i...] = fcompute(i...)`` over ``shape``; ``fcompute`` may return a reduction.

    attrs: e.g. ``{"layout_free_placeholders": [B]}`` (seed 000).

    When ``fcompute`` returns a tuple or list of n >= 2 expressions, the result is a list
    of n tensors, the outputs of one multi-output op (TVM's ``te.compute``:
    ``A, B = te.compute((n,), lambda i: (x[i] + 1, x[i] * 2), name="T")``; ``A.op is
    B.op``, ``A == A.op.output(0)``; the tensors are named ``T.v0``, ``T.v1``).  The outputs
    share the shape and loop nest and are scheduled as one stage; either none is a
    reduction or all are, over the same ``te.reduce_axis`` objects with the same
    combiner and ``where=`` (sources free).  A one-element tuple gives one tensor.

    Raises InvalidWorkloadError for an empty tuple, a reduction nested inside a body, or
    multi-output bodies that break the rules above.
    """
    shp = _shape(shape)
    names = _arg_names(fcompute, len(shp))
    axis = tuple(make_iter_var(nm, ext) for nm, ext in zip(names, shp))
    body = fcompute(*[iv.var for iv in axis])
    bodies = tuple(body) if isinstance(body, (list, tuple)) else (body,)
    if not bodies:
        raise InvalidWorkloadError(f"compute {name}: fcompute returned no expression")
    bodies = tuple(as_expr(b) for b in bodies)
    for k, b in enumerate(bodies):
        if isinstance(b, Reduce) is False:
            for n in walk(b):
                if isinstance(n, Reduce):
                    where = "" if len(bodies) == 1 else f" of output {k}"
                    raise InvalidWorkloadError(
                        f"compute {name}: a reduction must be the whole body{where}, not nested inside it"
                    )
    op = ComputeOp(name, axis, bodies[0], dict(attrs or {}), tag, bodies[1:])
    if len(bodies) == 1:
        return op.output(0)
    return [op.output(k) for k in range(len(bodies))]


def const_matrix(matrix: Any, name: str = "const_matrix", attrs: dict | None = None) -> Tensor:
    """A constant 2-D tensor as a compute, TVM's ``topi.utils.const_matrix``.

    ``matrix``: a 2-D array-like of numbers (a numpy array keeps its dtype; anything else
    becomes float32).  Returns a Tensor of ``matrix``'s shape whose body picks the entry by
    index through nested ``select``s (``i == ii and j == jj``; zero entries fall through to
    the innermost 0), so it reads no tensor: the access analysis finds it strictly
    inlineable, and once its consumer's constant-tensor loops are unrolled (the sketch
    rule for ``auto_scheduler_simplify_const_tensor_indices``) every select folds to a
    constant.  ``attrs`` default ``{"const_matrix": True}`` as TVM's.  Raises
    InvalidWorkloadError for a matrix that is not 2-D, is empty, or has a dtype the
    language lacks.  Used by Winograd convolution (Lavin & Gray, "Fast Algorithms for
    Convolutional Neural Networks", 2016) for its transform matrices A, B, G.
    """
    arr = np.asarray(matrix)
    if arr.ndim != 2 or arr.size == 0:
        raise InvalidWorkloadError(f"const_matrix {name}: needs a non-empty 2-D matrix, "
                                   f"got shape {arr.shape}")
    dtype = str(arr.dtype) if isinstance(matrix, np.ndarray) else "float32"
    if dtype not in DTYPES:
        raise InvalidWorkloadError(f"const_matrix {name}: unknown dtype {dtype!r}")
    rows, cols = arr.shape

    def select_entry(i: Any, j: Any) -> Expr:
        now = const(0, dtype)
        for ii in range(rows):
            for jj in range(cols):
                if arr[ii, jj] != 0:
                    now = select(all(i == ii, j == jj), const(arr[ii, jj].item(), dtype), now)
        return now

    return compute((rows, cols), select_entry, name=name,
                   attrs={"const_matrix": True} if attrs is None else attrs)


def reduce_axis(dom: Any, name: str = "rv") -> IterVar:
    """A reduction axis over ``dom = (min, max)`` (max exclusive)."""
    lo, hi = dom
    lo_e, hi_e = as_expr(lo), as_expr(hi)
    return IterVar(Var(name, "int32"), lo_e, simplify(hi_e - lo_e), "reduce")


def thread_axis(tag: str = "", name: str = "") -> IterVar:
    """A GPU thread axis such as ``"blockIdx.x"`` or ``"threadIdx.x"`` (for ``bind``)."""
    return IterVar(Var(tag or name, "int32"), IntImm(0), IntImm(0), "thread")


def _reducer(combiner: str):
    def reducer(expr: Any, axis: Any = None, where: Any = None, init: Any = None, *rest):
        # te.max(a, b) / te.min(a, b) with two expressions is an elementwise op (as TVM).
        if axis is not None and not isinstance(axis, (IterVar, list, tuple)):
            if combiner in ("max", "min"):
                return binary(combiner, expr, axis)
            raise InvalidWorkloadError(f"te.{combiner}: axis must be a reduce_axis")
        if axis is None:
            raise InvalidWorkloadError(f"te.{combiner} needs axis=")
        axes = tuple(axis) if isinstance(axis, (list, tuple)) else (axis,)
        for a in axes:
            if not isinstance(a, IterVar) or a.kind != "reduce":
                raise InvalidWorkloadError(f"te.{combiner}: {a!r} is not a reduce_axis")
        src = as_expr(expr)
        cond = None if where is None else as_expr(where)
        if init is not None:
            raise InvalidWorkloadError(f"te.{combiner}: init= is not supported")
        return Reduce(combiner, src, axes, cond, src.dtype)

    reducer.__name__ = combiner
    reducer.__doc__ = f"``{combiner}`` reduction of ``expr`` over ``axis`` where ``where`` holds."
    return reducer


sum = _reducer("sum")  # noqa: A001 - TVM's spelling
max = _reducer("max")  # noqa: A001
min = _reducer("min")  # noqa: A001
prod = _reducer("prod")


def if_then_else(cond: Any, t: Any, f: Any) -> Expr:
    """``t`` where ``cond`` holds else ``f``; only the taken branch is evaluated."""
    return select(cond, t, f)


def all(*conds: Any) -> Expr:  # noqa: A001
    out = as_expr(conds[0])
    for c in conds[1:]:
        out = LogicalOp("and", out, as_expr(c))
    return out


def any(*conds: Any) -> Expr:  # noqa: A001
    out = as_expr(conds[0])
    for c in conds[1:]:
        out = LogicalOp("or", out, as_expr(c))
    return out


def floordiv(a: Any, b: Any) -> Expr:
    return binary("floordiv", a, b)


def floormod(a: Any, b: Any) -> Expr:
    return binary("floormod", a, b)


truncdiv = floordiv  # indices here are non-negative, where the two agree


def min_value(dtype: str) -> Expr:
    """The lowest finite value of ``dtype`` (``-inf`` is not used, as in TVM)."""
    if is_float(dtype):
        return FloatImm(float(np.finfo(dtype).min), dtype)
    return IntImm(int(np.iinfo(dtype).min), dtype)


def max_value(dtype: str) -> Expr:
    if is_float(dtype):
        return FloatImm(float(np.finfo(dtype).max), dtype)
    return IntImm(int(np.iinfo(dtype).max), dtype)


def _intrinsic_function(row: Intrinsic) -> Callable[..., Expr]:
    def f(*args: Any) -> Expr:
        return call(row.name, *args)
    f.__name__ = f.__qualname__ = row.name
    f.__doc__ = (f"Elementwise ``{row.name}`` of {row.arity} argument(s): {row.doc} (float; "
                 "integer inputs are cast to float32).  Raises InvalidWorkloadError for a wrong "
                 "number of arguments.")
    return f


# te.exp, te.atan2, ...: one function per row of ir/intrinsics.py (PEP 562 module attributes).
INTRINSIC_FUNCTIONS: dict[str, Callable[..., Expr]] = {
    row.name: _intrinsic_function(row) for row in INTRINSIC_TABLE if row.te_function}
__all__ += list(INTRINSIC_FUNCTIONS)


def __getattr__(name: str) -> Callable[..., Expr]:
    """``te.<intrinsic>`` for the rows of ir/intrinsics.py (``te.exp``, ``te.atan2``, ...)."""
    fn = INTRINSIC_FUNCTIONS.get(name)
    if fn is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return fn


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(INTRINSIC_FUNCTIONS))


def abs(x: Any) -> Expr:  # noqa: A001
    e = as_expr(x)
    return call("fabs", e) if is_float(e.dtype) else select(e < 0, -e, e)


def pow(x: Any, y: Any) -> Expr:  # noqa: A001
    return binary("pow", cast("float32", x) if not is_float(as_expr(x).dtype) else x, y)


def scan(init: Any, update: Any, state_placeholder: Any, inputs: Sequence[Tensor] | None = None,
         name: str = "scan", tag: str = "") -> Any:
    """A recurrence over the first axis (seed 001).

    init/update/state_placeholder are tensors or equal-length lists of tensors.
    ``update[k][t, ...]`` may read ``state_placeholder[k]`` only at steps ``< t``.
    Returns one tensor, or a list of tensors for several states.
    """
    multi = isinstance(init, (list, tuple))
    inits = tuple(init) if multi else (init,)
    updates = tuple(update) if isinstance(update, (list, tuple)) else (update,)
    states = tuple(state_placeholder) if isinstance(state_placeholder, (list, tuple)) else (state_placeholder,)
    if not (len(inits) == len(updates) == len(states)):
        raise InvalidWorkloadError("scan: init, update and state_placeholder differ in length")
    for k, (i, u, s) in enumerate(zip(inits, updates, states)):
        if not isinstance(s.op, PlaceholderOp):
            raise InvalidWorkloadError(f"scan: state_placeholder[{k}] is not a placeholder")
        if len(i.shape) != len(u.shape) or len(u.shape) != len(s.shape):
            raise InvalidWorkloadError(f"scan: init/update/state [{k}] differ in rank")
    init_len = inits[0].shape[0]
    time = updates[0].shape[0]
    axis = IterVar(Var(f"{name}.idx", "int32"), init_len, time, "scan")
    axis = IterVar(axis.var, init_len, simplify(as_expr(time) - init_len), "scan")
    op = ScanOp(name, axis, inits, updates, states, tuple(inputs or ()))
    outs = [op.output(k) for k in range(len(updates))]
    return outs if multi else outs[0]


def create_schedule(ops: Any):
    """A schedule for the ops that produce ``ops`` (an op, a tensor or a list)."""
    return Schedule.create(ops)
