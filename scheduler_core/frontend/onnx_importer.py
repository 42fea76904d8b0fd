"""Import an ONNX model as a Graph (TVM's ``relay.frontend.from_onnx``).

    graph = from_onnx("model.onnx")             # or a ModelProto, or the file's bytes
        onnx.checker + onnx.shape_inference       a malformed model is refused, every value's
                                                  static shape and dtype is known
        each node -> torch operators in an fx graph (this module's ONNX_OPS), constants folded
        the fx graph -> the PyTorch importer's walk (pytorch.TorchImporter): lowered to tensor
                        expressions, fused; what it does not lower runs torch (a library call)

The ONNX operators are translated into the torch operators the PyTorch importer already
lowers (Conv -> ``F.conv2d``, Gemm -> ``F.linear``, BatchNormalization -> ``F.batch_norm``,
LayerNormalization -> ``F.layer_norm``, ...), so both importers share one operator library
and one fusion.  Shape computations (Shape, Gather, Concat, Unsqueeze, Cast, ... on values
that do not depend on the inputs) are folded with ONNX's reference evaluator at import time;
shapes are static (the graph inputs' shapes, or ``shape_dict``).

Operators: Conv (2-D), Gemm, MatMul, Add, Sub, Mul, Div, Pow, Relu, Sigmoid, Tanh, Exp,
Sqrt, Neg, Erf, Gelu, Clip, BatchNormalization, LayerNormalization, MaxPool, AveragePool,
GlobalAveragePool, Flatten, Reshape, Transpose, Squeeze, Unsqueeze, Softmax, LogSoftmax,
ReduceMean, ReduceSum, Concat, Split, Slice, Gather, Expand, Identity, Dropout, Cast,
Constant, Shape (opsets 13-21 of the default domain).  Any other operator, or an argument
outside what a translation covers, is an InvalidWorkloadError naming the node and its op
type.
"""

from __future__ import annotations

import operator
import os
from collections.abc import Callable
from typing import Any

import numpy as np
import onnx
import torch
import torch.fx as fx
import torch.nn.functional as F
from onnx import helper, numpy_helper, shape_inference
from onnx.reference import ReferenceEvaluator
from torch import nn

from scheduler_core.base.errors import InvalidWorkloadError
from scheduler_core.graph.ir import Graph

from .pytorch import import_fx_graph

__all__ = ["from_onnx", "ONNX_OPS", "OPSETS"]

OPSETS = range(13, 22)  # the default domain's opsets this importer reads (13-21)


class _Unsupported(Exception):
    """An argument outside what the translation covers (the message says which)."""


