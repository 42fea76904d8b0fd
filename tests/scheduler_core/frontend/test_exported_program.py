"""from_exported_program: models through ``torch.export`` (ATen operators), and from_pytorch's
fallback to it when ``torch.fx`` cannot trace a model.  Every imported graph is run with the
numpy reference evaluator and compiled, and compared with torch's own output."""

from __future__ import annotations

import importlib.util
import pathlib

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402

import scheduler_core as sc  # noqa: E402
from scheduler_core.base.errors import InvalidWorkloadError  # noqa: E402
from scheduler_core.frontend import from_exported_program, from_pytorch  # noqa: E402
from scheduler_core.frontend.pytorch import without_triton  # noqa: E402
from scheduler_core.graph import run_reference  # noqa: E402

_PATH = pathlib.Path(__file__).resolve().parents[3] / "examples" / "torch_models.py"
_SPEC = importlib.util.spec_from_file_location("torch_models_example_export", _PATH)
tm = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(tm)

RTOL = 1e-4


def _check(graph, module, xs, build=True):
    with torch.no_grad():
        want = module(*xs)
    wants = [w.numpy() for w in (want if isinstance(want, (tuple, list)) else [want])]
    x_np = [x.numpy() for x in xs]
    runs = [run_reference(graph, *x_np)]
    if build:
        runs.append(sc.build_graph(graph).run(*x_np))
    for got in runs:
        got = got if isinstance(got, (tuple, list)) else [got]
        assert len(got) == len(wants)
        for g, w in zip(got, wants):
            assert g.shape == w.shape
            np.testing.assert_allclose(g, w, rtol=RTOL, atol=RTOL * max(1.0, float(np.abs(w).max())))
    return graph


@pytest.mark.parametrize("name", list(tm.MODELS))
def test_example_models_through_torch_export_are_lowered_whole(name):
    module, xs, _ = tm.load(name, **tm.SMALL[name])
    graph = _check(from_exported_program(module, xs), module, xs)
    assert all(c.kind == "tir" for c in graph.calls), [c.func for c in graph.calls if c.kind != "tir"]


def test_batch_norm_is_folded_into_the_conv_from_aten_operators():
    module, xs, _ = tm.load("resnet_block", **tm.SMALL["resnet_block"])
    graph = from_exported_program(module, xs)
    funcs = [f.name for _, _, f in graph.tir_calls()]
    assert len(funcs) == 2
    assert funcs[0].startswith("fused_conv2d_bias_add_relu") and funcs[1].startswith("fused_conv2d_bias_add_add_relu")
    assert not any("running" in p.name for p in graph.params)  # the statistics are folded away


class Chunked(nn.Module):
    """``*lead, d = x.shape`` unpacks a shape: torch.fx cannot trace it ("Proxy object cannot be
    iterated", as in Hugging Face models); torch.export can (shapes are specialized)."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(16, 32)
        self.out = nn.Linear(16, 8)

    def forward(self, x):
        *lead, d = x.shape
        a, b = self.proj(x).view(*lead, 2, d).unbind(-2)
        return self.out(a * torch.sigmoid(b))


def test_from_pytorch_falls_back_to_torch_export_when_fx_cannot_trace():
    torch.manual_seed(0)
    module, xs = Chunked().eval(), (torch.randn(4, 16),)
    with pytest.raises(Exception, match="cannot be iterated"):
        torch.fx.symbolic_trace(module)
    graph = _check(from_pytorch(module, xs), module, xs)
    kinds = [c.kind for c in graph.calls]
    assert kinds == ["tir", "tir", "tir"]  # projection, gating (reads its halves: unbind views), out


class Attention(nn.Module):
    """Scaled dot-product attention with a mask: the ATen operator is a library call, the
    projections around it are lowered."""

    def __init__(self, d=16, heads=2):
        super().__init__()
        self.heads, self.qkv, self.o = heads, nn.Linear(d, 3 * d), nn.Linear(d, d)

    def forward(self, x, mask):
        b, s, d = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4).unbind(0)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.o(y.transpose(1, 2).reshape(b, s, d))


def test_attention_with_sdpa_matches_torch():
    torch.manual_seed(0)
    module = Attention().eval()
    xs = (torch.randn(2, 5, 16), torch.randn(2, 1, 5, 5))
    graph = _check(from_exported_program(module, xs), module, xs)
    assert sum(c.kind == "tir" for c in graph.calls) >= 2


def test_an_exported_program_is_taken_as_is_with_its_example_inputs():
    torch.manual_seed(0)
    module, xs = Chunked().eval(), (torch.randn(3, 16),)
    with without_triton():  # torch.export would load triton's own LLVM into this test process
        ep = torch.export.export(module, xs)
    graph = _check(from_exported_program(ep), module, xs)
    assert [v.name for v in graph.inputs] == ["x"]


def test_bad_inputs_are_named():
    with pytest.raises(InvalidWorkloadError, match="ExportedProgram or a torch.nn.Module"):
        from_exported_program("model.pt")
    with pytest.raises(InvalidWorkloadError, match="example input 0 is a list"):
        from_exported_program(nn.Linear(2, 2), ([1.0, 2.0],))


class _HFLayer(nn.Module):
    """A Hugging Face layer's hidden-state output (older versions return a tuple)."""

    def __init__(self, layer):
        super().__init__()
        self.layer = layer

    def forward(self, h):
        out = self.layer(h)
        return out[0] if isinstance(out, tuple) else out


def test_hugging_face_bert_layer_imports_through_torch_export():
    """The issue's case: torch.fx cannot trace a transformers BertLayer; from_pytorch imports it
    through torch.export, every operator lowered (q/k/v and output projections, the attention's
    two batch matmuls and softmax, both layer norms, the GELU feed-forward)."""
    with without_triton():  # importing transformers probes for triton (a second LLVM in the process)
        transformers = pytest.importorskip("transformers")
        from transformers.models.bert.modeling_bert import BertLayer

    torch.manual_seed(0)
    config = transformers.BertConfig(hidden_size=64, num_attention_heads=4, intermediate_size=128,
                                     hidden_act="gelu", attn_implementation="eager")
    module, xs = _HFLayer(BertLayer(config)).eval(), (torch.randn(1, 16, 64),)
    with pytest.raises(Exception, match="cannot be iterated"):
        torch.fx.symbolic_trace(module)
    graph = _check(from_pytorch(module, xs), module, xs)
    assert all(c.kind == "tir" for c in graph.calls), [c.func for c in graph.calls if c.kind != "tir"]
    kinds = " ".join(f.name for _, _, f in graph.tir_calls())
    assert kinds.count("batch_matmul") == 2 and kinds.count("layer_norm") == 2
    assert "softmax" in kinds and "gelu" in kinds


def test_torch_export_inside_the_importer_does_not_load_triton():
    """torch.export probes for triton, whose libtriton.so carries a second LLVM; beside
    llvmlite's in one process a later JIT compile can abort.  The importer hides it."""
    import sys

    if sys.modules.get("triton") is not None:
        pytest.skip("triton was loaded by an earlier test in this process")
    hidden_by_conftest = "triton" in sys.modules
    if hidden_by_conftest:
        del sys.modules["triton"]
    try:
        torch.manual_seed(0)
        from_exported_program(Chunked().eval(), (torch.randn(2, 16),))
        assert "triton" not in sys.modules
    finally:
        if hidden_by_conftest:
            sys.modules["triton"] = None  # type: ignore[assignment]
    with open("/proc/self/maps") as maps:
        assert not any("libtriton" in line for line in maps)
