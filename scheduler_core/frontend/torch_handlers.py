"""The operator table of the PyTorch importer: one handler per torch module, function or method.

A handler ``h(importer, node, value, *args, **kwargs)`` gets the fx node, its value recorded
on the example inputs (a tensor: its shape and dtype are the output's) and the node's
arguments with every fx Node replaced by its converted value (a graph value name, a
:class:`~scheduler_core.frontend.fusion.View`, an open
:class:`~scheduler_core.frontend.fusion.Group`, or a Python constant).  It returns the
converted value, or raises :class:`Unsupported` when these arguments are outside what it
lowers: the importer then calls torch for the node (a library call), as TVM's PyTorch
frontend keeps the operators it cannot convert.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from . import ops
from .fusion import TAIL, Group, Stage

__all__ = ["Unsupported", "MODULES", "FUNCTIONS", "METHODS", "ATEN"]


class Unsupported(Exception):
    """This operator (with these arguments) is not lowered: it becomes a library call."""


def _pair(v: Any) -> tuple:
    return tuple(v) if isinstance(v, (tuple, list)) else (v, v)


# -- operator handlers: (importer, node, value, *args, **kwargs) -> converted value ------
def _unary(kind: str) -> Callable:
    def h(im, node, val, x, *rest, **kw):
        im.f32(val, x)
        return im.elementwise(node, val, Stage(kind, ops.unary, [x], ["data"], {"kind": kind}))
    return h


def _unary_module(kind: str) -> Callable:
    def h(im, node, val, mod, x):
        return _unary(kind)(im, node, val, x)
    return h


def _bound(v: Any) -> float | None:
    """A clamp bound as a float; None (and an infinite bound) is no bound; a tensor is Unsupported."""
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise Unsupported
    return None if math.isinf(v) else float(v)


def _clamp(im, node, val, x, min=None, max=None, out=None):  # noqa: A002 - torch's names
    lo, hi = _bound(min), _bound(max)
    if out is not None or (lo is None and hi is None) or (lo is not None and hi is not None and lo > hi):
        raise Unsupported  # torch defines these (an error, or hi everywhere): left to torch
    im.f32(val, x)
    if (lo, hi) == (0.0, 6.0):  # ReLU6, the same function as F.relu6 gives
        return _unary("relu6")(im, node, val, x)
    if (lo, hi) == (0.0, None):
        return _unary("relu")(im, node, val, x)
    return im.elementwise(node, val, Stage("clip", ops.clip, [x], ["data"], {"lo": lo, "hi": hi}))


def _hardtanh(im, node, val, x, min_val=-1.0, max_val=1.0, inplace=False):
    return _clamp(im, node, val, x, min_val, max_val)


def _hardtanh_module(im, node, val, mod, x):
    return _clamp(im, node, val, x, mod.min_val, mod.max_val)


def _gelu(im, node, val, x, approximate="none"):
    return _unary("gelu_tanh" if approximate == "tanh" else "gelu")(im, node, val, x)


def _binary(kind: str, reverse: bool = False) -> Callable:
    def h(im, node, val, a, b, alpha=1, rounding_mode=None, out=None):
        if reverse:
            a, b = b, a
        if rounding_mode is not None or out is not None:
            raise Unsupported
        if alpha != 1:
            if not im.tensor(b):
                b = b * alpha
            else:
                raise Unsupported
        im.f32(val, a, b)
        shp = tuple(val.shape)
        if im.tensor(a) and im.tensor(b):
            a, b = im.scalar_or(a, im.shape(b), shp), im.scalar_or(b, im.shape(a), shp)
        if not (im.tensor(a) or im.tensor(b)) or not all(im.tensor(v) or isinstance(v, (int, float))
                                                         for v in (a, b)):
            raise Unsupported
        return im.elementwise(node, val, Stage(kind, ops.binary, [a, b], ["lhs", "rhs"], {"kind": kind}))
    return h


def _dropout(im, node, val, x, p=0.5, training=False, inplace=False):
    if training:
        raise Unsupported  # F.dropout(training=True) stays random: torch runs it
    return im.alias(node, x)


def _contiguous(im, node, val, x, *a, **k):
    return im.alias(node, x)


def _module_alias(im, node, val, mod, x, *a, **k):
    return im.alias(node, x)


def _reshape_to_val(im, node, val, x, *a, **k):
    return im.b.view(x, ("reshape", tuple(val.shape)), name=node.name)


def _module_reshape(im, node, val, mod, x):
    return _reshape_to_val(im, node, val, x)


def _permute(im, node, val, x, *dims, **kw):
    dims = kw.get("dims", dims)
    if len(dims) == 1 and isinstance(dims[0], (tuple, list)):
        dims = dims[0]
    rank = len(im.shape(x))
    return im.b.view(x, ("permute", tuple(d % rank for d in dims)), name=node.name)


def _transpose(im, node, val, x, dim0=0, dim1=1):
    rank = len(im.shape(x))
    perm = list(range(rank))
    d0, d1 = dim0 % rank, dim1 % rank
    perm[d0], perm[d1] = perm[d1], perm[d0]
    return im.b.view(x, ("permute", tuple(perm)), name=node.name)


def _t(im, node, val, x):
    if len(im.shape(x)) < 2:
        return im.alias(node, x)
    return _transpose(im, node, val, x, 0, 1)


def _expand(im, node, val, x, *sizes, **kw):
    if len(val.shape) != len(im.shape(x)):
        raise Unsupported
    return im.b.view(x, ("expand", tuple(val.shape)), name=node.name)


def _slice_view(im, node, x, dim: int, start: int, stop: int, name: str) -> Any:
    """Elements ``start:stop`` of axis ``dim`` of ``x`` as a view (no copy: the consumer reads
    the base at an offset).  Bounds as Python slicing (negative from the end, clamped)."""
    shape = im.shape(x)
    d = dim % len(shape)
    begin, end, _ = slice(start, stop).indices(shape[d])
    if begin == 0 and end == shape[d]:
        return x
    if end <= begin:
        raise Unsupported  # an empty tensor: torch makes it
    return im.b.view(x, ("slice", (d, begin, end)), name=name)


def _split(im, node, val, x, split_size_or_sections, dim=0):
    """``torch.split``: a tuple of slice views of ``x`` along ``dim``."""
    n = im.shape(x)[dim % len(im.shape(x))]
    if isinstance(split_size_or_sections, int):
        sizes = [min(split_size_or_sections, n - k) for k in range(0, n, split_size_or_sections)]
    else:
        sizes = [int(v) for v in split_size_or_sections]
    if sum(sizes) != n or any(v <= 0 for v in sizes):
        raise Unsupported
    starts = np.cumsum([0, *sizes[:-1]])
    return tuple(_slice_view(im, node, x, dim, int(b), int(b) + v, f"{node.name}.{k}")
                 for k, (b, v) in enumerate(zip(starts, sizes)))


def _chunk(im, node, val, x, chunks, dim=0):
    """``torch.chunk``: pieces of ``ceil(n / chunks)`` along ``dim`` (the last one smaller)."""
    n = im.shape(x)[dim % len(im.shape(x))]
    if chunks < 1:
        raise Unsupported
    return _split(im, node, val, x, -(-n // chunks), dim)


def _unbind(im, node, val, x, dim=0):
    """``torch.unbind``: each index of ``dim`` as a view with that axis removed."""
    shape = im.shape(x)
    d = dim % len(shape)
    rest = (*shape[:d], *shape[d + 1:])
    return tuple(im.b.view(x, ("slice", (d, k, k + 1)), ("reshape", rest), name=f"{node.name}.{k}")
                 for k in range(shape[d]))


def _aten_slice(im, node, val, x, dim=0, start=None, end=None, step=1):
    if step != 1:
        raise Unsupported
    return _slice_view(im, node, x, dim, start, end, node.name)


def _getitem(im, node, val, seq, idx):
    if isinstance(seq, (tuple, list)):
        return seq[idx]
    raise Unsupported  # tensor slicing: torch does it


def _linear(im, node, val, x, weight, bias=None):
    im.f32(val, x)
    w = im.b.param_array(weight) if im.tensor(weight) else None
    wt = im.b.add_param(f"{node.name}.weight_t", w.T) if w is not None and w.ndim == 2 else \
        im.b.view(weight, ("permute", (1, 0)))
    st = Stage("dense", ops.dense, [x, wt], ["data", "weight"])
    return im.anchor(node, val, st, bias)


def _linear_module(im, node, val, mod, x):
    if not isinstance(mod, nn.Linear):
        raise Unsupported
    im.f32(val, x)
    wt = im.module_param(mod, node, "weight", lambda a: np.ascontiguousarray(a.T), "_t")
    bias = im.module_param(mod, node, "bias")
    return im.anchor(node, val, Stage("dense", ops.dense, [x, wt], ["data", "weight"]), bias)


def _matmul(im, node, val, a, b, out=None):
    im.f32(val, a, b)
    if out is not None or len(im.shape(a)) < 2 or len(im.shape(b)) < 2:
        raise Unsupported
    if len(im.shape(b)) == 2 and im.b.param_array(b) is not None:
        return im.anchor(node, val, Stage("dense", ops.dense, [a, b], ["data", "weight"]))
    return im.anchor(node, val, Stage("batch_matmul", ops.batch_matmul, [a, b], ["A", "B"]))


def _addmm(im, node, val, bias, a, b, beta=1, alpha=1):
    if beta != 1 or alpha != 1:
        raise Unsupported
    g = _matmul(im, node, val, a, b)
    g.uses = 1
    return im.elementwise(node, val, Stage("bias_add", ops.binary, [g, bias], [None, "bias"], {"kind": "add"}))


def _conv_args(x_shape: tuple, w_shape: tuple, stride, padding, dilation) -> tuple:
    stride, dilation = _pair(stride), _pair(dilation)
    if isinstance(padding, str):
        if padding == "valid":
            padding = (0, 0)
        elif padding == "same" and all(d * (k - 1) % 2 == 0 for d, k in zip(dilation, w_shape[2:])):
            padding = tuple(d * (k - 1) // 2 for d, k in zip(dilation, w_shape[2:]))
        else:
            raise Unsupported
    return stride, _pair(padding), dilation


def _conv2d(im, node, val, x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    im.f32(val, x, weight)
    if len(im.shape(x)) != 4:
        raise Unsupported
    s, p, d = _conv_args(im.shape(x), im.shape(weight), stride, padding, dilation)
    st = Stage("conv2d", ops.conv2d, [x, weight], ["data", "kernel"],
               {"stride": s, "padding": p, "dilation": d, "groups": groups})
    return im.anchor(node, val, st, bias, (("reshape", (im.shape(weight)[0], 1, 1)),) if bias is not None else ())


def _conv2d_module(im, node, val, mod, x):
    if not isinstance(mod, nn.Conv2d) or mod.padding_mode != "zeros":
        raise Unsupported
    w = im.module_param(mod, node, "weight")
    bias = im.module_param(mod, node, "bias")
    return _conv2d(im, node, val, x, w, bias, mod.stride, mod.padding, mod.dilation, mod.groups)


def _batch_norm_module(im, node, val, mod, x):
    if not mod.track_running_stats or mod.running_mean is None:
        raise Unsupported
    im.f32(val, x)
    var = mod.running_var.detach().double().cpu().numpy()
    mean = mod.running_mean.detach().double().cpu().numpy()
    gamma = mod.weight.detach().double().cpu().numpy() if mod.weight is not None else np.ones_like(mean)
    beta = mod.bias.detach().double().cpu().numpy() if mod.bias is not None else np.zeros_like(mean)
    scale = gamma / np.sqrt(var + mod.eps)
    shift = beta - mean * scale
    folded = _fold_into_conv(im, node, x, scale, shift)
    if folded is not None:
        return folded
    c = len(mean)
    sc = im.b.add_param(f"{node.target}.scale", scale.astype(np.float32))
    sh = im.b.add_param(f"{node.target}.shift", shift.astype(np.float32))
    if len(val.shape) < 2 or val.shape[1] != c:
        raise Unsupported
    return im.elementwise(node, val, Stage("batch_norm", ops.channel_affine, [x, sc, sh],
                                           ["data", "scale", "shift"]))


def _fold_into_conv(im, node, x, scale: np.ndarray, shift: np.ndarray) -> Group | None:
    """Batch norm after a conv (its only user) scales the conv's weight and bias (inference folding)."""
    if not (isinstance(x, Group) and x.closed is None and x.uses == 1 and x.kinds in (["conv2d"],
                                                                                      ["conv2d", "bias_add"])):
        return None
    conv = x.stages[0]
    w = im.b.param_array(conv.args[1])
    if w is None:
        return None
    co = w.shape[0]
    new_w = (w.astype(np.float64) * scale.reshape(co, 1, 1, 1)).astype(np.float32)
    if len(x.stages) == 2:
        b = im.b.param_array(x.stages[1].args[1])
        if b is None:
            return None
        new_b = (b.reshape(co).astype(np.float64) * scale + shift).astype(np.float32)
    else:
        new_b = shift.astype(np.float32)
    conv.args[1] = im.b.add_param(f"{node.target}.folded_weight", new_w)
    bias = im.b.view(im.b.add_param(f"{node.target}.folded_bias", new_b), ("reshape", (co, 1, 1)))
    if len(x.stages) == 2:
        x.stages[1].args[1] = bias
    else:
        x.stages.append(Stage("bias_add", ops.binary, [TAIL, bias], [None, "bias"], {"kind": "add"}))
    x.uses, x.name = len(node.users), node.name
    return x