def from_onnx(model: Any, shape_dict: dict | None = None, conv_layout: str = "NHWC") -> Graph:
    """The Graph of an ONNX model.

    model : a path (str or os.PathLike) to an ``.onnx`` file, its bytes, or an
        ``onnx.ModelProto``
    shape_dict : optional {input name: shape} for inputs whose shapes have symbolic dims
    conv_layout : ``"NCHW"`` or ``"NHWC"``, the layout convolutions compute in (as in
        ``from_pytorch``)
    Returns a Graph whose inputs are the model's graph inputs (initializers excluded, in
    order), whose params are the initializers (bound), and whose outputs are the model's.
    Raises InvalidWorkloadError for a file that is not an ONNX model, a model the checker
    rejects, an opset outside 13-21, an input without a static shape, or a node whose op
    type or arguments are not covered (the message names the node and its op type).
    """
    proto = _load(model)
    try:
        onnx.checker.check_model(proto)
    except Exception as e:
        raise InvalidWorkloadError(f"the ONNX model is malformed: {str(e).splitlines()[0]}") from e
    opset = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), None)
    if opset not in OPSETS:
        raise InvalidWorkloadError(f"the ONNX model uses opset {opset} of the default domain; "
                                   f"this importer reads opsets {OPSETS.start}-{OPSETS.stop - 1}")
    shape_dict = dict(shape_dict or {})
    inits = {t.name: numpy_helper.to_array(t) for t in proto.graph.initializer}
    inputs = [v for v in proto.graph.input if v.name not in inits]
    input_shapes = {}
    for v in inputs:
        dims = shape_dict.get(v.name)
        if dims is None:
            dims = [d.dim_value if d.HasField("dim_value") else None for d in v.type.tensor_type.shape.dim]
            if any(d is None or d <= 0 for d in dims):
                raise InvalidWorkloadError(f"model input {v.name!r} has symbolic dims {dims}; give its shape "
                                           "in shape_dict", f"inputs.{v.name}")
        input_shapes[v.name] = tuple(int(d) for d in dims)
        _set_static_shape(v, input_shapes[v.name])
    try:
        inferred = shape_inference.infer_shapes(proto, strict_mode=True, data_prop=True)
    except Exception as e:
        raise InvalidWorkloadError(f"ONNX shape inference failed: {str(e).splitlines()[0]}") from e
    shapes = {v.name: tuple(d.dim_value for d in v.type.tensor_type.shape.dim)
              for v in [*inferred.graph.value_info, *inferred.graph.output, *inferred.graph.input]
              if v.type.tensor_type.HasField("shape")
              and all(d.HasField("dim_value") for d in v.type.tensor_type.shape.dim)}
    tr = _Translator(inits, shapes, opset)
    for v in inputs:
        tr.placeholder(v.name, v.type.tensor_type.elem_type)
    for node in proto.graph.node:
        tr.node(node)
    gm = tr.finish([o.name for o in proto.graph.output])
    examples = [_example(input_shapes[v.name], v.type.tensor_type.elem_type) for v in inputs]
    return import_fx_graph(gm, tuple(examples), "the translated ONNX model", conv_layout=conv_layout)


def _load(model: Any):
    try:
        if isinstance(model, onnx.ModelProto):
            return model
        if isinstance(model, (bytes, bytearray)):
            return onnx.load_from_string(bytes(model))
        if isinstance(model, (str, os.PathLike)):
            return onnx.load(os.fspath(model))
    except Exception as e:  # protobuf DecodeError, OSError
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise InvalidWorkloadError(f"not an ONNX model: {first}") from e
    raise InvalidWorkloadError(f"from_onnx takes a path, bytes or an onnx.ModelProto, got {type(model).__name__}")


def _set_static_shape(value_info, shape: tuple) -> None:
    dims = value_info.type.tensor_type.shape.dim
    del dims[:]
    for d in shape:
        dims.add().dim_value = int(d)


def _torch_dtype(elem_type: int) -> torch.dtype:
    return torch.from_numpy(np.zeros(0, helper.tensor_dtype_to_np_dtype(elem_type))).dtype


def _example(shape: tuple, elem_type: int) -> torch.Tensor:
    dtype = _torch_dtype(elem_type)
    if dtype.is_floating_point:
        return torch.randn(shape, generator=torch.Generator().manual_seed(0)).to(dtype)
    return torch.zeros(shape, dtype=dtype)


