"""The operator table of the ``torch.export`` importer: ATen operator overloads -> handlers.

``torch.export`` records a model as ATen operators (``torch.ops.aten.linear.default``,
``aten.add.Tensor``, ``aten.view.default``, ...) rather than the ``torch`` functions and
modules ``torch.fx.symbolic_trace`` sees.  Most ATen overloads take the arguments of the
functional form the fx table (``torch_handlers``) already lowers, so they reuse its
handlers; the others (layer norm's extra ``cudnn_enable``, batch norm with its running
statistics as arguments, ``_softmax``'s ``half_to_float``) get a small adapter here.  The
program is functionalized first (``run_decompositions`` with no decompositions), so no
in-place overload reaches the table.  An overload missing from :data:`ATEN` (``aten.embedding``,
``aten.scaled_dot_product_attention``, ``aten.slice``, ``aten.cat``, ...) becomes a library
call that runs the ATen operator itself, as the fx importer does for what it does not lower.

TVM's ``relax.frontend.torch.from_exported_program`` keeps such a table too
(``exported_program_translator.py``); the set here is what torchvision CNNs and Hugging
Face BERT/GPT-2 blocks emit at ``torch.export``'s default (pre-dispatch ATen) level.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from .torch_handlers import (
    Unsupported,
    _adaptive_avg_pool,
    _addmm,
    _avg_pool,
    _batch_norm_stats,
    _binary,
    _conv2d,
    _dropout,
    _expand,
    _gelu,
    _layer_norm,
    _linear,
    _matmul,
    _max_pool,
    _permute,
    _reduce,
    _reshape_to_val,
    _softmax,
    _t,
    _transpose,
    _unary,
)

__all__ = ["ATEN"]

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
    aten.hardtanh.default: None,  # relu6 is hardtanh(0, 6): left to torch (a library call)
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