def _param(im, v: Any) -> np.ndarray | None:
    return im.b.param_array(v) if im.tensor(v) else None


def _batch_norm_stats(im, node, val, x, weight, bias, mean, var, eps):
    """Inference batch norm from its arguments (running statistics and affine weights as
    graph weights): folded into a preceding conv, else a per-channel scale and shift."""
    im.f32(val, x)
    mean_a, var_a = _param(im, mean), _param(im, var)
    if mean_a is None or var_a is None:
        raise Unsupported
    mean_a, var_a = mean_a.astype(np.float64), var_a.astype(np.float64)
    w_a = _param(im, weight) if weight is not None else np.ones_like(mean_a)
    b_a = _param(im, bias) if bias is not None else np.zeros_like(mean_a)
    if w_a is None or b_a is None:
        raise Unsupported
    scale = w_a.astype(np.float64) / np.sqrt(var_a + float(eps))
    shift = b_a.astype(np.float64) - mean_a * scale
    folded = _fold_into_conv(im, node, x, scale, shift)
    if folded is not None:
        return folded
    c = len(mean_a)
    if len(val.shape) < 2 or val.shape[1] != c:
        raise Unsupported
    sc = im.b.add_param(f"{node.name}.scale", scale.astype(np.float32))
    sh = im.b.add_param(f"{node.name}.shift", shift.astype(np.float32))
    return im.elementwise(node, val, Stage("batch_norm", ops.channel_affine, [x, sc, sh],
                                           ["data", "scale", "shift"]))