class _Translator:
    """Builds the fx graph: ONNX value name -> fx Node (or a folded numpy constant)."""

    def __init__(self, inits: dict, shapes: dict, opset: int):
        self.root = nn.Module()
        self.g = fx.Graph()
        self.values: dict[str, Any] = {}
        self.consts: dict[str, np.ndarray] = dict(inits)
        self.shapes, self.opset = shapes, opset
        self._n = 0

    def placeholder(self, name: str, elem_type: int) -> None:
        self.values[name] = self.g.placeholder(_py_name(name))

    def tensor(self, name: str) -> Any:
        """The fx node of value ``name`` (a constant becomes a weight of the module)."""
        if name in self.values:
            return self.values[name]
        arr = self.consts[name]
        attr = f"c{self._n}_{_py_name(name)}"
        self._n += 1
        self.root.register_buffer(attr, torch.from_numpy(np.array(arr, copy=True)))
        node = self.g.get_attr(attr)
        self.values[name] = node
        return node

    def const(self, node, k: int, what: str) -> np.ndarray | None:
        """Input ``k`` of ``node`` as a numpy constant (None when absent); _Unsupported when it is
        computed from the model's inputs."""
        if k >= len(node.input) or not node.input[k]:
            return None
        name = node.input[k]
        if name not in self.consts:
            raise _Unsupported(f"its {what} ({name!r}) is computed at run time; only constant {what}s "
                               "are supported")
        return self.consts[name]

    def shape(self, name: str) -> tuple:
        if name in self.consts:
            return tuple(self.consts[name].shape)
        if name not in self.shapes:
            raise _Unsupported(f"the shape of {name!r} is unknown")
        return self.shapes[name]

    def call(self, fn: Callable, *args: Any, **kwargs: Any) -> fx.Node:
        return self.g.call_function(fn, tuple(args), kwargs)

    def node(self, node) -> None:
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        if node.input and all((not i) or i in self.consts for i in node.input) and node.op_type not in ("Dropout",):
            try:
                self._fold(node)
                return
            except Exception:
                pass  # not foldable by the reference evaluator: translate it
        handler = ONNX_OPS.get(node.op_type)
        where = f"node {node.name or node.output[0]!r} ({node.op_type})"
        if handler is None:
            raise InvalidWorkloadError(f"{where}: op type {node.op_type} is not supported by from_onnx")
        try:
            out = handler(self, node, attrs)
        except _Unsupported as e:
            raise InvalidWorkloadError(f"{where}: {e}") from None
        except (KeyError, IndexError, TypeError, ValueError) as e:
            raise InvalidWorkloadError(f"{where}: cannot translate it ({type(e).__name__}: {e})") from None
        if out is None:
            return  # Constant, Shape: the value is a constant (self.consts)
        outs = out if isinstance(out, (tuple, list)) else [out]
        for name, v in zip(node.output, outs):
            if name:
                self.values[name] = v

    def _fold(self, node) -> None:
        """Compute a node whose inputs are all constants now (ONNX's reference evaluator)."""
        ins = [i for i in node.input if i]
        graph = helper.make_graph(
            [node], "fold",
            [helper.make_tensor_value_info(i, helper.np_dtype_to_tensor_dtype(self.consts[i].dtype),
                                           self.consts[i].shape) for i in ins],
            [helper.make_tensor_value_info(o, 0, None) for o in node.output if o])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", self.opset)])
        results = ReferenceEvaluator(model).run(None, {i: self.consts[i] for i in ins})
        for name, v in zip([o for o in node.output if o], results):
            self.consts[name] = np.asarray(v)

    def finish(self, outputs: list) -> fx.GraphModule:
        outs = [self.tensor(o) for o in outputs]
        self.g.output(outs[0] if len(outs) == 1 else tuple(outs))
        return fx.GraphModule(self.root, self.g)


def _py_name(name: str) -> str:
    s = "".join(c if c.isalnum() else "_" for c in name)
    return s if s and not s[0].isdigit() else f"v_{s}"


def _pads2d(attrs: dict, what: str) -> tuple:
    if attrs.get("auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET"):
        raise _Unsupported(f"auto_pad {attrs['auto_pad']!r} is not supported; give explicit pads")
    pads = list(attrs.get("pads", [0, 0, 0, 0]))
    if len(pads) != 4 or pads[:2] != pads[2:]:
        raise _Unsupported(f"{what} needs symmetric 2-D pads, got {pads}")
    return tuple(pads[:2])


