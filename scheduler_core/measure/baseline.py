"""Speed baselines: the fastest formulation of a ComputeDAG a user would otherwise call.

    numpy_program(dag)      -> BaselineProgram   numpy: BLAS through ``np.einsum(optimize=True)``
                                                  (``A @ B``), im2col + BLAS for windowed product
                                                  sums (convolutions), ufuncs on strided views
    torch_program(dag)      -> BaselineProgram   the same in PyTorch, with ``torch.addmm`` for a
                                                  matmul plus a matrix and ``F.conv2d`` for an NCHW
                                                  convolution; None when torch is not installed

The reference evaluator (``dag.reference``) is the correctness oracle; it builds index grids
for any DAG and is never a speed baseline.  A baseline here is what a user would write by hand:
each op of the DAG becomes one library call on views of its operands.  Every load whose
indices are affine in the op's loop variables (``A[i, k]``, ``pad[b, rc, y*2 + ry, x*2 + rx]``)
is a strided view of the operand (``as_strided``: no copy), so

- a sum of the product of two such loads is one ``einsum`` (numpy's ``optimize=True`` turns it
  into ``tensordot``: a copy of the window into columns, im2col, then one BLAS GEMM);
- an elementwise op is ufuncs on broadcast views;
- another reduction (max, a sum of an expression) reduces the broadcast expression;
- a zero-padding op (``if_then_else(bounds, X[y - 1, x - 1], 0)``) is a slice copy into zeros.

An op of another form (a gather, a scan, a condition that is not a box) has no formulation
here: ``numpy_program`` raises :class:`NoBaselineError` naming it, and the caller says so
instead of comparing with something slower.  The libraries' operations: ``baseline_libs.py``;
timing a tuned program beside its baselines: ``baseline_timing.py``.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from scheduler_core.arith.linear_form import linear_form
from scheduler_core.dag.compute_dag import ComputeDAG
from scheduler_core.dag.tensor import ComputeOp, PlaceholderOp, Tensor
from scheduler_core.ir.expr import (
    BinaryOp,
    Call,
    Cast,
    CmpOp,
    Expr,
    FloatImm,
    IntImm,
    LogicalOp,
    Reduce,
    Select,
    TensorLoad,
    Var,
)
from scheduler_core.ir.simplify import const_value

from .baseline_libs import NumpyLib, torch_lib

__all__ = ["BaselineProgram", "NoBaselineError", "numpy_program", "torch_program", "compact_formula",
           "MAX_GRID_ELEMENTS"]

MAX_GRID_ELEMENTS = 1 << 27  # the largest broadcast grid of a non-product reduction (elements)


class NoBaselineError(ValueError):
    """The DAG has an op that no library call here formulates (the message names it)."""


@dataclasses.dataclass
class BaselineProgram:
    """A baseline of a DAG: ``run(inputs) -> outputs`` (arrays of the DAG's placeholders in order;
    the DAG's output tensors in order), its ``text`` (one ``name = formula`` per op, as a user
    would write it) and its ``library`` (``"numpy"`` or ``"torch"``)."""

    library: str
    text: str
    run: Callable[[Sequence[Any]], list]
    convert: Callable[[np.ndarray], Any]  # a numpy input as the library's array

    @property
    def summary(self) -> str:
        """The formulas in one line (``matmul = A @ B; out = matmul + C``)."""
        return "; ".join(self.text.splitlines())

    @property
    def formula(self) -> str:
        """The formulas with each value used once inlined (``out = (A @ B) + C``)."""
        return compact_formula(self.text)


def compact_formula(text: str) -> str:
    """``name = formula`` lines with every name used exactly once later (and not through a view,
    ``pad[window]``) substituted there, in parentheses; the lines left, joined by ``; ``."""
    lines = [ln.split(" = ", 1) for ln in text.splitlines() if " = " in ln]
    k = 0
    while k < len(lines):
        name, formula = lines[k]
        word = re.compile(rf"(?<![\w.]){re.escape(name)}(?![\w(\[])")  # not a view: pad[window]
        users = [j for j in range(k + 1, len(lines)) if word.search(lines[j][1])]
        if len(users) == 1 and len(word.findall(lines[users[0]][1])) == 1:
            j = users[0]
            inlined = f"({formula})"
            lines[j][1] = word.sub(lambda _m: inlined, lines[j][1])  # noqa: B023 - used at once
            del lines[k]
            continue
        k += 1
    return "; ".join(f"{n} = {f}" for n, f in lines)


def _unwrap(text: str) -> str:
    """``text`` without one pair of parentheses around all of it."""
    if not (text.startswith("(") and text.endswith(")")):
        return text
    depth = 0
    for k, ch in enumerate(text):
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if depth == 0 and k < len(text) - 1:
            return text
    return text[1:-1]


# -- loads as strided views -----------------------------------------------------------
def _affine(e: Expr, variables: dict) -> tuple[dict, int] | None:
    """``({var id: coef}, const)`` of an integer index affine in ``variables`` (id -> Var), or None."""
    terms, c = linear_form(e)
    coefs: dict = {}
    for atom, coef in terms.values():
        if not isinstance(atom, Var) or id(atom) not in variables:
            return None
        coefs[id(atom)] = coefs.get(id(atom), 0) + coef
    return coefs, int(c)


@dataclasses.dataclass
class _Load:
    """A load as a strided view: one view axis per loop variable it uses (``used``, in loop order)."""

    tensor: Tensor
    used: list          # var ids, in the op's loop order
    strides: list       # element strides of the operand per used var
    offset: int         # element offset of the first element


def _contiguous_strides(shape: Sequence[int]) -> list[int]:
    out, acc = [], 1
    for n in reversed(shape):
        out.append(acc)
        acc *= n
    return out[::-1]


def _as_view(load: TensorLoad, loop_ids: list, extents: dict, where: str,
             pads: list | None = None) -> _Load:
    """``load`` as a strided view, its axes the loop variables it uses in the order of the
    operand's dimensions (``B[k, j]`` -> axes k, j: a plain operand, not a transposed one).
    NoBaselineError when an index is not affine, or leaves the operand along some dimension
    (an index an ``if_then_else`` guards: the view would read outside the operand).  ``pads``:
    ``(before, after)`` per dimension when the view is of the operand padded by that much."""
    shape: list = [const_value(d) for d in load.tensor.shape]
    if any(not isinstance(d, int) for d in shape):
        raise NoBaselineError(f"{where}: {load.tensor.name} has a symbolic shape")
    pads = pads or [(0, 0)] * len(shape)
    shape = [n + lo + hi for n, (lo, hi) in zip(shape, pads)]
    strides = _contiguous_strides(shape)
    per_var: dict = {}
    order: list = []
    offset = 0
    variables = dict.fromkeys(loop_ids)
    for dim, ix in enumerate(load.indices):
        form = _affine(ix, variables)
        if form is None:
            raise NoBaselineError(f"{where}: the index {ix} of {load.tensor.name} is not affine in the loop variables"
                                  " (a gather or a division)")
        coefs, c = form
        c += pads[dim][0]
        lo = c + sum(min(0, k * (extents[v] - 1)) for v, k in coefs.items())
        hi = c + sum(max(0, k * (extents[v] - 1)) for v, k in coefs.items())
        if lo < 0 or hi >= shape[dim]:
            raise NoBaselineError(f"{where}: {load.tensor.name}[{ix}] leaves the tensor along dimension {dim} "
                                  "(a guarded read)")
        offset += c * strides[dim]
        for v in loop_ids:  # loop order within one dimension (y*s + ry)
            if coefs.get(v):
                per_var[v] = per_var.get(v, 0) + coefs[v] * strides[dim]
                if v not in order:
                    order.append(v)
    used = [v for v in order if per_var.get(v)]
    if any(per_var[v] < 0 for v in used):
        raise NoBaselineError(f"{where}: {load.tensor.name} is read backwards (a negative stride)")
    return _Load(load.tensor, used, [per_var[v] for v in used], offset)


# -- one op ----------------------------------------------------------------------------
class _OpBuilder:
    """Turns one ComputeOp into ``fn(values) -> array`` and its formula text, for one library."""

    def __init__(self, lib, op: ComputeOp, names: dict):
        self.lib, self.op, self.names = lib, op, names
        self.where = f"op {op.name}"
        self.axes = list(op.axis)
        self.ids = [id(iv.var) for iv in self.axes]
        self.extents = {id(iv.var): _extent(iv, self.where) for iv in self.axes}
        self.shape = tuple(self.extents[v] for v in self.ids)

    # expression over a broadcast grid whose axes are ``grid`` (var ids)
    def expr(self, e: Expr, grid: list) -> tuple[Callable, str]:
        lib = self.lib
        if isinstance(e, (IntImm, FloatImm)):
            value = lib.const(e.value, e.dtype)
            return (lambda vals: value), repr(e.value)
        operand = self.operand(e, grid)
        if operand is not None:
            source, ld, name = operand
            shape = [self.extents[v] if v in ld.used else 1 for v in grid]
            strides = [ld.strides[ld.used.index(v)] if v in ld.used else 0 for v in grid]
            plain = (ld.offset == 0 and ld.used == grid[-len(ld.used):] if ld.used else False)

            def load(vals, shape=shape, strides=strides, off=ld.offset):
                return lib.view(source(vals), shape, strides, off)
            return load, name if plain else f"{name}[...]"
        if isinstance(e, BinaryOp) and e.op in lib.BINARY:
            fa, ta = self.expr(e.a, grid)
            fb, tb = self.expr(e.b, grid)
            fn = lib.BINARY[e.op]
            sym = {"add": "+", "sub": "-", "mul": "*", "div": "/"}.get(e.op)
            text = f"({ta} {sym} {tb})" if sym else f"{e.op}({ta}, {tb})"
            return (lambda vals: fn(fa(vals), fb(vals))), text
        if isinstance(e, CmpOp) and e.op in lib.CMP:
            fa, ta = self.expr(e.a, grid)
            fb, tb = self.expr(e.b, grid)
            fn = lib.CMP[e.op]
            return (lambda vals: fn(fa(vals), fb(vals))), f"{e.op}({ta}, {tb})"
        if isinstance(e, Cast):
            fv, tv = self.expr(e.value, grid)
            return (lambda vals: lib.cast(fv(vals), e.dtype)), f"{e.dtype}({tv})"
        if isinstance(e, Call) and lib.CALL.get(e.name) is not None and len(e.args) == 1:
            fv, tv = self.expr(e.args[0], grid)
            fn = lib.CALL[e.name]
            return (lambda vals: fn(fv(vals))), f"{e.name}({tv})"
        if isinstance(e, Select):  # both sides evaluated: _as_view refuses a read a condition guards
            fc, tc = self.expr(e.cond, grid)
            ft, tt = self.expr(e.true_value, grid)
            ff, tf = self.expr(e.false_value, grid)
            return (lambda vals: lib.where(fc(vals), ft(vals), ff(vals))), f"where({tc}, {tt}, {tf})"
        if isinstance(e, Var) and id(e) in self.extents and id(e) in grid:
            raise NoBaselineError(f"{self.where}: a loop variable used as a value")
        raise NoBaselineError(f"{self.where}: no library formulation of {type(e).__name__} "
                              f"{getattr(e, 'op', getattr(e, 'name', ''))}")

    def operand(self, e: Expr, grid: list) -> tuple[Callable, _Load, str] | None:
        """``(source(vals) -> array, its view, name)`` of a load, or of a zero-padded load
        (``if_then_else(0 <= idx_d < n_d ..., X[idx], c)``: X padded with c); None for anything else."""
        if isinstance(e, TensorLoad):
            t = e.tensor.op
            return (lambda vals: vals[t]), _as_view(e, grid, self.extents, self.where), t.name
        if not (isinstance(e, Select) and isinstance(e.true_value, TensorLoad)
                and isinstance(e.false_value, (IntImm, FloatImm))):
            return None
        pads = _guard_pads(e, grid, self.extents)
        if pads is None:
            return None
        ld = _as_view(e.true_value, grid, self.extents, self.where, pads)
        t, fill, lib = e.true_value.tensor.op, e.false_value.value, self.lib
        return (lambda vals: lib.pad(vals[t], pads, fill)), ld, f"pad({t.name})"

    def build(self) -> tuple[Callable, str]:
        body = self.op.body
        name = self.op.name
        if isinstance(body, Reduce):
            return self._reduce(body, name)
        if isinstance(body, Select):
            padded = self._padded_copy(body, name)
            if padded is not None:
                return padded
        f, text = self.expr(body, self.ids)
        text = _unwrap(text)
        shape, lib, dtype = self.shape, self.lib, body.dtype
        return (lambda vals: lib.contiguous(lib.broadcast(lib.cast(f(vals), dtype), shape))), f"{name} = {text}"

    def _reduce(self, body: Reduce, name: str) -> tuple[Callable, str]:
        lib = self.lib
        if body.condition is not None:
            raise NoBaselineError(f"{self.where}: a reduction with a condition")
        red_ids = [id(iv.var) for iv in body.axis]
        for iv in body.axis:
            self.extents[id(iv.var)] = _extent(iv, self.where)
        grid = self.ids + red_ids
        src = body.source
        if body.combiner == "sum" and isinstance(src, BinaryOp) and src.op == "mul":
            a, b = self.operand(src.a, grid), self.operand(src.b, grid)
            if a is not None and b is not None:
                return self._product_sum(a, b, grid, name, body.dtype)
        fn = lib.REDUCE.get(body.combiner)
        if fn is None:
            raise NoBaselineError(f"{self.where}: a {body.combiner} reduction")
        if math.prod(self.extents[v] for v in grid) > MAX_GRID_ELEMENTS:
            raise NoBaselineError(f"{self.where}: the reduction grid is too large to broadcast")
        f, text = self.expr(src, grid)
        keep = len(self.ids)
        axes = list(range(keep, len(grid)))
        full = tuple(self.extents[v] for v in grid)
        dtype = body.dtype
        return ((lambda vals: lib.contiguous(lib.cast(lib.reduce(fn, lib.broadcast(f(vals), full), axes), dtype))),
                f"{name} = {body.combiner}({text}, axes {axes})")

    def _product_sum(self, a: tuple, b: tuple, grid: list, name: str, dtype: str):
        lib = self.lib
        (src_a, la, na), (src_b, lb, nb) = a, b
        letters = {v: chr(ord("a") + k) for k, v in enumerate(grid)}
        if len(grid) > 26:
            raise NoBaselineError(f"{self.where}: more than 26 loop variables")
        out_used = [v for v in self.ids if v in la.used or v in lb.used]
        spec = f"{''.join(letters[v] for v in la.used)},{''.join(letters[v] for v in lb.used)}->" \
               f"{''.join(letters[v] for v in out_used)}"
        shape, keep_shape = self.shape, [self.extents[v] if v in out_used else 1 for v in self.ids]
        sa, sb = [self.extents[v] for v in la.used], [self.extents[v] for v in lb.used]
        plain_a = la.offset == 0 and la.strides == _contiguous_strides(sa)
        plain_b = lb.offset == 0 and lb.strides == _contiguous_strides(sb)
        if spec == "ac,cb->ab" and plain_a and plain_b:
            text = f"{name} = {na} @ {nb}"
        else:
            wa, wb = ("" if plain_a else "[window]"), ("" if plain_b else "[window]")
            text = f"{name} = einsum('{spec}', {na}{wa}, {nb}{wb})"

        matmul = spec == "ac,cb->ab" and plain_a and plain_b

        def run(vals):
            va = lib.view(src_a(vals), sa, la.strides, la.offset)
            vb = lib.view(src_b(vals), sb, lb.strides, lb.offset)
            res = lib.matmul(va, vb) if matmul else lib.einsum(spec, va, vb)
            return lib.contiguous(lib.broadcast(lib.cast(res, dtype).reshape(keep_shape), shape))
        return run, text

    def _padded_copy(self, body: Select, name: str) -> tuple[Callable, str] | None:
        """``if_then_else(lo_d <= v_d < hi_d for some d, X[v_0 - c_0, ...], const)``: zeros (the
        constant) with X copied into the box; None when ``body`` is not that form."""
        box = _box(body.cond, self.ids)
        load = body.true_value
        if box is None or not isinstance(load, TensorLoad) or not isinstance(body.false_value, (IntImm, FloatImm)):
            return None
        offsets = []
        for d, ix in enumerate(load.indices):
            form = _affine(ix, dict.fromkeys(self.ids))
            if form is None or list(form[0].items()) != [(self.ids[d], 1)]:
                return None
            offsets.append(-form[1])
        src_shape: list = [const_value(x) for x in load.tensor.shape]
        if len(src_shape) != len(self.ids):
            return None
        slices = []
        for d, v in enumerate(self.ids):
            lo, hi = box.get(v, (0, self.extents[v]))
            if (lo, hi) != (offsets[d], offsets[d] + src_shape[d]):
                return None  # the box is not exactly the source
            slices.append(slice(lo, hi))
        lib, shape, fill, src = self.lib, self.shape, body.false_value.value, load.tensor

        def run(vals):
            out = lib.full(shape, fill, vals[src.op])
            out[tuple(slices)] = vals[src.op]
            return out
        return run, f"{name} = pad({src.op.name}, {[(s.start, shape[d] - s.stop) for d, s in enumerate(slices)]})"


def _extent(iv, where: str) -> int:
    n, mn = const_value(iv.dom_extent), const_value(iv.dom_min)
    if not isinstance(n, int) or mn != 0:
        raise NoBaselineError(f"{where}: loop {iv.var.name} has a symbolic or shifted range")
    return n


def _conjuncts(cond: Expr) -> list:
    out, stack = [], [cond]
    while stack:
        c = stack.pop()
        if isinstance(c, LogicalOp) and c.op == "and":
            stack += [c.a, c.b]
        else:
            out.append(c)
    return out


def _guard_pads(sel: Select, grid: list, extents: dict) -> list | None:
    """``[(before, after), ...]`` per dimension of the load ``sel.true_value`` when ``sel.cond`` is
    exactly "every index inside the tensor" for the indices that can leave it (zero padding
    written inline, as ``if_then_else(0 <= y + ry - 1 < H, X[..., y + ry - 1, ...], 0)``); else None."""
    load: Any = sel.true_value
    shape: list = [const_value(d) for d in load.tensor.shape]
    variables = dict.fromkeys(grid)
    maybe = [_affine(ix, variables) for ix in load.indices]
    forms = [f for f in maybe if f is not None]
    if len(forms) != len(maybe) or any(not isinstance(n, int) for n in shape):
        return None
    lower: dict = {}
    upper: dict = {}
    for c in _conjuncts(sel.cond):
        if not (isinstance(c, CmpOp) and isinstance(c.b, IntImm) and c.op in ("ge", "gt", "lt", "le")):
            return None
        form = _affine(c.a, variables)
        dim = None if form is None else next((d for d, f in enumerate(forms) if f[0] == form[0]), None)
        if form is None or dim is None:
            return None
        k = int(c.b.value) - (form[1] - forms[dim][1])  # the bound on index dim
        if c.op in ("ge", "gt"):
            lower[dim] = k + (c.op == "gt")
        else:
            upper[dim] = k + (c.op == "le")
    pads = []
    for d, ((coefs, c0), n) in enumerate(zip(forms, shape)):
        lo = c0 + sum(min(0, k * (extents[v] - 1)) for v, k in coefs.items())
        hi = c0 + sum(max(0, k * (extents[v] - 1)) for v, k in coefs.items())
        if lower.get(d, 0) != 0 or upper.get(d, n) != n or (lo < 0 and d not in lower) or (hi >= n and d not in upper):
            return None
        pads.append((max(0, -lo), max(0, hi - n + 1)))
    return pads


def _box(cond: Expr, ids: list) -> dict | None:
    """``{var id: (lo, hi)}`` of a conjunction of ``v >= c`` / ``v < c`` bounds, or None."""
    out: dict = {}
    for c in _conjuncts(cond):
        if not (isinstance(c, CmpOp) and isinstance(c.a, Var) and isinstance(c.b, IntImm) and id(c.a) in ids):
            return None
        lo, hi = out.get(id(c.a), (-(1 << 62), 1 << 62))
        v = int(c.b.value)
        if c.op == "ge":
            lo = max(lo, v)
        elif c.op == "gt":
            lo = max(lo, v + 1)
        elif c.op == "lt":
            hi = min(hi, v)
        elif c.op == "le":
            hi = min(hi, v + 1)
        else:
            return None
        out[id(c.a)] = (lo, hi)
    return out


# -- whole DAGs --------------------------------------------------------------------------
def _program(dag: ComputeDAG, lib, fused: Callable | None = None) -> BaselineProgram:
    names: dict = {}  # kept for the fused formulations' signature
    placeholders = [t.op for t in dag.tensors if isinstance(t.op, PlaceholderOp)]
    steps: list = []
    lines: list[str] = []
    skip: set = set()
    specials: dict = {}  # the op a library call computes -> (fn, text); the ops it covers are skipped
    for k, op in enumerate(dag.ops):
        special = fused(dag, k, names) if fused and isinstance(op, ComputeOp) and op not in skip else None
        if special is not None:
            fn, text, covered = special
            skip.update(covered)
            specials[covered[-1]] = (fn, text)
    for op in dag.ops:
        if op in specials:
            fn, text = specials[op]
            steps.append((op, fn))
            lines.append(text)
            continue
        if isinstance(op, PlaceholderOp) or op in skip:
            continue
        if not isinstance(op, ComputeOp) or op.num_outputs != 1:
            raise NoBaselineError(f"op {op.name}: a {type(op).__name__} (a scan or a multi-output op) has no "
                                  "formulation here")
        fn, text = _OpBuilder(lib, op, names).build()
        steps.append((op, fn))
        lines.append(text)
    outputs = [t.op for t in dag.tensors if not isinstance(t.op, PlaceholderOp)]

    def run(inputs: Sequence[Any]) -> list:
        vals = dict(zip(placeholders, inputs))
        for producer, fn in steps:
            vals[producer] = fn(vals)
        return [vals[o] for o in outputs]
    return BaselineProgram(lib.name, "\n".join(lines), run, lib.from_numpy)


def numpy_program(dag: ComputeDAG) -> BaselineProgram:
    """The numpy baseline of ``dag`` (float32 stays float32).

    Raises NoBaselineError naming the first op with no formulation (a gather, a scan, a
    condition that is not a box, a symbolic shape)."""
    return _program(dag, NumpyLib)


def torch_program(dag: ComputeDAG) -> BaselineProgram | None:
    """The PyTorch baseline of ``dag`` (CPU tensors), or None when torch is not installed.

    As :func:`numpy_program`, with two library calls for the common ops: ``torch.addmm(C, A, B)``
    for a matmul whose only consumer adds a matrix, and ``F.conv2d`` (stride, padding and
    dilation from the indices) for an NCHW convolution of a zero-padded input.
    Raises NoBaselineError as :func:`numpy_program`."""
    try:
        lib = torch_lib()
    except ImportError:
        return None
    return _program(dag, lib, fused=lambda dag, k, names: _torch_fused(lib, dag, k, names))


def _consumers(dag: ComputeDAG, op) -> list:
    out = []
    for other in dag.ops:
        if isinstance(other, ComputeOp) and any(t.op is op for t in other.input_tensors()):
            out.append(other)
    return out


def _torch_fused(lib, dag: ComputeDAG, k: int, names: dict):
    """``(fn, text, [ops covered])`` for addmm / conv2d at op ``k``, or None."""
    op = dag.ops[k]
    body = op.body
    if not (isinstance(op, ComputeOp) and isinstance(body, Reduce) and body.combiner == "sum"
            and isinstance(body.source, BinaryOp) and body.source.op == "mul" and body.condition is None):
        return None
    a, b = body.source.a, body.source.b
    if not (isinstance(a, TensorLoad) and isinstance(b, TensorLoad)):
        return None
    return _addmm(lib, dag, op, a, b, names) or _conv2d(lib, dag, op, a, b, names)


def _plain(load: TensorLoad, order: list) -> bool:
    return len(load.indices) == len(order) and all(ix is v for ix, v in zip(load.indices, order))


def _addmm(lib, dag, op, a, b, names):
    if len(op.axis) != 2 or len(op.reduce_axis) != 1:
        return None
    i, j, kk = op.axis[0].var, op.axis[1].var, op.reduce_axis[0].var
    if not (_plain(a, [i, kk]) and _plain(b, [kk, j])):
        return None
    users = _consumers(dag, op)
    if len(users) != 1 or any(t.op is op for t in dag.tensors):
        return None
    add = users[0]
    e = add.body
    if not (isinstance(e, BinaryOp) and e.op == "add" and isinstance(e.a, TensorLoad) and isinstance(e.b, TensorLoad)):
        return None
    y, x = add.axis[0].var, add.axis[1].var if len(add.axis) == 2 else None
    mm, other = (e.a, e.b) if e.a.tensor.op is op else (e.b, e.a)
    if mm.tensor.op is not op or not _plain(mm, [y, x]) or not _plain(other, [y, x]):
        return None
    if other.tensor.op is op:
        return None
    torch = lib.module
    A, B, C = a.tensor, b.tensor, other.tensor

    def run(vals):
        return torch.addmm(vals[C.op], vals[A.op], vals[B.op])
    return run, f"{add.name} = torch.addmm({C.op.name}, {A.op.name}, {B.op.name})", [op, add]


def _conv2d(lib, dag, op, a, b, names):
    """NCHW ``conv[n, f, y, x] += pad[n, c, y*s + ry*d, x*s + rx*d] * W[f, c, ry, rx]`` of a
    zero-padded ``data`` (or of data itself) -> ``F.conv2d``."""
    if len(op.axis) != 4 or len(op.reduce_axis) != 3:
        return None
    n, f, y, x = (iv.var for iv in op.axis)
    rc, ry, rx = (iv.var for iv in op.reduce_axis)
    if not _plain(b, [f, rc, ry, rx]) or len(a.indices) != 4:
        return None
    ids = {id(v): v for v in (n, f, y, x, rc, ry, rx)}
    maybe = [_affine(ix, ids) for ix in a.indices]
    forms = [fm for fm in maybe if fm is not None]
    if len(forms) != len(maybe):
        return None
    want0, want1 = ({id(n): 1}, 0), ({id(rc): 1}, 0)
    if forms[0] != want0 or forms[1] != want1:
        return None
    params = []
    for fm, outer, inner in ((forms[2], y, ry), (forms[3], x, rx)):
        coefs, c = fm
        if set(coefs) != {id(outer), id(inner)} or c != 0:
            return None
        params.append((coefs[id(outer)], coefs[id(inner)]))
    (sy, dy), (sx, dx) = params
    src = a.tensor
    pad = (0, 0)
    covered = []
    if isinstance(src.op, ComputeOp) and isinstance(src.op.body, Select) \
            and not any(t.op is src.op for t in dag.tensors) and _consumers(dag, src.op) == [op]:
        pb = _OpBuilder(lib, src.op, names)
        box = _box(src.op.body.cond, pb.ids)
        inner = src.op.body.true_value
        if box is None or not isinstance(inner, TensorLoad) or pb._padded_copy(src.op.body, "") is None:
            return None
        fill = src.op.body.false_value
        if not isinstance(fill, (IntImm, FloatImm)) or fill.value != 0:
            return None
        if set(box) - {pb.ids[2], pb.ids[3]}:
            return None
        ylo, xlo = box.get(pb.ids[2], (0, 0))[0], box.get(pb.ids[3], (0, 0))[0]
        py_hi = pb.extents[pb.ids[2]] - box.get(pb.ids[2], (0, pb.extents[pb.ids[2]]))[1]
        px_hi = pb.extents[pb.ids[3]] - box.get(pb.ids[3], (0, pb.extents[pb.ids[3]]))[1]
        if (ylo, xlo) != (py_hi, px_hi):
            return None  # asymmetric padding: F.conv2d pads both sides alike
        pad = (ylo, xlo)
        covered.append(src.op)
        src = inner.tensor
    covered.append(op)
    F, W = lib.functional, b.tensor
    out_shape = tuple(_extent(iv, op.name) for iv in op.axis)

    def run(vals):
        res = F.conv2d(vals[src.op], vals[W.op], stride=(sy, sx), padding=pad, dilation=(dy, dx))
        return res[:, :, :out_shape[2], :out_shape[3]].contiguous()
    text = (f"{op.name} = F.conv2d({src.op.name}, {W.op.name}, stride={(sy, sx)}, padding={pad}, "
            f"dilation={(dy, dx)})")
    return run, text, covered
