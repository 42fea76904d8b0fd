"""Horizontal fusion of parallel linears (``parallel_dense``, TVM's CombineParallelDense): the
q/k/v projections of an attention block become one dense over the concatenated weights,
whose consumers read slices of its output in place; the model still matches torch through
torch.fx and torch.export, untuned and with sampled tiled schedules."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402

import scheduler_core as sc  # noqa: E402
from scheduler_core.frontend import from_exported_program, from_pytorch  # noqa: E402
from scheduler_core.frontend.parallel_dense import combine_parallel_dense  # noqa: E402
from scheduler_core.frontend.pytorch import import_fx_graph  # noqa: E402
from sketch_rules.init_population import sample_init_population  # noqa: E402
from sketch_rules.sketch_generation import generate_sketches  # noqa: E402

HIDDEN, HEADS, SEQ = 32, 4, 8


class _Attention(nn.Module):
    """Self-attention with separate q/k/v projections (as BERT's), an output projection, and a
    side linear reading the attention output together with ``out`` (a second combinable pair,
    one of them without bias, so it is not combined with the other)."""

    def __init__(self) -> None:
        super().__init__()
        self.q, self.k, self.v = (nn.Linear(HIDDEN, HIDDEN) for _ in range(3))
        self.out = nn.Linear(HIDDEN, HIDDEN)
        self.gate = nn.Linear(HIDDEN, 16, bias=False)

    def forward(self, x):
        b, s, _ = x.shape

        def heads(t):
            return t.view(b, s, HEADS, HIDDEN // HEADS).permute(0, 2, 1, 3)
        q, k, v = heads(self.q(x)), heads(self.k(x)), heads(self.v(x))
        a = torch.softmax(q @ k.transpose(-1, -2) / (HIDDEN // HEADS) ** 0.5, dim=-1) @ v
        a = a.permute(0, 2, 1, 3).reshape(b, s, HIDDEN)
        return self.out(a) + x, torch.sigmoid(self.gate(a))


def _model_and_input():
    torch.manual_seed(0)
    return _Attention().eval(), torch.randn(1, SEQ, HIDDEN)


def _dense_widths(graph) -> list:
    """The output width of each dense function call, in call order."""
    return [c.outputs[0].type.shape[-1] for c in graph.calls if c.kind == "tir" and "dense" in c.func]


def _check(graph, model, x) -> None:
    with torch.no_grad():
        want = [t.numpy() for t in model(x)]
    got = sc.build_graph(graph, "llvm")(x.numpy())
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("importer", ["fx", "export"])
def test_qkv_projections_become_one_dense_and_the_model_matches_torch(importer):
    model, x = _model_and_input()
    graph = from_pytorch(model, x) if importer == "fx" else from_exported_program(model, x)
    widths = _dense_widths(graph)
    # q, k, v: one dense of width 96; out (with bias) and gate (without) read another value
    assert sorted(widths) == [16, HIDDEN, 3 * HIDDEN], widths
    assert all(c.kind == "tir" for c in graph.calls)
    combined = next(c for c in graph.calls if c.kind == "tir" and c.outputs[0].type.shape[-1] == 3 * HIDDEN)
    readers = [c for c in graph.calls if combined.outputs[0].name in c.args]
    assert readers and all("dense" not in c.func for c in readers)  # attention reads the slices in place
    _check(graph, model, x)


def test_the_combined_dense_builds_with_tiled_schedules():
    model, x = _model_and_input()
    graph = from_pytorch(model, x)
    tasks, _ = sc.extract_tasks(graph, "llvm")
    by_key = {t.workload_key: t for t in tasks}
    for _, _, func in list(graph.tir_calls()):
        policy = sc.SketchPolicy(by_key[func.workload_key], sc.RandomModel(), seed=2)
        states = sample_init_population(policy, generate_sketches(policy), 2, np.random.default_rng(2))
        graph = graph.with_function(func.with_state(states[0]))
    _check(graph, model, x)


def test_only_linears_sharing_an_input_with_constant_weights_are_combined():
    class Apart(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a, self.b = nn.Linear(HIDDEN, 8), nn.Linear(HIDDEN, 8)
            self.w = nn.Parameter(torch.randn(8, HIDDEN))

        def forward(self, x, y):
            # different inputs; a weight computed from the input; F.linear on a parameter
            return self.a(x), self.b(y), F.linear(x, self.w * x.sum()), F.linear(y, self.w)

    torch.manual_seed(0)
    gm = torch.fx.symbolic_trace(Apart().eval())
    assert combine_parallel_dense(gm) == 0
    # y feeds self.b and F.linear(y, self.w): both constant, one with a bias, one without
    assert sum(n.op == "call_module" for n in gm.graph.nodes) == 2


def test_functional_linears_on_parameters_are_combined_and_can_be_turned_off():
    class Functional(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w1, self.w2 = nn.Parameter(torch.randn(8, HIDDEN)), nn.Parameter(torch.randn(24, HIDDEN))

        def forward(self, x):
            return F.linear(x, self.w1) * 2.0, F.relu(F.linear(x, self.w2))

    torch.manual_seed(0)
    model, x = Functional().eval(), torch.randn(4, HIDDEN)
    combined = import_fx_graph(torch.fx.symbolic_trace(model), (x,), "Functional")
    assert _dense_widths(combined) == [32]
    _check(combined, model, x)
    apart = import_fx_graph(torch.fx.symbolic_trace(model), (x,), "Functional", combine_dense=False)
    assert _dense_widths(apart) == [8, 24]
