"""Tensor-expression definitions of the operators a model importer lowers to (TOPI's style).

Every function takes :class:`Operand` arguments (a shape, a dtype and a ``read(indices)``
callable: a ``te`` tensor, or a placeholder read through a layout view) and returns a
``te`` tensor; they compose into one fused function per anchor operator, as Ansor's task
extraction fuses elementwise consumers into their producer (Zheng et al., "Ansor:
Generating High-Performance Tensor Programs for Deep Learning", OSDI 2020, section 6;
the operator definitions follow TVM's TOPI: ``nn.dense``, ``nn.batch_matmul``,
``nn.conv2d_nchw`` / ``group_conv2d_nchw`` with a separate padding stage, ``nn.softmax``,
``nn.layer_norm``, ``nn.pool2d``).  Layouts are PyTorch's (NCHW, OIHW weights), and
convolution and pooling also compute in NHWC (``layout="NHWC"``, still with OIHW weights); shapes are
concrete ints; dtypes float32.  Errors: InvalidWorkloadError naming the operator.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from scheduler_core import te
from scheduler_core.base.errors import InvalidWorkloadError

__all__ = [
    "Operand", "operand", "broadcast_shape", "layout_index", "layout_shape", "dense",
    "batch_matmul", "conv2d", "pool2d", "global_avg_pool2d", "softmax", "layer_norm",
    "unary", "clip", "binary", "channel_affine", "copy", "reduce", "UNARY",
]


@dataclass(frozen=True)
class Operand:
    """A readable tensor of a fused function: ``shape`` (ints), ``dtype``, ``read(indices)``."""

    shape: tuple
    dtype: str
    read: Callable[[tuple], Any]

    def __getitem__(self, idx: Any) -> Any:
        return self.read(tuple(idx) if isinstance(idx, (tuple, list)) else (idx,))


def operand(t: Any) -> Operand:
    """The Operand of a ``te`` tensor (reads ``t[indices]``)."""
    return Operand(tuple(int(s.value) if hasattr(s, "value") else int(s) for s in t.shape), t.dtype,
                   lambda idx: t[idx])


def _const(v: float, dtype: str = "float32") -> Any:
    return te.const(float(v), dtype)


# -- layout views: index remapping (reshape / permute / expand) ---------------------
def layout_shape(shape: Sequence[int], steps: Sequence[tuple]) -> tuple:
    """The shape after applying layout ``steps`` (``("reshape", shape)``, ``("permute", dims)``,
    ``("expand", shape)``, ``("slice", (dim, start, stop))``: elements ``start:stop`` of axis
    ``dim``) to a tensor of ``shape``.  Raises InvalidWorkloadError when a reshape changes the
    element count, a permutation is not one or a slice is empty or out of range."""
    shape = tuple(shape)
    for kind, arg in steps:
        if kind == "reshape":
            if math.prod(arg) != math.prod(shape):
                raise InvalidWorkloadError(f"reshape {shape} -> {tuple(arg)} changes the element count")
            shape = tuple(arg)
        elif kind == "permute":
            if sorted(arg) != list(range(len(shape))):
                raise InvalidWorkloadError(f"permute {tuple(arg)} is not a permutation of {len(shape)} dims")
            shape = tuple(shape[d] for d in arg)
        elif kind == "expand":
            if len(arg) != len(shape) or any(s not in (1, a) for s, a in zip(shape, arg)):
                raise InvalidWorkloadError(f"expand {shape} -> {tuple(arg)}: only size-1 dims may grow")
            shape = tuple(arg)
        elif kind == "slice":
            dim, start, stop = arg
            if not (0 <= dim < len(shape) and 0 <= start < stop <= shape[dim]):
                raise InvalidWorkloadError(f"slice {start}:{stop} of axis {dim} of {shape} is empty or out of range")
            shape = (*shape[:dim], stop - start, *shape[dim + 1:])
        else:
            raise InvalidWorkloadError(f"unknown layout step {kind!r}")
    return shape


def _reshape_index(src: tuple, dst: tuple, idx: Sequence[Any]) -> list:
    """Indices into ``src`` for indices ``idx`` into its reshape ``dst`` (row-major), grouping
    dimensions with equal products so that a split or merge needs no div/mod across groups."""
    out: list = []
    i = j = 0
    while i < len(src) or j < len(dst):
        # take the next group: dims of src [i, i2) and dst [j, j2) with equal products
        i2, j2 = i, j
        ps = pd = 1
        while True:
            if ps == pd and (i2 > i or j2 > j) and ps > 0:
                # absorb trailing size-1 dims on either side into this group
                while i2 < len(src) and src[i2] == 1 and (j2 >= len(dst) or dst[j2] != 1):
                    i2 += 1
                while j2 < len(dst) and dst[j2] == 1 and (i2 >= len(src) or src[i2] != 1):
                    j2 += 1
                break
            if i2 >= len(src) and j2 >= len(dst):
                break
            if (ps <= pd and i2 < len(src)) or j2 >= len(dst):
                ps *= src[i2]
                i2 += 1
            else:
                pd *= dst[j2]
                j2 += 1
        gs, gd, gi = src[i:i2], dst[j:j2], list(idx[j:j2])
        if list(gs) == list(gd):
            out += gi
        else:
            lin: Any = None
            for d, v in zip(gd, gi):
                if d == 1:
                    continue
                lin = v if lin is None else lin * d + v
            lin = _const(0, "int32") if lin is None else lin
            stride = math.prod(gs)
            for k, s in enumerate(gs):
                stride //= s
                if s == 1:
                    out.append(te.const(0, "int32"))
                    continue
                v = lin if stride == 1 else te.floordiv(lin, stride)
                if k > 0 and any(x != 1 for x in gs[:k]):
                    v = te.floormod(v, s)
                out.append(v)
        i, j = i2, j2
    return out


def layout_index(shape: Sequence[int], steps: Sequence[tuple], idx: Sequence[Any]) -> list:
    """Map indices of the viewed tensor (after ``steps``) to indices of the base tensor."""
    shapes = [tuple(shape)]
    for st in steps:
        shapes.append(layout_shape(shapes[-1], [st]))
    idx = list(idx)
    for (kind, arg), before, after in reversed(list(zip(steps, shapes[:-1], shapes[1:]))):
        if kind == "reshape":
            idx = _reshape_index(before, after, idx)
        elif kind == "permute":
            src: list = [None] * len(arg)
            for d, p in enumerate(arg):
                src[p] = idx[d]
            idx = src
        elif kind == "slice":
            dim, start, _ = arg
            idx = [v + start if d == dim and start else v for d, v in enumerate(idx)]
        else:  # expand
            idx = [te.const(0, "int32") if b == 1 and a != 1 else v for v, b, a in zip(idx, before, after)]
    return idx


# -- elementwise ---------------------------------------------------------------
def broadcast_shape(*shapes: Sequence[int]) -> tuple:
    """NumPy/PyTorch broadcasting of ``shapes``; InvalidWorkloadError when they do not broadcast."""
    n = max(len(s) for s in shapes)
    out = []
    for d in range(n):
        dims = {s[len(s) - n + d] for s in shapes if len(s) - n + d >= 0} - {1}
        if len(dims) > 1:
            raise InvalidWorkloadError(f"shapes {[tuple(s) for s in shapes]} do not broadcast")
        out.append(dims.pop() if dims else 1)
    return tuple(out)


def _bread(x: Any, idx: tuple) -> Any:
    """Read ``x`` (Operand or Python number) at output indices ``idx`` with broadcasting."""
    if not isinstance(x, Operand):
        return _const(x)
    off = len(idx) - len(x.shape)
    return x.read(tuple(te.const(0, "int32") if s == 1 else idx[off + d] for d, s in enumerate(x.shape)))


_SQRT1_2 = 1.0 / math.sqrt(2.0)
_GELU_TANH_C = math.sqrt(2.0 / math.pi)

UNARY: dict[str, Callable[[Any], Any]] = {
    "relu": lambda v: te.max(v, _const(0)),
    "gelu": lambda v: v * _const(0.5) * (_const(1) + te.erf(v * _const(_SQRT1_2))),
    "gelu_tanh": lambda v: v * _const(0.5) * (_const(1) + te.tanh(
        _const(_GELU_TANH_C) * (v + _const(0.044715) * v * v * v))),
    "silu": lambda v: v * te.sigmoid(v),
    "sigmoid": te.sigmoid,
    "tanh": te.tanh,
    "exp": te.exp,
    "sqrt": te.sqrt,
    "rsqrt": te.rsqrt,
    "neg": lambda v: _const(0) - v,
    "relu6": lambda v: te.min(te.max(v, _const(0)), _const(6)),
    "identity": lambda v: v,
}


def unary(x: Operand, kind: str, name: str = "") -> Any:
    """``kind(x)`` elementwise; kinds in :data:`UNARY` (GELU in its erf form, Hendrycks &
    Gimpel 2016; ``gelu_tanh`` the tanh approximation)."""
    if kind not in UNARY:
        raise InvalidWorkloadError(f"unknown elementwise operator {kind!r} (have {sorted(UNARY)})")
    f = UNARY[kind]
    return te.compute(x.shape, lambda *i: f(x.read(tuple(i))), name=name or kind)


def clip(x: Operand, lo: float | None = None, hi: float | None = None, name: str = "clip") -> Any:
    """``min(max(x, lo), hi)`` elementwise (``torch.clamp``, ``F.hardtanh``, ONNX ``Clip``); a
    bound that is None is not applied.  Raises InvalidWorkloadError when both are None or
    ``lo > hi``."""
    if lo is None and hi is None:
        raise InvalidWorkloadError(f"{name}: a clip needs a lower or an upper bound")
    if lo is not None and hi is not None and lo > hi:
        raise InvalidWorkloadError(f"{name}: lower bound {lo} above upper bound {hi}")

    def f(v: Any) -> Any:
        v = v if lo is None else te.max(v, _const(lo, x.dtype))
        return v if hi is None else te.min(v, _const(hi, x.dtype))
    return te.compute(x.shape, lambda *i: f(x.read(tuple(i))), name=name)


_BINARY: dict[str, Callable[[Any, Any], Any]] = {
    "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
    "div": lambda a, b: a / b, "maximum": lambda a, b: te.max(a, b), "minimum": lambda a, b: te.min(a, b),
    "pow": lambda a, b: te.pow(a, b),
}


def binary(a: Any, b: Any, kind: str, name: str = "") -> Any:
    """``a kind b`` with broadcasting; ``a`` or ``b`` may be a Python number (not both)."""
    if kind not in _BINARY:
        raise InvalidWorkloadError(f"unknown binary operator {kind!r} (have {sorted(_BINARY)})")
    shapes = [x.shape for x in (a, b) if isinstance(x, Operand)]
    if not shapes:
        raise InvalidWorkloadError(f"{kind}: at least one operand must be a tensor")
    f = _BINARY[kind]
    return te.compute(broadcast_shape(*shapes), lambda *i: f(_bread(a, i), _bread(b, i)), name=name or kind)


def channel_affine(x: Operand, scale: Operand, shift: Operand, axis: int = 1, name: str = "scale_shift") -> Any:
    """``x * scale[c] + shift[c]`` over channel axis ``axis`` (inference batch norm, unfolded)."""
    return te.compute(x.shape, lambda *i: x.read(tuple(i)) * scale.read((i[axis],)) + shift.read((i[axis],)),
                      name=name)


def copy(x: Operand, name: str = "copy") -> Any:
    """A materialized copy of ``x`` (a layout view that a model returns)."""
    return te.compute(x.shape, lambda *i: x.read(tuple(i)), name=name)


# -- anchors ------------------------------------------------------------------------
def _layout_attrs(layout_free: Sequence) -> dict | None:
    return {"layout_free_placeholders": list(layout_free)} if layout_free else None


def dense(x: Operand, weight_t: Operand, name: str = "dense", layout_free: Sequence = ()) -> Any:
    """``out[..., j] = sum_k x[..., k] * weight_t[k, j]``: x (..., K), weight_t (K, N) (the
    transposed ``nn.Linear`` weight, so the output's inner loop is contiguous) -> (..., N).
    layout_free : placeholders (the weight's) whose layout the schedule may choose
    (``layout_free_placeholders``; ``schedule.layout_rewrite``)."""
    K, N = weight_t.shape
    if x.shape[-1] != K:
        raise InvalidWorkloadError(f"{name}: x {x.shape} and weight (K={K}, N={N}) disagree on K")
    k = te.reduce_axis((0, K), name="k")
    return te.compute((*x.shape[:-1], N), lambda *i: te.sum(x.read((*i[:-1], k)) * weight_t.read((k, i[-1])),
                                                           axis=k), name=name, attrs=_layout_attrs(layout_free))


def batch_matmul(a: Operand, b: Operand, name: str = "batch_matmul") -> Any:
    """``out[..., i, j] = sum_k a[..., i, k] * b[..., k, j]`` with broadcast batch dims (torch.matmul
    of rank >= 2 operands)."""
    if len(a.shape) < 2 or len(b.shape) < 2:
        raise InvalidWorkloadError(f"{name}: operands of rank >= 2 expected, got {a.shape} and {b.shape}")
    (M, K), (K2, N) = a.shape[-2:], b.shape[-2:]
    if K != K2:
        raise InvalidWorkloadError(f"{name}: {a.shape} @ {b.shape} disagree on K")
    batch = broadcast_shape(a.shape[:-2], b.shape[:-2])
    k = te.reduce_axis((0, K), name="k")

    def body(*i: Any) -> Any:
        bi = tuple(i[:-2])
        return te.sum(_bread(Operand((*a.shape[:-2],), a.dtype, lambda ix: a.read((*ix, i[-2], k))), bi)
                      * _bread(Operand((*b.shape[:-2],), b.dtype, lambda ix: b.read((*ix, k, i[-1]))), bi),
                      axis=k)

    return te.compute((*batch, M, N), body, name=name)


def _pad(x: Operand, ph: int, pw: int, value: Any, name: str, layout: str = "NCHW") -> Operand:
    """Zero (or ``value``) padding of the two spatial axes (the two last in NCHW, axes 1 and 2 in
    NHWC) as its own stage (TOPI's ``nn.pad``)."""
    if ph == 0 and pw == 0:
        return x
    ya, xa = _spatial_axes(layout, len(x.shape))
    h, w = x.shape[ya], x.shape[xa]
    shape = list(x.shape)
    shape[ya], shape[xa] = h + 2 * ph, w + 2 * pw

    def body(*i: Any) -> Any:
        src = list(i)
        src[ya], src[xa] = i[ya] - ph, i[xa] - pw
        return te.if_then_else(te.all(i[ya] >= ph, i[ya] < h + ph, i[xa] >= pw, i[xa] < w + pw),
                               x.read(tuple(src)), value)

    return operand(te.compute(tuple(shape), body, name=name))


def _spatial_axes(layout: str, rank: int) -> tuple:
    """The (height, width) axes of a tensor of ``rank`` in ``layout`` (NCHW: the two last;
    NHWC: the two before the channel axis)."""
    if layout == "NCHW":
        return rank - 2, rank - 1
    if layout == "NHWC":
        return rank - 3, rank - 2
    raise InvalidWorkloadError(f"layout must be 'NCHW' or 'NHWC', got {layout!r}")


def _out_len(n: int, k: int, s: int, p: int, d: int, ceil_mode: bool = False) -> int:
    span = n + 2 * p - d * (k - 1) - 1
    out = (-(-span // s) if ceil_mode else span // s) + 1
    if ceil_mode and (out - 1) * s >= n + p:  # PyTorch: the last window must start inside
        out -= 1
    return out


def conv2d(x: Operand, weight: Operand, stride: Sequence[int] = (1, 1), padding: Sequence[int] = (0, 0),
           dilation: Sequence[int] = (1, 1), groups: int = 1, name: str = "conv2d",
           layout_free: Sequence = (), layout: str = "NCHW") -> Any:
    """2-D convolution with an OIHW weight (``torch.nn.functional.conv2d`` without bias):
    NCHW: x (n, ci, h, w) -> (n, co, oh, ow); NHWC (``layout="NHWC"``, TOPI's ``conv2d_nhwc``):
    x (n, h, w, ci) -> (n, oh, ow, co), the layout in which the output channels are the
    innermost, contiguous axis, so that a CPU schedule vectorizes over them (TVM's
    auto-scheduler tutorials convert CPU and GPU models to NHWC for this).  weight (co,
    ci/groups, kh, kw) in both.  Grouped and depthwise (groups == ci) convolutions read input
    channel ``g * ci/groups + rc`` for output channel ``f`` of group ``g``.  Zero padding is a
    separate stage (``pad``) that the schedule inlines.  layout_free: as :func:`dense`."""
    ya, xa = _spatial_axes(layout, 4)
    ca = 1 if layout == "NCHW" else 3
    n, ci, h, w = x.shape[0], x.shape[ca], x.shape[ya], x.shape[xa]
    co, cig, kh, kw = weight.shape
    (sh, sw), (ph, pw), (dh, dw) = stride, padding, dilation
    if ci % groups or co % groups or cig != ci // groups:
        raise InvalidWorkloadError(f"{name}: {ci} input / {co} output channels with groups={groups} "
                                   f"and weight {weight.shape} disagree")
    oh, ow = _out_len(h, kh, sh, ph, dh), _out_len(w, kw, sw, pw, dw)
    if oh <= 0 or ow <= 0:
        raise InvalidWorkloadError(f"{name}: output would be empty ({oh}x{ow})")
    data = _pad(x, ph, pw, _const(0, x.dtype), "pad", layout)
    ry = te.reduce_axis((0, kh), name="ry")
    rx = te.reduce_axis((0, kw), name="rx")
    cog = co // groups

    def at(b: Any, c: Any, y: Any, xx: Any) -> Any:
        return data.read((b, c, y, xx) if layout == "NCHW" else (b, y, xx, c))

    if cig == 1:
        def spatial(b, f, y, xx):
            c = f if groups == co else te.floordiv(f, cog)
            return te.sum(at(b, c, y * sh + ry * dh, xx * sw + rx * dw)
                          * weight.read((f, te.const(0, "int32"), ry, rx)), axis=[ry, rx])
    else:
        rc = te.reduce_axis((0, cig), name="rc")

        def spatial(b, f, y, xx):
            c = rc if groups == 1 else te.floordiv(f, cog) * cig + rc
            return te.sum(at(b, c, y * sh + ry * dh, xx * sw + rx * dw)
                          * weight.read((f, rc, ry, rx)), axis=[rc, ry, rx] if layout == "NCHW" else [ry, rx, rc])
    if layout == "NCHW":
        return te.compute((n, co, oh, ow), spatial, name=name, attrs=_layout_attrs(layout_free))
    return te.compute((n, oh, ow, co), lambda b, y, xx, f: spatial(b, f, y, xx), name=name,
                      attrs=_layout_attrs(layout_free))


def pool2d(x: Operand, kind: str, kernel: Sequence[int], stride: Sequence[int], padding: Sequence[int],
           dilation: Sequence[int] = (1, 1), ceil_mode: bool = False, count_include_pad: bool = True,
           name: str = "", layout: str = "NCHW") -> Any:
    """Max or average pooling over the two spatial axes (``nn.MaxPool2d`` / ``nn.AvgPool2d``; the
    two last axes in NCHW, axes 1 and 2 in NHWC); max pooling pads with the lowest float,
    average pooling divides by the window size (``count_include_pad``) or by the in-bounds count."""
    ya, xa = _spatial_axes(layout, len(x.shape))
    h, w = x.shape[ya], x.shape[xa]
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = kernel, stride, padding, dilation
    oh, ow = _out_len(h, kh, sh, ph, dh, ceil_mode), _out_len(w, kw, sw, pw, dw, ceil_mode)
    out_shape = list(x.shape)
    out_shape[ya], out_shape[xa] = oh, ow
    ry = te.reduce_axis((0, kh), name="ry")
    rx = te.reduce_axis((0, kw), name="rx")

    def window(i: tuple, fill: Any) -> Any:
        y, xx = i[ya] * sh + ry * dh - ph, i[xa] * sw + rx * dw - pw
        src = list(i)
        src[ya], src[xa] = y, xx
        return te.if_then_else(te.all(y >= 0, y < h, xx >= 0, xx < w), x.read(tuple(src)), fill)

    if kind == "max":
        return te.compute(tuple(out_shape), lambda *i: te.max(window(i, te.min_value(x.dtype)), axis=[ry, rx]),
                          name=name or "max_pool2d")
    if kind != "avg":
        raise InvalidWorkloadError(f"pool2d: kind must be 'max' or 'avg', got {kind!r}")
    total = te.compute(tuple(out_shape), lambda *i: te.sum(window(i, _const(0, x.dtype)), axis=[ry, rx]),
                       name="pool_sum")
    if count_include_pad and not ceil_mode:
        return te.compute(total.shape, lambda *i: total[i] / _const(kh * kw), name=name or "avg_pool2d")

    def count(i: tuple) -> Any:  # the window's size as PyTorch divides by it
        y0, x0 = i[ya] * sh - ph, i[xa] * sw - pw
        y1, x1 = te.min(y0 + kh, h + ph), te.min(x0 + kw, w + pw)
        if not count_include_pad:
            y0, x0, y1, x1 = te.max(y0, 0), te.max(x0, 0), te.min(y1, h), te.min(x1, w)
        return ((y1 - y0) * (x1 - x0)).astype(x.dtype)

    return te.compute(total.shape, lambda *i: total[i] / count(i), name=name or "avg_pool2d")


def global_avg_pool2d(x: Operand, name: str = "global_avg_pool2d", layout: str = "NCHW") -> Any:
    """Mean over the two spatial axes, keeping them as size 1 (``AdaptiveAvgPool2d(1)``; layout
    as in :func:`pool2d`)."""
    ya, xa = _spatial_axes(layout, len(x.shape))
    h, w = x.shape[ya], x.shape[xa]
    out_shape = list(x.shape)
    out_shape[ya], out_shape[xa] = 1, 1
    ry = te.reduce_axis((0, h), name="ry")
    rx = te.reduce_axis((0, w), name="rx")

    def body(*i: Any) -> Any:
        src = list(i)
        src[ya], src[xa] = ry, rx
        return te.sum(x.read(tuple(src)), axis=[ry, rx])

    total = te.compute(tuple(out_shape), body, name="pool_sum")
    return te.compute(total.shape, lambda *i: total[i] / _const(h * w), name=name)


def softmax(x: Operand, log: bool = False, name: str = "") -> Any:
    """Numerically stable softmax (or log-softmax) over the last axis: row max, exp of the
    difference, row sum, divide (TOPI's ``nn.softmax``)."""
    *lead, m = x.shape
    k1 = te.reduce_axis((0, m), name="k1")
    mx = te.compute(tuple(lead), lambda *i: te.max(x.read((*i, k1)), axis=k1), name="softmax_max")
    e = te.compute(x.shape, lambda *i: te.exp(x.read(tuple(i)) - mx[i[:-1]]), name="softmax_exp")
    k2 = te.reduce_axis((0, m), name="k2")
    s = te.compute(tuple(lead), lambda *i: te.sum(e[(*i, k2)], axis=k2), name="softmax_sum")
    if log:
        return te.compute(x.shape, lambda *i: x.read(tuple(i)) - mx[i[:-1]] - te.log(s[i[:-1]]),
                          name=name or "log_softmax")
    return te.compute(x.shape, lambda *i: e[i] / s[i[:-1]], name=name or "softmax")


def layer_norm(x: Operand, gamma: Operand | None, beta: Operand | None, ndim: int = 1, eps: float = 1e-5,
               name: str = "layer_norm") -> Any:
    """Layer norm over the ``ndim`` last axes (Ba et al. 2016; ``nn.LayerNorm``): mean, mean of
    squared deviations (biased variance), ``(x - mean) * rsqrt(var + eps) * gamma + beta``;
    gamma and beta have the normalized shape (either may be None)."""
    lead, norm = x.shape[: len(x.shape) - ndim], x.shape[len(x.shape) - ndim:]
    count = _const(math.prod(norm))
    r1 = [te.reduce_axis((0, s), name=f"k{d}") for d, s in enumerate(norm)]
    total = te.compute(tuple(lead), lambda *i: te.sum(x.read((*i, *r1)), axis=r1), name="ln_sum")
    mean = te.compute(tuple(lead), lambda *i: total[i] / count, name="ln_mean")
    r2 = [te.reduce_axis((0, s), name=f"j{d}") for d, s in enumerate(norm)]

    def dev(i: tuple, r: Sequence) -> Any:
        return x.read((*i, *r)) - mean[i]

    sq = te.compute(tuple(lead), lambda *i: te.sum(dev(i, r2) * dev(i, r2), axis=r2), name="ln_sqsum")

    def body(*i: Any) -> Any:
        li, ni = i[: len(lead)], i[len(lead):]
        v = (x.read(tuple(i)) - mean[li]) * te.rsqrt(sq[li] / count + _const(eps))
        if gamma is not None:
            v = v * gamma.read(tuple(ni))
        if beta is not None:
            v = v + beta.read(tuple(ni))
        return v

    return te.compute(x.shape, body, name=name)


def reduce(x: Operand, kind: str, dims: Sequence[int], keepdim: bool = False, name: str = "") -> Any:
    """``sum`` / ``mean`` / ``max`` / ``min`` of ``x`` over axes ``dims`` (``torch.sum(x, dims,
    keepdim)``; an empty ``dims`` reduces every axis); mean divides the sum by the count."""
    rank = len(x.shape)
    axes = sorted({d % rank for d in dims}) if dims else list(range(rank))
    red = {d: te.reduce_axis((0, x.shape[d]), name=f"r{d}") for d in axes}
    out_shape = tuple(1 if d in red else s for d, s in enumerate(x.shape) if keepdim or d not in red)
    combiner = {"sum": te.sum, "mean": te.sum, "max": te.max, "min": te.min}.get(kind)
    if combiner is None:
        raise InvalidWorkloadError(f"reduce: kind must be sum, mean, max or min, got {kind!r}")

    def body(*i: Any) -> Any:
        it = iter(i)
        idx = []
        for d in range(rank):
            if d in red:
                if keepdim:
                    next(it)
                idx.append(red[d])
            else:
                idx.append(next(it))
        return combiner(x.read(tuple(idx)), axis=[red[d] for d in axes])

    total = te.compute(out_shape, body, name=f"{kind}_reduce" if kind == "mean" else (name or kind))
    if kind != "mean":
        return total
    count = _const(math.prod(x.shape[d] for d in axes))
    return te.compute(out_shape, lambda *i: total[i] / count, name=name or "mean")
