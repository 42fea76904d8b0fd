"""Model weights in the tuned layout: an imported model's conv2d and dense weights are
layout-free placeholders, and a model built with tiled schedules packs each weight once, at
build time, into the layout its schedule reads; the outputs still match torch."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

import scheduler_core as sc  # noqa: E402
from scheduler_core.driver.program import program_from_state  # noqa: E402
from scheduler_core.frontend import from_pytorch  # noqa: E402
from scheduler_core.graph import Graph  # noqa: E402
from scheduler_core.schedule.layout_rewrite import has_layout_free_placeholders  # noqa: E402
from sketch_rules.init_population import sample_init_population  # noqa: E402
from sketch_rules.sketch_generation import generate_sketches  # noqa: E402


def _model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(16 * 8 * 8, 32)).eval()


def _imported():
    """(input, torch's output, the imported graph, its tasks) of :func:`_model`."""
    model = _model()
    x = torch.randn(1, 8, 8, 8)
    with torch.no_grad():
        want = model(x).numpy()
    graph = from_pytorch(model, x)
    tasks, _ = sc.extract_tasks(graph, "llvm")
    return x, want, graph, tasks


def _tiled_state(task, seed: int = 0):
    """A sampled multi-level-tiled schedule whose rewrite packs the task's weight."""
    policy = sc.SketchPolicy(task, sc.RandomModel(), seed=seed)
    for state in sample_init_population(policy, generate_sketches(policy), 16, np.random.default_rng(seed)):
        if program_from_state(state, "llvm", pre_transformed=True).layout_transforms:
            return state
    raise AssertionError(f"no sampled state of {task.desc} rewrites its weight's layout")


def test_weights_are_packed_once_at_build_time_and_the_model_still_matches_torch():
    x, want, graph, tasks = _imported()
    anchored = [t for t in tasks if has_layout_free_placeholders(t.compute_dag)]
    assert len(anchored) == 2  # the conv2d (OIHW kernel) and the linear (its transposed weight)
    for _, _, func in list(graph.tir_calls()):
        if has_layout_free_placeholders(func.dag):
            task = next(t for t in anchored if t.workload_key == func.workload_key)
            graph = graph.with_function(func.with_state(_tiled_state(task)))
    lib = sc.build_graph(graph, "llvm")
    assert lib.pre_transformed_calls == 2
    weights = sum(graph.bound[p.name].nbytes for p in graph.params if p.name.endswith(("weight", "weight_t")))
    assert lib.packed_weight_bytes == weights  # each weight once, as many elements (no padding)
    np.testing.assert_allclose(lib(x.numpy()), want, rtol=1e-4, atol=1e-5)
    conv = next(f.name for _, _, f in graph.tir_calls() if f.name.startswith("fused_conv2d"))
    text = lib.lowered(conv)
    signature = text.splitlines()[0]  # the program takes the packed kernel, not the OIHW one
    assert "kernel_layout: Buffer" in signature and "kernel: Buffer" not in signature
    per_call = lib.functions[conv].program  # the same schedule copying the kernel on every call
    assert not per_call.layout_transforms
    assert "kernel: Buffer" in per_call.lowered.splitlines()[0] and "allocate(kernel_layout" in per_call.lowered


def test_an_unbound_weight_keeps_the_per_call_transform():
    x, want, graph, tasks = _imported()
    for _, _, func in list(graph.tir_calls()):
        if func.name.startswith("fused_conv2d"):
            task = next(t for t in tasks if t.workload_key == func.workload_key)
            graph = graph.with_function(func.with_state(_tiled_state(task, seed=1)))
    kernel = next(p.name for p in graph.params if graph.bound[p.name].ndim == 4)
    value = graph.bound[kernel]
    free = Graph(graph.inputs, graph.params, graph.calls, graph.outputs, graph.functions,
                          {k: v for k, v in graph.bound.items() if k != kernel})
    lib = sc.build_graph(free, "llvm")
    assert lib.pre_transformed_calls == 0 and lib.packed_weight_bytes == 0
    np.testing.assert_allclose(lib(x.numpy(), value), want, rtol=1e-4, atol=1e-5)