# -- translations: (translator, node, attrs) -> fx node(s) -----------------------------------
def _t_conv(tr, node, a):
    if len(tr.shape(node.input[1])) != 4:
        raise _Unsupported("only 2-D convolutions are supported")
    bias = tr.tensor(node.input[2]) if len(node.input) > 2 and node.input[2] else None
    return tr.call(F.conv2d, tr.tensor(node.input[0]), tr.tensor(node.input[1]), bias,
                   tuple(a.get("strides", [1, 1])), _pads2d(a, "Conv"), tuple(a.get("dilations", [1, 1])),
                   int(a.get("group", 1)))


def _t_gemm(tr, node, a):
    x, w = tr.tensor(node.input[0]), tr.tensor(node.input[1])
    c = tr.tensor(node.input[2]) if len(node.input) > 2 and node.input[2] else None
    alpha, beta = float(a.get("alpha", 1.0)), float(a.get("beta", 1.0))
    if a.get("transA", 0):
        x = tr.call(torch.t, x)
    if a.get("transB", 0) and alpha == 1.0 and beta == 1.0:
        return tr.call(F.linear, x, w, c)
    y = tr.call(torch.matmul, x, tr.call(torch.t, w) if a.get("transB", 0) else w)
    if alpha != 1.0:
        y = tr.call(torch.mul, y, alpha)
    if c is not None:
        y = tr.call(torch.add, y, c if beta == 1.0 else tr.call(torch.mul, c, beta))
    return y


def _binary(fn: Callable) -> Callable:
    def t(tr, node, a):
        return tr.call(fn, tr.tensor(node.input[0]), tr.tensor(node.input[1]))
    return t


def _unary(fn: Callable) -> Callable:
    def t(tr, node, a):
        return tr.call(fn, tr.tensor(node.input[0]))
    return t


def _t_gelu(tr, node, a):
    approx = a.get("approximate", b"none")
    approx = approx.decode() if isinstance(approx, bytes) else approx
    return tr.call(F.gelu, tr.tensor(node.input[0]), approximate=approx)


def _t_clip(tr, node, a):
    lo, hi = tr.const(node, 1, "min"), tr.const(node, 2, "max")
    lo = None if lo is None else float(lo)
    hi = None if hi is None else float(hi)
    x = tr.tensor(node.input[0])
    if lo == 0.0 and hi is None:
        return tr.call(torch.relu, x)
    if lo == 0.0 and hi == 6.0:  # MobileNet's ReLU6, lowered and fused as F.relu6
        return tr.call(F.relu6, x)
    return tr.call(torch.clamp, x, lo, hi)


def _t_batch_norm(tr, node, a):
    if len(node.output) > 1 and any(node.output[1:]):
        raise _Unsupported("training-mode outputs (running mean and var) are not supported")
    x, scale, bias, mean, var = (tr.tensor(i) for i in node.input[:5])
    return tr.call(F.batch_norm, x, mean, var, scale, bias, False, 0.0, float(a.get("epsilon", 1e-5)))


def _t_layer_norm(tr, node, a):
    shape = tr.shape(node.input[0])
    axis = int(a.get("axis", -1)) % len(shape)
    if len(node.output) > 1 and any(node.output[1:]):
        raise _Unsupported("the mean and inverse std outputs are not supported")
    w = tr.tensor(node.input[1])
    b = tr.tensor(node.input[2]) if len(node.input) > 2 and node.input[2] else None
    return tr.call(F.layer_norm, tr.tensor(node.input[0]), tuple(shape[axis:]), w, b,
                   float(a.get("epsilon", 1e-5)))


def _t_max_pool(tr, node, a):
    if len(node.output) > 1 and any(node.output[1:]):
        raise _Unsupported("the indices output is not supported")
    k = tuple(a["kernel_shape"])
    if len(k) != 2:
        raise _Unsupported("only 2-D pooling is supported")
    return tr.call(F.max_pool2d, tr.tensor(node.input[0]), k, tuple(a.get("strides", k)),
                   _pads2d(a, "MaxPool"), tuple(a.get("dilations", [1, 1])), bool(a.get("ceil_mode", 0)))


