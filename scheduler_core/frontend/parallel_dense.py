"""Horizontal fusion of parallel linear layers on an fx graph (TVM's relay pass
``CombineParallelDense`` with ``to_batch=False``).

    x --linear(Wq, bq)--> q         x --linear(cat(Wq, Wk, Wv), cat(bq, bk, bv))--> qkv
    x --linear(Wk, bk)--> k   ==>   qkv --split([Nq, Nk, Nv], -1)--> q, k, v
    x --linear(Wv, bv)--> v

A transformer's query, key and value projections read the same input.  As three dense
functions they are three calls whose weights stream through the cache one after the other,
each too small to keep two cores busy for long; as one dense over the concatenated weights
they are one call of three times the width.  The importer turns the split into slice views
(``torch_handlers``), so each consumer reads its columns of the combined output in place,
with no copy.

What is combined: linear layers (``nn.Linear`` modules, ``F.linear`` and ATen's
``aten.linear``) that read the same fx node, whose weights (and biases, all or none) are
module attributes (constants) of one dtype.  A group of at least ``min_num_branches`` becomes
one linear placed before the first of them.  A linear whose weight depends on the inputs, and
ONNX's ``MatMul`` + ``Add`` form (a matmul whose bias is added by a separate node), are left
as they are.
"""

from __future__ import annotations

import operator

import torch
import torch.fx as fx
import torch.nn.functional as F
from torch import nn

__all__ = ["combine_parallel_dense"]

_ATEN_LINEAR = torch.ops.aten.linear.default
_ATEN_SPLIT = torch.ops.aten.split_with_sizes.default


def _attribute(gm: fx.GraphModule, node) -> torch.Tensor | None:
    """The tensor a ``get_attr`` node reads, else None."""
    if not isinstance(node, fx.Node) or node.op != "get_attr":
        return None
    obj = gm
    for part in str(node.target).split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    return obj if isinstance(obj, torch.Tensor) else None


def dense_operands(gm: fx.GraphModule, node: fx.Node) -> tuple | None:
    """``(x, weight, bias or None, aten)`` of a linear node with constant weight and bias, else None.

    weight : the (out_features, in_features) tensor; aten : whether the node is ATen's linear
    (the combined node and its split are then ATen operators too).
    """
    if node.op == "call_module":
        mod = gm.get_submodule(str(node.target))
        if type(mod) is nn.Linear and len(node.args) == 1 and not node.kwargs:
            return node.args[0], mod.weight, mod.bias, False
        return None
    if node.op != "call_function" or node.target not in (F.linear, _ATEN_LINEAR):
        return None
    args = list(node.args)
    names = ("input", "weight", "bias")
    for k in range(len(args), 3):
        args.append(node.kwargs.get(names[k]))
    if len(node.kwargs) > sum(n in node.kwargs for n in names):
        return None
    x, w_node, b_node = args[:3]
    weight = _attribute(gm, w_node)
    bias = _attribute(gm, b_node) if b_node is not None else None
    if weight is None or (b_node is not None and bias is None):
        return None
    return x, weight, bias, node.target is _ATEN_LINEAR


def combine_parallel_dense(gm: fx.GraphModule, min_num_branches: int = 2) -> int:
    """Combine the linear layers of ``gm`` that share their input (see the module docstring),
    in place; returns how many combined linears were made (0: ``gm`` is unchanged).

    The combined weights are registered on ``gm`` as buffers ``combined_dense_<k>_weight`` /
    ``_bias`` (float tensors, (sum of out_features, in_features) and (sum of out_features,)).
    """
    groups: dict = {}
    for node in gm.graph.nodes:
        parts = dense_operands(gm, node)
        if parts is None:
            continue
        x, weight, bias, aten = parts
        if not isinstance(x, fx.Node) or weight.dim() != 2 or not weight.is_floating_point():
            continue
        if bias is not None and (bias.dim() != 1 or bias.dtype != weight.dtype):
            continue
        key = (x, aten, tuple(weight.shape[1:]), weight.dtype, bias is not None)
        groups.setdefault(key, []).append((node, weight, bias))
    made = 0
    for (x, aten, _, _, has_bias), members in groups.items():
        if len(members) < max(2, min_num_branches):
            continue
        prefix = f"combined_dense_{made}"
        while hasattr(gm, f"{prefix}_weight"):
            prefix += "_"
        gm.register_buffer(f"{prefix}_weight", torch.cat([w.detach() for _, w, _ in members], 0))
        if has_bias:
            gm.register_buffer(f"{prefix}_bias", torch.cat([b.detach() for _, _, b in members], 0))
        sizes = [int(w.shape[0]) for _, w, _ in members]
        first = members[0][0]
        with gm.graph.inserting_before(first):
            w_node = gm.graph.get_attr(f"{prefix}_weight")
            b_node = gm.graph.get_attr(f"{prefix}_bias") if has_bias else None
            combined = gm.graph.call_function(_ATEN_LINEAR if aten else F.linear, (x, w_node, b_node))
            pieces = gm.graph.call_function(_ATEN_SPLIT if aten else torch.split, (combined, sizes, -1))
            outs = [gm.graph.call_function(operator.getitem, (pieces, k)) for k in range(len(members))]
        for (node, _, _), out in zip(members, outs):
            node.replace_all_uses_with(out)
            gm.graph.erase_node(node)
        made += 1
    if made:
        for node in list(gm.graph.nodes):
            if node.op == "get_attr" and not node.users:
                gm.graph.erase_node(node)
        gm.graph.lint()
        gm.recompile()
    return made
