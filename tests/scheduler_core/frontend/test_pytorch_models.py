"""Whole torch models imported, compiled, tuned: the three models of
examples/torch_models.py at small sizes match torch to 1e-4 relative; identical layers are one
task; a tuned model still matches."""

from __future__ import annotations

import importlib.util
import pathlib
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

import scheduler_core as sc  # noqa: E402
from scheduler_core.frontend import from_pytorch  # noqa: E402
from scheduler_core.graph import Graph, run_reference  # noqa: E402

_PATH = pathlib.Path(__file__).resolve().parents[3] / "examples" / "torch_models.py"
_SPEC = importlib.util.spec_from_file_location("torch_models_example", _PATH)
tm = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(tm)

RTOL = 1e-4


def _torch_out(module, xs):
    with torch.no_grad():
        return module(*xs).numpy()


@pytest.mark.parametrize("name", list(tm.MODELS))
def test_model_matches_torch_reference_and_compiled(name):
    module, xs, graph = tm.load(name, **tm.SMALL[name])
    want = _torch_out(module, xs)
    x_np = [x.numpy() for x in xs]
    assert tm.max_rel_error(run_reference(graph, *x_np)[0], want) <= RTOL
    assert tm.max_rel_error(sc.build_graph(graph)(*x_np), want) <= RTOL
    assert all(c.kind == "tir" for c in graph.calls)  # every operator of these models is lowered


def test_resnet_block_structure_conv_bn_relu_is_one_call_and_bn_is_folded():
    _, _, graph = tm.load("resnet_block", **tm.SMALL["resnet_block"])
    funcs = [f.name for _, _, f in graph.tir_calls()]
    assert len(funcs) == 2
    assert funcs[0].startswith("fused_conv2d_bias_add_relu")  # conv1 + bn1 (folded) + relu
    assert funcs[1].startswith("fused_conv2d_bias_add_add_relu")  # conv2 + bn2 + skip + relu
    names = sorted(p.name for p in graph.params)  # only the folded weights: no BN statistics
    assert names == ["bn1.folded_bias", "bn1.folded_weight", "bn2.folded_bias", "bn2.folded_weight"]
    assert all(p.name in graph.bound for p in graph.params)  # weights bound, input free
    assert [v.name for v in graph.inputs] == ["x"] and not graph.free_params


def test_graph_json_round_trip_keeps_the_task_keys():
    _, _, graph = tm.load("transformer", **tm.SMALL["transformer"])
    again = Graph.from_json(graph.to_json())
    assert [f.workload_key for _, _, f in again.tir_calls()] == [f.workload_key for _, _, f in graph.tir_calls()]


class TwoIdentical(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(8, 8)
        self.b = nn.Linear(8, 8)
        self.head = nn.Linear(8, 3)

    def forward(self, x):
        return self.head(torch.relu(self.b(torch.relu(self.a(x)))))


def test_extract_tasks_merges_identical_layers():
    torch.manual_seed(0)
    graph = from_pytorch(TwoIdentical(), (torch.randn(4, 8),))
    tasks, weights = sc.extract_tasks(graph, "llvm")
    assert len(graph.tir_calls()) == 3
    assert len(tasks) == 2 and sorted(weights) == [1, 2]
    _, _, transformer = tm.load("transformer", **tm.SMALL["transformer"])
    tasks, weights = sc.extract_tasks(transformer, "llvm")
    # the two layer norms are one task; the q/k/v projections are one call (parallel_dense)
    assert len(tasks) == 8 and sorted(weights, reverse=True)[:2] == [2, 1]


def test_library_node_inside_a_model_still_matches_when_compiled():
    class WithElu(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(6, 6)
            self.elu = nn.ELU()

        def forward(self, x):
            return self.elu(self.fc(x)).transpose(0, 1) * 2

    torch.manual_seed(0)
    m, x = WithElu().eval(), torch.randn(3, 6)
    graph = from_pytorch(m, (x,))
    assert [c.kind for c in graph.calls] == ["tir", "library", "tir"]
    out = sc.build_graph(graph)(x.numpy())
    assert tm.max_rel_error(out, _torch_out(m, (x,))) <= RTOL


def test_tune_mlp_a_few_trials_then_apply_history_best(tmp_path):
    module, xs, graph = tm.load("mlp", batch=8, d_in=64, hidden=32, d_out=10)
    log = str(tmp_path / "mlp.json")
    sched, _ = tm.tune_model(graph, 2, log, num_measures_per_round=2, population=16, num_iters=1)
    assert len(sched.tasks) == 3 and sum(sched.task_cts) == 6
    with sc.ApplyHistoryBest(log):
        lib = sc.build_graph(graph)
    sources = {lib.schedule_source(f.name) for _, _, f in graph.tir_calls()}
    assert "record" in sources
    out = lib(*[x.numpy() for x in xs])
    assert tm.max_rel_error(out, _torch_out(module, xs)) <= RTOL
    assert np.isfinite(out).all()


def test_frontend_loads_torch_only_when_from_pytorch_is_used():
    code = ("import sys, scheduler_core as sc, scheduler_core.frontend as fe; "
            "assert 'torch' not in sys.modules, 'torch loaded by the package'; "
            "f = sc.frontend.from_pytorch; assert 'torch' in sys.modules and f.__name__ == 'from_pytorch'")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=pathlib.Path(__file__).resolve().parents[3])