def _t_avg_pool(tr, node, a):
    k = tuple(a["kernel_shape"])
    if len(k) != 2:
        raise _Unsupported("only 2-D pooling is supported")
    return tr.call(F.avg_pool2d, tr.tensor(node.input[0]), k, tuple(a.get("strides", k)),
                   _pads2d(a, "AveragePool"), bool(a.get("ceil_mode", 0)), bool(a.get("count_include_pad", 0)))


def _t_global_avg_pool(tr, node, a):
    if len(tr.shape(node.input[0])) != 4:
        raise _Unsupported("only 2-D pooling is supported")
    return tr.call(F.adaptive_avg_pool2d, tr.tensor(node.input[0]), 1)


def _to_shape(tr, node, a):
    """Flatten, Reshape, Squeeze, Unsqueeze: a reshape to the inferred output shape."""
    return tr.call(torch.reshape, tr.tensor(node.input[0]), tuple(int(d) for d in tr.shape(node.output[0])))


def _t_transpose(tr, node, a):
    rank = len(tr.shape(node.input[0]))
    perm = tuple(a.get("perm", range(rank - 1, -1, -1)))
    return tr.call(torch.permute, tr.tensor(node.input[0]), perm)


def _softmax(fn: Callable) -> Callable:
    def t(tr, node, a):
        return tr.call(fn, tr.tensor(node.input[0]), int(a.get("axis", -1)))
    return t


def _reduce(fn: Callable, axes_input_from: int) -> Callable:
    def t(tr, node, a):
        axes = a.get("axes")
        if axes is None and tr.opset >= axes_input_from:
            axes = tr.const(node, 1, "axes")
        keep = bool(a.get("keepdims", 1))
        if axes is None or len(axes) == 0:
            if a.get("noop_with_empty_axes", 0):
                return tr.tensor(node.input[0])
            axes = list(range(len(tr.shape(node.input[0]))))
        return tr.call(fn, tr.tensor(node.input[0]), tuple(int(x) for x in axes), keep)
    return t


def _t_concat(tr, node, a):
    return tr.call(torch.cat, [tr.tensor(i) for i in node.input], int(a["axis"]))