def _batch_norm_functional(im, node, val, x, running_mean, running_var, weight=None, bias=None,
                           training=False, momentum=0.1, eps=1e-5):
    if training:
        raise Unsupported
    return _batch_norm_stats(im, node, val, x, weight, bias, running_mean, running_var, eps)


def _softmax(log: bool) -> Callable:
    def h(im, node, val, x, dim=None, _stacklevel=3, dtype=None):
        im.f32(val, x)
        rank = len(im.shape(x))
        if dtype is not None or dim is None or dim % rank != rank - 1:
            raise Unsupported
        return im.anchor(node, val, Stage("log_softmax" if log else "softmax", ops.softmax, [x], ["data"],
                                          {"log": log}))
    return h


def _softmax_module(log: bool) -> Callable:
    def h(im, node, val, mod, x):
        return _softmax(log)(im, node, val, x, mod.dim)
    return h


def _layer_norm(im, node, val, x, normalized_shape, weight=None, bias=None, eps=1e-5):
    im.f32(val, x)
    ndim = len(_pair(normalized_shape)) if isinstance(normalized_shape, (tuple, list)) else 1
    st = Stage("layer_norm", ops.layer_norm, [x, weight, bias], ["data", "gamma", "beta"],
               {"ndim": ndim, "eps": float(eps)})
    return im.anchor(node, val, st)


