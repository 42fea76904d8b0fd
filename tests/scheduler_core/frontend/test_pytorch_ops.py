"""from_pytorch, operator by operator: each imported graph agrees with torch.

Every case runs the graph twice, with the numpy reference evaluator (``run_reference``) and
compiled (``build_graph``, default schedules), and compares both with torch's own output.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402

import scheduler_core as sc  # noqa: E402
from scheduler_core import te  # noqa: E402
from scheduler_core.base.errors import InvalidWorkloadError  # noqa: E402
from scheduler_core.dag.reference import evaluate  # noqa: E402
from scheduler_core.frontend import from_pytorch, ops  # noqa: E402
from scheduler_core.graph import run_reference  # noqa: E402

RTOL = 1e-4


class Fn(nn.Module):
    """A module whose forward is ``f(module, x)`` (traced by torch.fx like any forward)."""

    def __init__(self, f, **children):
        super().__init__()
        self.f = f
        for k, v in children.items():
            setattr(self, k, v)

    def forward(self, x):
        return self.f(self, x)


class Fn2(Fn):
    def forward(self, x, y):
        return self.f(self, x, y)


def _rand(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def check(module, *xs, build=True):
    """Import ``module``, run it both ways, assert agreement with torch; returns the graph."""
    torch.manual_seed(0)
    module = module.eval()
    graph = from_pytorch(module, xs)
    with torch.no_grad():
        want = module(*xs)
    wants = [w.numpy() for w in (want if isinstance(want, (tuple, list)) else [want])]
    runs = [run_reference(graph, *[x.numpy() for x in xs])]
    if build:
        lib = sc.build_graph(graph)
        runs.append(lib.run(*[x.numpy() for x in xs]))
    for got in runs:
        assert len(got) == len(wants)
        for g, w in zip(got, wants):
            assert g.shape == w.shape
            scale = max(float(np.max(np.abs(w))), 1e-6)
            assert float(np.max(np.abs(g - w))) <= RTOL * scale, float(np.max(np.abs(g - w))) / scale
    return graph


def tir_kinds(graph):
    return [f.name.rsplit("_", 1)[0] for _, _, f in graph.tir_calls()]


# -- dense / matmul ---------------------------------------------------------------
def test_linear_with_bias_and_relu_is_one_function():
    g = check(nn.Sequential(nn.Linear(12, 7), nn.ReLU()), _rand(3, 12))
    assert tir_kinds(g) == ["fused_dense_bias_add_relu"]
    # the weight is stored transposed, (in, out)
    (wt,) = [p for p in g.params if p.name.endswith("weight_t")]
    assert wt.type.shape == (12, 7)


def test_linear_on_3d_input_and_functional_linear_without_bias():
    w = _rand(5, 6, seed=3)
    check(Fn(lambda m, x: F.linear(x, m.w), w=nn.Parameter(w)), _rand(2, 3, 6))


@pytest.mark.parametrize("f, shapes", [
    (torch.matmul, ((4, 6), (6, 5))),
    (torch.bmm, ((2, 4, 6), (2, 6, 3))),
    (torch.matmul, ((2, 3, 4, 6), (3, 6, 5))),  # broadcast batch dims
])
def test_matmul_and_bmm(f, shapes):
    g = check(Fn2(lambda m, a, b: f(a, b)), _rand(*shapes[0]), _rand(*shapes[1], seed=1))
    assert tir_kinds(g) == ["fused_batch_matmul"]


def test_addmm_and_matmul_with_a_weight():
    m = Fn(lambda m, x: torch.addmm(m.b, x, m.w) + x @ m.w, w=nn.Parameter(_rand(6, 6, seed=2)),
           b=nn.Parameter(_rand(6, seed=4)))
    check(m, _rand(3, 6))


# -- conv2d / batch norm / pooling ----------------------------------------------------
@pytest.mark.parametrize("kw", [
    dict(in_channels=3, out_channels=4, kernel_size=3, padding=1),
    dict(in_channels=4, out_channels=6, kernel_size=3, stride=2, padding=1, bias=False),
    dict(in_channels=4, out_channels=4, kernel_size=3, padding=2, dilation=2),
    dict(in_channels=4, out_channels=6, kernel_size=1, groups=2),
    dict(in_channels=6, out_channels=6, kernel_size=3, padding=1, groups=6),  # depthwise
    dict(in_channels=3, out_channels=5, kernel_size=(3, 1), padding="same"),
])
def test_conv2d(kw):
    check(nn.Conv2d(**kw), _rand(1, kw["in_channels"], 9, 9))


def _bn(c):
    bn = nn.BatchNorm2d(c)
    with torch.no_grad():
        bn.weight.uniform_(0.5, 1.5)
        bn.bias.uniform_(-0.3, 0.3)
        bn.running_mean.uniform_(-0.3, 0.3)
        bn.running_var.uniform_(0.5, 1.5)
    return bn


def test_conv_bn_relu_is_one_function_with_the_batch_norm_folded():
    torch.manual_seed(0)
    g = check(nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), _bn(4), nn.ReLU()), _rand(2, 3, 6, 6))
    assert tir_kinds(g) == ["fused_conv2d_bias_add_relu"]
    names = {p.name for p in g.params}
    assert any("folded_weight" in n for n in names) and not any("running" in n for n in names)


def test_batch_norm_without_a_conv_is_a_scale_and_shift():
    g = check(nn.Sequential(nn.ReLU(), _bn(3)), _rand(2, 3, 4, 4))
    assert tir_kinds(g) == ["fused_relu_batch_norm"]


@pytest.mark.parametrize("pool", [
    nn.MaxPool2d(3, stride=2, padding=1), nn.MaxPool2d(2), nn.AvgPool2d(2),
    nn.AvgPool2d(3, stride=2, padding=1), nn.AvgPool2d(3, stride=2, padding=1, count_include_pad=False),
    nn.AdaptiveAvgPool2d(1), nn.AdaptiveAvgPool2d((2, 3)),
])
def test_pooling(pool):
    check(pool, _rand(1, 3, 8, 9))


# -- elementwise ----------------------------------------------------------------------
@pytest.mark.parametrize("act", [
    nn.ReLU(), nn.GELU(), nn.GELU(approximate="tanh"), nn.SiLU(), nn.Sigmoid(), nn.Tanh(), nn.ReLU6(),
])
def test_activations_fuse_into_the_linear(act):
    g = check(nn.Sequential(nn.Linear(8, 8), act), _rand(4, 8) * 3)
    assert len(g.calls) == 1


@pytest.mark.parametrize("f", [
    lambda m, x: torch.clamp(x, -0.5, 0.75), lambda m, x: x.clamp(min=0.25), lambda m, x: torch.clip(x, max=-0.1),
    lambda m, x: F.hardtanh(x), lambda m, x: m.act(x), lambda m, x: torch.clamp(x, 0, 6),
])
def test_clamp_and_hardtanh_are_lowered_and_fuse_into_the_linear(f):
    g = check(Fn(lambda m, x: f(m, m.lin(x)), lin=nn.Linear(8, 8), act=nn.Hardtanh(-2.0, 1.5)), _rand(4, 8) * 3)
    assert [c.kind for c in g.calls] == ["tir"]


@pytest.mark.parametrize("f", [
    lambda m, x, y: x + y, lambda m, x, y: x - y * 2.0, lambda m, x, y: x / (y * y + 1.0),
    lambda m, x, y: 3.0 - x, lambda m, x, y: torch.add(x, y, alpha=2.0), lambda m, x, y: torch.mul(x, y[:1]),
    lambda m, x, y: 1.0 / (x * x + 1.0) + torch.maximum(x, y),
])
def test_binary_ops_broadcast_and_scalars(f):
    check(Fn2(f), _rand(3, 5), _rand(3, 5, seed=1))


def test_broadcast_against_a_lower_rank_weight():
    check(Fn(lambda m, x: x * m.s + m.t, s=nn.Parameter(_rand(5, seed=2)), t=nn.Parameter(_rand(3, 1, seed=3))),
          _rand(2, 3, 5))


# -- softmax / layer norm -----------------------------------------------------------
def test_softmax_and_log_softmax_last_axis():
    check(Fn(lambda m, x: torch.softmax(x * 4, dim=-1)), _rand(2, 3, 7))
    check(nn.LogSoftmax(dim=1), _rand(4, 6))


def test_layer_norm_one_and_two_axes():
    ln = nn.LayerNorm(6, eps=1e-3)
    with torch.no_grad():
        ln.weight.uniform_(0.5, 1.5)
        ln.bias.uniform_(-0.5, 0.5)
    check(ln, _rand(2, 3, 6) * 2 + 1)
    check(Fn(lambda m, x: F.layer_norm(x, (3, 4))), _rand(2, 3, 4))


def test_reductions_over_axes():
    g = check(Fn(lambda m, x: x.mean((2, 3)) + x.sum(dim=1, keepdim=True).amax(-1).sum() + torch.mean(x)),
              _rand(2, 3, 4, 5))
    assert all(c.kind == "tir" for c in g.calls)


# -- layout operators -------------------------------------------------------------
def test_layout_ops_are_index_remapping_not_copies():
    def f(m, x):  # (2, 3, 4) -> reshape/permute/transpose/flatten/unsqueeze/squeeze -> relu
        y = x.view(2, 12).reshape(2, 3, 4).permute(2, 0, 1).transpose(0, 2).contiguous()
        return torch.flatten(y.unsqueeze(0), 1).squeeze(0).relu()
    g = check(Fn(f), _rand(2, 3, 4))
    assert tir_kinds(g) == ["fused_relu"]


def test_a_returned_view_is_materialized():
    g = check(Fn(lambda m, x: (x + 1).transpose(0, 1)), _rand(3, 4))
    assert tir_kinds(g) == ["fused_add", "fused_copy"]


def test_reshape_index_groups_split_and_merge():
    shape = (2, 6, 4)
    for steps in [(("reshape", (12, 4)),), (("reshape", (2, 3, 2, 4)),), (("reshape", (4, 12)),),
                  (("reshape", (1, 48)),), (("permute", (2, 0, 1)), ("reshape", (4, 1, 12)))]:
        x = te.placeholder(shape, name="x")
        out_shape = ops.layout_shape(shape, steps)
        y = te.compute(out_shape, lambda *i, x=x, steps=steps: x[tuple(ops.layout_index(shape, steps, i))],
                       name="y")
        a = np.arange(48, dtype="float32").reshape(shape)
        want = torch.from_numpy(a)
        for kind, arg in steps:
            want = want.reshape(arg) if kind == "reshape" else want.permute(*arg)
        got = evaluate(sc.ComputeDAG([x, y]), [a])[0]
        np.testing.assert_array_equal(got, want.numpy())


def test_dropout_and_identity_are_no_ops():
    g = check(nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.5), nn.Identity(), nn.ReLU()), _rand(2, 4))
    assert len(g.calls) == 1


def test_integer_shape_arithmetic_is_specialized():
    check(Fn(lambda m, x: x.view(x.size(0) * 2, -1) * 2), _rand(3, 4))


# -- library fallback and errors --------------------------------------------------------
def test_unsupported_operators_become_torch_library_calls():
    g = check(nn.Sequential(nn.Linear(6, 6), nn.ELU(), nn.Linear(6, 3)), _rand(2, 6))
    kinds = [c.kind for c in g.calls]
    assert kinds == ["tir", "library", "tir"]
    assert g.calls[1].func.startswith("torch.ELU.")
    # cumsum along a non-last axis and a tensor slice: still the same answer as torch
    check(Fn(lambda m, x: torch.cumsum(x, 0)[:, 1:] * 2), _rand(3, 4))


def test_multi_output_library_call_and_getitem():
    g = check(Fn(lambda m, x: torch.sort(x, dim=1)[0] + 1), _rand(3, 4))
    assert [c.kind for c in g.calls] == ["library", "tir"]


@pytest.mark.parametrize("f", [
    lambda m, x: (lambda q, k, v: q * k + v)(*m.lin(x).split(4, dim=-1)),
    lambda m, x: torch.split(m.lin(x), [3, 9], dim=1)[1] * 2,
    lambda m, x: (lambda a, b: a - b)(*m.lin(x).view(3, 2, 6).unbind(1)),
    lambda m, x: torch.chunk(m.lin(x), 5, dim=-1)[3] + 1,  # 5 chunks asked, torch gives 4 of 3
    lambda m, x: m.lin(x).chunk(2, -1)[0] @ m.lin(x).chunk(2, -1)[1].t(),
])
def test_split_chunk_unbind_are_views_read_by_the_next_call(f):
    """GPT-2's ``c_attn(x).split(d, dim=2)``: slices of one call's output, no copy, no library."""
    g = check(Fn(f, lin=nn.Linear(6, 12)), _rand(3, 6))
    assert all(c.kind == "tir" for c in g.calls) and len(g.calls) <= 3, [c.func for c in g.calls]


def test_bad_arguments_are_named():
    with pytest.raises(InvalidWorkloadError, match="torch.nn.Module"):
        from_pytorch(lambda x: x, (_rand(2),))
    with pytest.raises(InvalidWorkloadError, match="example input 0"):
        from_pytorch(nn.ReLU(), ([1, 2],))
    with pytest.raises(InvalidWorkloadError, match="fails on the example inputs"):
        from_pytorch(nn.Linear(3, 3), (_rand(2, 4),))


def test_in_place_operators_are_seen_by_later_readers():
    def f(m, x):
        y = x * 2
        y.add_(1)  # a library call on a copy; later readers of y see its result
        z = torch.relu(y)
        return z * y
    check(Fn(f), _rand(3, 4))
    check(nn.Sequential(nn.Linear(4, 4), nn.ReLU(inplace=True), nn.Linear(4, 2)), _rand(3, 4))