def _t_split(tr, node, a):
    axis = int(a.get("axis", 0))
    dim = tr.shape(node.input[0])[axis]
    sizes = a.get("split")
    if sizes is None:
        sizes = tr.const(node, 1, "split")
    if sizes is None:
        n = len(node.output)
        sizes = [dim // n + (1 if k < dim % n else 0) for k in range(n)] if "num_outputs" not in a else \
            [-(-dim // n)] * (n - 1) + [dim - -(-dim // n) * (n - 1)]
    parts = tr.call(torch.split, tr.tensor(node.input[0]), [int(s) for s in sizes], axis)
    return [tr.call(operator.getitem, parts, k) for k in range(len(node.output))]


def _t_slice(tr, node, a):
    starts, ends = tr.const(node, 1, "starts"), tr.const(node, 2, "ends")
    axes, steps = tr.const(node, 3, "axes"), tr.const(node, 4, "steps")
    shape = tr.shape(node.input[0])
    rank = len(shape)
    axes = list(range(len(starts))) if axes is None else [int(x) % rank for x in axes]
    steps = [1] * len(starts) if steps is None else [int(s) for s in steps]
    index: list = [slice(None)] * rank
    for ax, s, e, st in zip(axes, starts, ends, steps):
        if st <= 0:
            raise _Unsupported("negative or zero slice steps are not supported")
        s, e = int(max(min(s, 2 ** 62), -(2 ** 62))), int(max(min(e, 2 ** 62), -(2 ** 62)))
        index[ax] = slice(*slice(s, e, st).indices(shape[ax]))
    return tr.call(operator.getitem, tr.tensor(node.input[0]), tuple(index))


def _t_gather(tr, node, a):
    axis = int(a.get("axis", 0))
    idx = tr.const(node, 1, "indices") if node.input[1] in tr.consts else None
    data = tr.tensor(node.input[0])
    if idx is not None:
        rank = len(tr.shape(node.input[0]))
        if idx.ndim == 0:
            index = [slice(None)] * rank
            index[axis % rank] = int(idx)
            return tr.call(operator.getitem, data, tuple(index))
        return tr.call(torch.index_select, data, axis, tr.tensor(node.input[1])) if idx.ndim == 1 else \
            tr.call(torch.take_along_dim, data, tr.tensor(node.input[1]), axis)
    if axis != 0:
        raise _Unsupported("a gather with run-time indices is supported on axis 0 only")
    return tr.call(F.embedding, tr.call(torch.Tensor.long, tr.tensor(node.input[1])), data)


def _t_expand(tr, node, a):
    out = tuple(int(d) for d in tr.shape(node.output[0]))
    x = tr.tensor(node.input[0])
    if len(tr.shape(node.input[0])) != len(out):
        x = tr.call(torch.reshape, x, (1,) * (len(out) - len(tr.shape(node.input[0]))) + tr.shape(node.input[0]))
    return tr.call(torch.Tensor.expand, x, out)


def _t_identity(tr, node, a):
    return tr.tensor(node.input[0])


def _t_cast(tr, node, a):
    return tr.call(torch.Tensor.to, tr.tensor(node.input[0]), _torch_dtype(int(a["to"])))


def _t_constant(tr, node, a):
    if "value" in a:
        tr.consts[node.output[0]] = numpy_helper.to_array(a["value"])
    elif "value_float" in a:
        tr.consts[node.output[0]] = np.array(a["value_float"], np.float32)
    elif "value_floats" in a:
        tr.consts[node.output[0]] = np.array(a["value_floats"], np.float32)
    elif "value_int" in a:
        tr.consts[node.output[0]] = np.array(a["value_int"], np.int64)
    elif "value_ints" in a:
        tr.consts[node.output[0]] = np.array(a["value_ints"], np.int64)
    else:
        raise _Unsupported(f"constant attributes {sorted(a)} are not supported")


def _t_shape(tr, node, a):
    shape = np.array(tr.shape(node.input[0]), np.int64)
    start, end = a.get("start", 0), a.get("end")
    tr.consts[node.output[0]] = shape[start:end]


ONNX_OPS: dict[str, Callable] = {
    "Conv": _t_conv, "Gemm": _t_gemm, "MatMul": _binary(torch.matmul),
    "Add": _binary(torch.add), "Sub": _binary(torch.sub), "Mul": _binary(torch.mul), "Div": _binary(torch.div),
    "Pow": _binary(torch.pow),
    "Relu": _unary(torch.relu), "Sigmoid": _unary(torch.sigmoid), "Tanh": _unary(torch.tanh),
    "Exp": _unary(torch.exp), "Sqrt": _unary(torch.sqrt), "Neg": _unary(torch.neg), "Erf": _unary(torch.erf),
    "Gelu": _t_gelu, "Clip": _t_clip,
    "BatchNormalization": _t_batch_norm, "LayerNormalization": _t_layer_norm,
    "MaxPool": _t_max_pool, "AveragePool": _t_avg_pool, "GlobalAveragePool": _t_global_avg_pool,
    "Flatten": _to_shape, "Reshape": _to_shape, "Squeeze": _to_shape, "Unsqueeze": _to_shape,
    "Transpose": _t_transpose, "Softmax": _softmax(torch.softmax), "LogSoftmax": _softmax(torch.log_softmax),
    "ReduceMean": _reduce(torch.mean, 18), "ReduceSum": _reduce(torch.sum, 13),
    "Concat": _t_concat, "Split": _t_split, "Slice": _t_slice, "Gather": _t_gather, "Expand": _t_expand,
    "Identity": _t_identity, "Dropout": _t_identity, "Cast": _t_cast,
    "Constant": _t_constant, "Shape": _t_shape,
}