def _layer_norm_module(im, node, val, mod, x):
    w, b = im.module_param(mod, node, "weight"), im.module_param(mod, node, "bias")
    return _layer_norm(im, node, val, x, tuple(mod.normalized_shape), w, b, mod.eps)


def _max_pool(im, node, val, x, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
              return_indices=False):
    im.f32(val, x)
    if return_indices:
        raise Unsupported
    k = _pair(kernel_size)
    st = Stage("max_pool2d", ops.pool2d, [x], ["data"],
               {"kind": "max", "kernel": k, "stride": _pair(stride) if stride else k,
                "padding": _pair(padding), "dilation": _pair(dilation), "ceil_mode": bool(ceil_mode)})
    return im.anchor(node, val, st)


def _avg_pool(im, node, val, x, kernel_size, stride=None, padding=0, ceil_mode=False,
              count_include_pad=True, divisor_override=None):
    im.f32(val, x)
    if divisor_override is not None:
        raise Unsupported
    k = _pair(kernel_size)
    st = Stage("avg_pool2d", ops.pool2d, [x], ["data"],
               {"kind": "avg", "kernel": k, "stride": _pair(stride) if stride else k, "padding": _pair(padding),
                "ceil_mode": bool(ceil_mode), "count_include_pad": bool(count_include_pad)})
    return im.anchor(node, val, st)


