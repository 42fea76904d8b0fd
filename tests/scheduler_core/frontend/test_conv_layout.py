"""Convolutions imported in NHWC (``conv_layout="NHWC"``, TVM's ConvertLayout): the fused
functions of a CNN compute and store NHWC values, read each other's outputs with no
permutation, keep the model's NCHW inputs and outputs, and still match torch, untuned and
with sampled tiled schedules."""

from __future__ import annotations

import io

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

import scheduler_core as sc  # noqa: E402
from scheduler_core.base.errors import InvalidWorkloadError  # noqa: E402
from scheduler_core.frontend import from_onnx, from_pytorch  # noqa: E402
from sketch_rules.init_population import sample_init_population  # noqa: E402
from sketch_rules.sketch_generation import generate_sketches  # noqa: E402


class _Net(nn.Module):
    """Each NHWC case: a folded conv + BN + ReLU stem with stride 2, max pooling, a residual
    block, a depthwise conv with ReLU6, a batch norm that cannot fold (after an add), average
    pooling, squeeze-and-excitation scaling, global pooling, flatten and a linear layer."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 5, stride=2, padding=2, bias=False), nn.BatchNorm2d(16), nn.ReLU())
        self.pool = nn.MaxPool2d(3, stride=2, padding=1)
        self.c1 = nn.Conv2d(16, 16, 3, padding=1)
        self.c2 = nn.Conv2d(16, 16, 3, padding=1)
        self.dw = nn.Sequential(nn.Conv2d(16, 16, 3, padding=1, groups=16), nn.ReLU6())
        self.bn = nn.BatchNorm2d(16)
        self.avg = nn.AvgPool2d(2, count_include_pad=False)
        self.se = nn.Conv2d(16, 16, 1)
        self.fc = nn.Linear(16, 10)

    def forward(self, x):
        x = self.pool(self.stem(x))
        x = torch.relu(self.c2(torch.relu(self.c1(x))) + x)
        x = self.bn(self.dw(x) + x)
        x = self.avg(x)
        x = x * torch.sigmoid(self.se(nn.functional.adaptive_avg_pool2d(x, 1)))
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))


def _imported(layout: str):
    torch.manual_seed(0)
    model = _Net().eval()
    with torch.no_grad():  # non-trivial batch-norm statistics
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 1.5)
    x = torch.randn(1, 3, 32, 32)
    with torch.no_grad():
        want = model(x).numpy()
    return x, want, from_pytorch(model, x, conv_layout=layout)


def test_nhwc_functions_store_nhwc_and_the_model_matches_torch():
    x, want, nhwc = _imported("NHWC")
    _, _, nchw = _imported("NCHW")
    assert [c.kind for c in nhwc.calls] == [c.kind for c in nchw.calls]  # the same fusion
    assert all(c.kind == "tir" for c in nhwc.calls)
    outputs = {o.name: o.type.shape for c in nhwc.calls for o in c.outputs}
    reference = {o.name: o.type.shape for c in nchw.calls for o in c.outputs}
    stored_nhwc = 0
    for c in nhwc.calls:
        out = c.outputs[0]
        if "conv2d" in c.func or "pool2d" in c.func:
            n, ch, h, w = reference[out.name]
            assert outputs[out.name] == (n, h, w, ch), c.func
            stored_nhwc += 1
    assert stored_nhwc >= 8
    # a conv reading another conv's output reads it as stored: an NHWC placeholder, no permutation
    c2 = next(c for c in nhwc.calls if c.func.startswith("fused_conv2d_bias_add_add"))  # the residual conv
    data = next(t for t in nhwc.functions[c2.func].dag.tensors if t.op.name == "data")
    assert tuple(int(s) for s in data.shape) == outputs[c2.args[0]]
    assert nhwc.outputs == nchw.outputs and want.shape == (1, 10)
    np.testing.assert_allclose(sc.build_graph(nhwc, "llvm")(x.numpy()), want, rtol=1e-4, atol=1e-5)


def test_nhwc_functions_build_with_tiled_schedules():
    x, want, graph = _imported("NHWC")
    tasks, _ = sc.extract_tasks(graph, "llvm")
    by_key = {t.workload_key: t for t in tasks}
    tiled = 0
    for _, _, func in list(graph.tir_calls()):
        if not func.name.startswith("fused_conv2d"):
            continue
        task = by_key[func.workload_key]
        policy = sc.SketchPolicy(task, sc.RandomModel(), seed=1)
        states = sample_init_population(policy, generate_sketches(policy), 4, np.random.default_rng(1))
        graph = graph.with_function(func.with_state(states[0]))
        tiled += 1
    assert tiled >= 5
    np.testing.assert_allclose(sc.build_graph(graph, "llvm")(x.numpy()), want, rtol=1e-4, atol=1e-5)


def test_an_unknown_conv_layout_is_rejected():
    model = nn.Conv2d(3, 4, 3)
    with pytest.raises(InvalidWorkloadError, match="conv_layout must be one of"):
        from_pytorch(model, torch.randn(1, 3, 8, 8), conv_layout="NCWH")


def test_an_onnx_model_imports_in_nhwc():
    onnx = pytest.importorskip("onnx")
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(8, 8, 3)).eval()
    x = torch.randn(1, 3, 16, 16)
    buf = io.BytesIO()
    torch.onnx.export(model, (x,), buf, dynamo=False, opset_version=17, input_names=["x"])
    graph = from_onnx(onnx.load_from_string(buf.getvalue()), conv_layout="NHWC")
    assert graph.calls[0].outputs[0].type.shape == (1, 16, 16, 8)
    with torch.no_grad():
        want = model(x).numpy()
    np.testing.assert_allclose(sc.build_graph(graph, "llvm")(x.numpy()), want, rtol=1e-4, atol=1e-5)
