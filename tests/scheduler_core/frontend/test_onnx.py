"""from_onnx: ONNX models built with onnx.helper, imported, run with the numpy reference
evaluator and compiled, and compared with ONNX's own reference evaluator."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("torch")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import scheduler_core as sc  # noqa: E402
from scheduler_core.base.errors import InvalidWorkloadError  # noqa: E402
from scheduler_core.frontend import from_onnx  # noqa: E402
from scheduler_core.graph import run_reference  # noqa: E402

RTOL = 1e-4
F32 = TensorProto.FLOAT


def _w(rng, name, *shape, scale=0.3):
    return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name)


def _model(nodes, inputs, outputs, inits, opset=17):
    graph = helper.make_graph(nodes, "m", inputs, outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _check(model, *xs):
    want = ReferenceEvaluator(model).run(None, {v.name: x for v, x in zip(model.graph.input, xs)})
    graph = from_onnx(model)
    for got in (run_reference(graph, *xs), sc.build_graph(graph).run(*xs)):
        got = got if isinstance(got, (tuple, list)) else [got]
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=RTOL, atol=RTOL * max(1.0, float(np.abs(w).max())))
    return graph


def small_cnn(rng):
    """Conv + BatchNormalization + Relu, MaxPool, Conv + Relu, GlobalAveragePool, Flatten, Gemm."""
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], strides=[1, 1]),
        helper.make_node("BatchNormalization", ["c1", "g", "beta", "mean", "var"], ["bn"], epsilon=1e-5),
        helper.make_node("Relu", ["bn"], ["r1"]),
        helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["p1", "w2"], ["c2"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c2"], ["r2"]),
        helper.make_node("GlobalAveragePool", ["r2"], ["gap"]),
        helper.make_node("Flatten", ["gap"], ["flat"], axis=1),
        helper.make_node("Gemm", ["flat", "fc_w", "fc_b"], ["y"], transB=1),
    ]
    var = numpy_helper.from_array((rng.random(8) + 0.5).astype(np.float32), "var")
    inits = [_w(rng, "w1", 8, 3, 3, 3), _w(rng, "b1", 8), _w(rng, "g", 8), _w(rng, "beta", 8), _w(rng, "mean", 8),
             var, _w(rng, "w2", 16, 8, 3, 3), _w(rng, "fc_w", 10, 16), _w(rng, "fc_b", 10)]
    return _model(nodes, [helper.make_tensor_value_info("x", F32, [1, 3, 16, 16])],
                  [helper.make_tensor_value_info("y", F32, [1, 10])], inits)


def test_a_small_cnn_imports_lowered_with_the_batch_norm_folded():
    rng = np.random.default_rng(0)
    graph = _check(small_cnn(rng), rng.standard_normal((1, 3, 16, 16)).astype(np.float32))
    assert all(c.kind == "tir" for c in graph.calls), [c.func for c in graph.calls if c.kind != "tir"]
    funcs = [f.name for _, _, f in graph.tir_calls()]
    assert funcs[0].startswith("fused_conv2d_bias_add_relu")  # Conv + BN (folded) + Relu
    assert not any("mean" in p.name or "var" in p.name for p in graph.params)


def test_an_attention_block_with_folded_shape_arithmetic():
    """MatMul projections, a Reshape whose shape is computed by Shape/Gather/Unsqueeze/Concat
    (folded at import), Transpose, scaled scores, Softmax, LayerNormalization, Gelu (opset 20)."""
    rng = np.random.default_rng(1)
    s, d, h = 6, 8, 2

    def const(name, value):
        return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(np.array(value, np.int64)))

    nodes = [
        helper.make_node("MatMul", ["x", "wq"], ["q0"]), helper.make_node("MatMul", ["x", "wk"], ["k0"]),
        helper.make_node("Shape", ["x"], ["xs"]), const("i0", 0), const("heads", [h, d // h]),
        helper.make_node("Gather", ["xs", "i0"], ["n"], axis=0), const("ax0", [0]),
        helper.make_node("Unsqueeze", ["n", "ax0"], ["n1"]),
        helper.make_node("Concat", ["n1", "heads"], ["shape"], axis=0),
        helper.make_node("Reshape", ["q0", "shape"], ["q1"]), helper.make_node("Reshape", ["k0", "shape"], ["k1"]),
        helper.make_node("Transpose", ["q1"], ["q"], perm=[1, 0, 2]),
        helper.make_node("Transpose", ["k1"], ["kt"], perm=[1, 2, 0]),
        helper.make_node("MatMul", ["q", "kt"], ["sc0"]),
        helper.make_node("Mul", ["sc0", "scale"], ["sc"]),
        helper.make_node("Softmax", ["sc"], ["att"], axis=-1),
        helper.make_node("MatMul", ["att", "q"], ["o0"]),
        helper.make_node("Transpose", ["o0"], ["o1"], perm=[1, 0, 2]),
        helper.make_node("Reshape", ["o1", "xs"], ["o"]),
        helper.make_node("Add", ["o", "x"], ["res"]),
        helper.make_node("LayerNormalization", ["res", "ln_g", "ln_b"], ["ln"], axis=-1, epsilon=1e-5),
        helper.make_node("Gelu", ["ln"], ["y"]),
    ]
    inits = [_w(rng, "wq", d, d), _w(rng, "wk", d, d), _w(rng, "ln_g", d), _w(rng, "ln_b", d),
             numpy_helper.from_array(np.array(1 / np.sqrt(d // h), np.float32), "scale")]
    model = _model(nodes, [helper.make_tensor_value_info("x", F32, [s, d])],
                   [helper.make_tensor_value_info("y", F32, [s, d])], inits, opset=20)
    graph = _check(model, rng.standard_normal((s, d)).astype(np.float32))
    kinds = " ".join(f.name for _, _, f in graph.tir_calls())
    assert "softmax" in kinds and "layer_norm" in kinds and "gelu" in kinds
    assert all(c.kind == "tir" for c in graph.calls), [c.func for c in graph.calls if c.kind != "tir"]


def test_the_file_and_its_bytes_import_the_same(tmp_path):
    model = small_cnn(np.random.default_rng(0))
    path = tmp_path / "cnn.onnx"
    onnx.save(model, str(path))
    keys = [[f.workload_key for _, _, f in g.tir_calls()] for g in (from_onnx(str(path)), from_onnx(path.read_bytes()))]
    assert keys[0] == keys[1] and len(keys[0]) == 5  # conv+bn+relu, pool, conv+relu, pool, gemm


def test_unsupported_and_malformed_models_are_named():
    x = helper.make_tensor_value_info("x", F32, [4])
    y = helper.make_tensor_value_info("y", F32, [4])
    topk = _model([helper.make_node("Hardmax", ["x"], ["y"], name="pick")], [x], [y], [])
    with pytest.raises(InvalidWorkloadError, match=r"node 'pick' \(Hardmax\): op type Hardmax is not supported"):
        from_onnx(topk)
    with pytest.raises(InvalidWorkloadError, match="not an ONNX model"):
        from_onnx(b"\x00 definitely not protobuf")
    old = _model([helper.make_node("Relu", ["x"], ["y"])], [x], [y], [], opset=11)
    with pytest.raises(InvalidWorkloadError, match="opset 11"):
        from_onnx(old)
    sym = _model([helper.make_node("Relu", ["x"], ["y"])], [helper.make_tensor_value_info("x", F32, ["n"])], [y], [])
    with pytest.raises(InvalidWorkloadError, match="symbolic dims"):
        from_onnx(sym)
    graph = from_onnx(sym, shape_dict={"x": (4,)})
    assert [tuple(v.type.shape) for v in graph.inputs] == [(4,)]


def test_clips_lower_and_fuse_into_the_convolution():
    """MobileNetV2's ONNX export spells ReLU6 as Clip(0, 6): it is the same relu6 as torch's;
    another range is a clip; both fuse into the convolution (one call, no library call)."""
    rng = np.random.default_rng(0)
    lo, six, neg = (numpy_helper.from_array(np.array(v, np.float32), n)
                    for v, n in ((0, "lo"), (6, "six"), (-1, "neg")))
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Clip", ["c", "lo", "six"], ["r"]),
             helper.make_node("Clip", ["r", "neg", "lo"], ["y"])]
    model = _model(nodes, [helper.make_tensor_value_info("x", F32, [1, 3, 8, 8])],
                   [helper.make_tensor_value_info("y", F32, [1, 4, 8, 8])],
                   [_w(rng, "w", 4, 3, 3, 3, scale=3.0), lo, six, neg])
    graph = _check(model, rng.standard_normal((1, 3, 8, 8)).astype(np.float32) * 3)
    kinds = [(c.kind, c.func) for c in graph.calls]
    assert len(kinds) == 1 and kinds[0][0] == "tir" and "relu6_clip" in kinds[0][1], kinds