def _adaptive_avg_pool(im, node, val, x, output_size):
    im.f32(val, x)
    h, w = im.shape(x)[-2:]
    oh, ow = val.shape[-2:]
    if (oh, ow) == (1, 1):
        return im.anchor(node, val, Stage("global_avg_pool2d", ops.global_avg_pool2d, [x], ["data"]))
    if h % oh or w % ow:
        raise Unsupported
    k = (h // oh, w // ow)
    return im.anchor(node, val, Stage("avg_pool2d", ops.pool2d, [x], ["data"],
                                      {"kind": "avg", "kernel": k, "stride": k, "padding": (0, 0)}))


def _pool_module(kind: str) -> Callable:
    def h(im, node, val, mod, x):
        if kind == "max":
            return _max_pool(im, node, val, x, mod.kernel_size, mod.stride, mod.padding, mod.dilation,
                             mod.ceil_mode, mod.return_indices)
        if kind == "avg":
            return _avg_pool(im, node, val, x, mod.kernel_size, mod.stride, mod.padding, mod.ceil_mode,
                             mod.count_include_pad, mod.divisor_override)
        return _adaptive_avg_pool(im, node, val, x, mod.output_size)
    return h


def _reduce(kind: str) -> Callable:
    def h(im, node, val, x, dim=None, keepdim=False, dtype=None):
        im.f32(val, x)
        if dtype is not None or not isinstance(keepdim, bool):
            raise Unsupported
        dims = () if dim is None else (dim,) if isinstance(dim, int) else tuple(dim)
        if not all(isinstance(d, int) for d in dims):
            raise Unsupported
        return im.anchor(node, val, Stage(kind, ops.reduce, [x], ["data"],
                                          {"kind": kind, "dims": dims, "keepdim": keepdim}))
    return h


def _flatten_module(im, node, val, mod, x):
    return _reshape_to_val(im, node, val, x)


MODULES: dict = {
    nn.Linear: _linear_module, nn.Conv2d: _conv2d_module, nn.BatchNorm2d: _batch_norm_module,
    nn.BatchNorm1d: _batch_norm_module,
    nn.ReLU: _unary_module("relu"), nn.SiLU: _unary_module("silu"), nn.Sigmoid: _unary_module("sigmoid"),
    nn.Tanh: _unary_module("tanh"), nn.ReLU6: _unary_module("relu6"), nn.Hardtanh: _hardtanh_module,
    nn.GELU: lambda im, node, val, mod, x: _gelu(im, node, val, x, mod.approximate),
    nn.Softmax: _softmax_module(False), nn.LogSoftmax: _softmax_module(True),
    nn.LayerNorm: _layer_norm_module, nn.MaxPool2d: _pool_module("max"), nn.AvgPool2d: _pool_module("avg"),
    nn.AdaptiveAvgPool2d: _pool_module("adaptive"), nn.Flatten: _flatten_module,
    nn.Dropout: _module_alias, nn.Dropout2d: _module_alias, nn.Identity: _module_alias,
}
_UNARY_FUNCS = {
    torch.relu: "relu", F.relu: "relu", torch.sigmoid: "sigmoid", F.sigmoid: "sigmoid", torch.tanh: "tanh",
    F.tanh: "tanh", F.silu: "silu", torch.exp: "exp", torch.sqrt: "sqrt", torch.rsqrt: "rsqrt",
    operator.neg: "neg", torch.neg: "neg", F.relu6: "relu6",
}
_BINARY_FUNCS = {
    operator.add: "add", torch.add: "add", operator.sub: "sub", torch.sub: "sub", operator.mul: "mul",
    torch.mul: "mul", operator.truediv: "div", torch.div: "div", torch.maximum: "maximum",
    torch.minimum: "minimum", operator.pow: "pow", torch.pow: "pow",
}
FUNCTIONS: dict = {
    **{f: _unary(k) for f, k in _UNARY_FUNCS.items()},
    **{f: _binary(k) for f, k in _BINARY_FUNCS.items()},
    torch.clamp: _clamp, torch.clip: _clamp, F.hardtanh: _hardtanh, torch.split: _split,
    torch.chunk: _chunk, torch.unbind: _unbind,
    F.gelu: _gelu, F.linear: _linear, torch.matmul: _matmul, operator.matmul: _matmul, torch.bmm: _matmul,
    torch.addmm: _addmm, F.conv2d: _conv2d, F.softmax: _softmax(False), torch.softmax: _softmax(False),
    F.log_softmax: _softmax(True), torch.log_softmax: _softmax(True), F.layer_norm: _layer_norm,
    F.max_pool2d: _max_pool, F.avg_pool2d: _avg_pool, F.adaptive_avg_pool2d: _adaptive_avg_pool,
    torch.flatten: _reshape_to_val, torch.reshape: _reshape_to_val, torch.squeeze: _reshape_to_val,
    torch.unsqueeze: _reshape_to_val, torch.permute: _permute, torch.transpose: _transpose, torch.t: _t,
    F.dropout: _dropout, operator.getitem: _getitem, F.batch_norm: _batch_norm_functional,
    torch.sum: _reduce("sum"), torch.mean: _reduce("mean"), torch.amax: _reduce("max"), torch.amin: _reduce("min"),
}
METHODS: dict = {
    "relu": _unary("relu"), "sigmoid": _unary("sigmoid"), "tanh": _unary("tanh"), "exp": _unary("exp"),
    "sqrt": _unary("sqrt"), "rsqrt": _unary("rsqrt"), "neg": _unary("neg"),
    "clamp": _clamp, "clip": _clamp, "split": _split, "chunk": _chunk, "unbind": _unbind,
    "add": _binary("add"), "sub": _binary("sub"), "mul": _binary("mul"), "div": _binary("div"),
    "pow": _binary("pow"), "matmul": _matmul, "bmm": _matmul,
    "softmax": _softmax(False), "log_softmax": _softmax(True),
    "view": _reshape_to_val, "reshape": _reshape_to_val, "flatten": _reshape_to_val,
    "squeeze": _reshape_to_val, "unsqueeze": _reshape_to_val, "view_as": _reshape_to_val,
    "reshape_as": _reshape_to_val, "permute": _permute, "transpose": _transpose, "t": _t,
    "expand": _expand, "contiguous": _contiguous,
    "sum": _reduce("sum"), "mean": _reduce("mean"), "amax": _reduce("max"), "amin": _reduce("min"),
}


# -- the torch.export table: ATen operator overloads -> handlers --------------------------
# The operator table of the ``torch.export`` importer: ATen operator overloads -> handlers.
#
# ``torch.export`` records a model as ATen operators (``torch.ops.aten.linear.default``,
# ``aten.add.Tensor``, ``aten.view.default``, ...) rather than the ``torch`` functions and
# modules ``torch.fx.symbolic_trace`` sees.  Most ATen overloads take the arguments of the
# functional form the fx table (``torch_handlers``) already lowers, so they reuse its
# handlers; the others (layer norm's extra ``cudnn_enable``, batch norm with its running
# statistics as arguments, ``_softmax``'s ``half_to_float``) get a small adapter here.  The
# program is functionalized first (``run_decompositions`` with no decompositions), so no
# in-place overload reaches the table.  An overload missing from :data:`ATEN` (``aten.embedding``,
# ``aten.scaled_dot_product_attention``, ``aten.cat``, ...) becomes a library
# call that runs the ATen operator itself, as the fx importer does for what it does not lower.
#
# TVM's ``relax.frontend.torch.from_exported_program`` keeps such a table too
# (``exported_program_translator.py``); the set here is what torchvision CNNs and Hugging
# Face BERT/GPT-2 blocks emit at ``torch.export``'s default (pre-dispatch ATen) level.

aten = torch.ops.aten


def _alias(im, node, val, x, *a, **k):
    return im.alias(node, x)


def _aten_layer_norm(im, node, val, x, normalized_shape, weight=None, bias=None, eps=1e-5, cudnn_enable=True):
    return _layer_norm(im, node, val, x, normalized_shape, weight, bias, eps)


def _aten_softmax(log: bool) -> Callable:
    def h(im, node, val, x, dim, half_to_float_or_dtype=None):
        # aten.softmax.int(x, dim, dtype=None); aten._softmax(x, dim, half_to_float)
        if half_to_float_or_dtype not in (None, False):
            raise Unsupported
        return _softmax(log)(im, node, val, x, dim)
    return h


def _aten_dropout(im, node, val, x, p=0.5, train=False):
    return _dropout(im, node, val, x, p, bool(train))


def _aten_batch_norm(im, node, val, x, weight, bias, running_mean, running_var, training, momentum, eps,
                     cudnn_enabled=True):
    if training:
        raise Unsupported
    return _batch_norm_stats(im, node, val, x, weight, bias, running_mean, running_var, eps)


def _aten_batch_norm_no_training(im, node, val, x, weight, bias, running_mean, running_var, momentum, eps):
    # returns (output, save_mean, save_invstd); the importer's getitem picks the output
    if not isinstance(val, (tuple, list)):
        raise Unsupported
    out = _batch_norm_stats(im, node, val[0], x, weight, bias, running_mean, running_var, eps)
    return (out, None, None)


def _aten_reduce(kind: str) -> Callable:
    def h(im, node, val, x, dim=None, keepdim=False, dtype=None):
        if isinstance(dim, (tuple, list)) and not dim:
            raise Unsupported  # ATen's dim=[]: every axis (left to torch)
        return _reduce(kind)(im, node, val, x, dim, keepdim, dtype)
    return h


def _aten_pow(im, node, val, x, exponent):
    return _binary("pow")(im, node, val, x, exponent)


def _aten_rsub(im, node, val, a, b, alpha=1):
    # rsub(a, b) = b - alpha * a
    if alpha != 1:
        raise Unsupported
    return _binary("sub", reverse=True)(im, node, val, a, b)


_UNARY = {"relu": "relu", "sigmoid": "sigmoid", "tanh": "tanh", "silu": "silu", "exp": "exp",
          "sqrt": "sqrt", "rsqrt": "rsqrt", "neg": "neg"}

ATEN: dict = {
    **{getattr(aten, name).default: _unary(kind) for name, kind in _UNARY.items()},
    aten.hardtanh.default: _hardtanh, aten.clamp.default: _clamp,
    aten.split.Tensor: _split, aten.split_with_sizes.default: _split, aten.slice.Tensor: _aten_slice,
    aten.chunk.default: _chunk, aten.unbind.int: _unbind,
    aten.gelu.default: _gelu,
    aten.add.Tensor: _binary("add"), aten.add.Scalar: _binary("add"),
    aten.sub.Tensor: _binary("sub"), aten.sub.Scalar: _binary("sub"), aten.rsub.Scalar: _aten_rsub,
    aten.mul.Tensor: _binary("mul"), aten.mul.Scalar: _binary("mul"),
    aten.div.Tensor: _binary("div"), aten.div.Scalar: _binary("div"),
    aten.maximum.default: _binary("maximum"), aten.minimum.default: _binary("minimum"),
    aten.pow.Tensor_Scalar: _aten_pow, aten.pow.Tensor_Tensor: _aten_pow,
    aten.linear.default: _linear, aten.matmul.default: _matmul, aten.mm.default: _matmul,
    aten.bmm.default: _matmul, aten.addmm.default: _addmm,
    aten.conv2d.default: _conv2d,
    aten.batch_norm.default: _aten_batch_norm,
    aten._native_batch_norm_legit_no_training.default: _aten_batch_norm_no_training,
    aten.layer_norm.default: _aten_layer_norm,
    aten.softmax.int: _aten_softmax(False), aten._softmax.default: _aten_softmax(False),
    aten.log_softmax.int: _aten_softmax(True), aten._log_softmax.default: _aten_softmax(True),
    aten.max_pool2d.default: _max_pool, aten.avg_pool2d.default: _avg_pool,
    aten.adaptive_avg_pool2d.default: _adaptive_avg_pool,
    aten.mean.dim: _aten_reduce("mean"), aten.sum.dim_IntList: _aten_reduce("sum"),
    aten.amax.default: _aten_reduce("max"), aten.amin.default: _aten_reduce("min"),
    aten.view.default: _reshape_to_val, aten.reshape.default: _reshape_to_val,
    aten._unsafe_view.default: _reshape_to_val, aten.flatten.using_ints: _reshape_to_val,
    aten.squeeze.dim: _reshape_to_val, aten.squeeze.dims: _reshape_to_val, aten.squeeze.default: _reshape_to_val,
    aten.unsqueeze.default: _reshape_to_val,
    aten.permute.default: _permute, aten.transpose.int: _transpose, aten.t.default: _t,
    aten.expand.default: _expand,
    aten.dropout.default: _aten_dropout, aten.clone.default: _alias, aten.contiguous.default: _alias,
    aten.alias.default: _alias, aten.detach.default: _alias,
}
ATEN = {k: v for k, v in ATEN.items() if v is not None}
