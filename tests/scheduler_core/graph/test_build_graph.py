"""build_graph: the compiled model agrees with the reference run and numpy; tasks merge by key."""

from __future__ import annotations

import os

import numpy as np
import pytest

import scheduler_core as sc
from scheduler_core.base.errors import BuildError, InvalidWorkloadError
from scheduler_core.graph import Graph, build_graph, default_state, extract_tasks, run_reference

from .models import add_bias, dense, mlp_graph, numpy_mlp, weights


@pytest.fixture(scope="module")
def built():
    graph = mlp_graph().bind_params(weights())
    return graph, build_graph(graph, "llvm")


def _x(seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((4, 32)).astype("float32")


def test_compiled_model_matches_reference_and_numpy(built):
    graph, lib = built
    x = _x()
    out = lib(x)
    assert isinstance(out, np.ndarray) and out.shape == (4, 32)
    np.testing.assert_allclose(out, run_reference(graph, x)[0], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out, numpy_mlp(x, weights()), rtol=1e-4, atol=1e-4)
    # buffers are reused across runs, results are fresh copies
    out2 = lib(_x(2))
    np.testing.assert_allclose(out, numpy_mlp(x, weights()), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(out2, numpy_mlp(_x(2), weights()), rtol=1e-4, atol=1e-4)
    assert lib(sc.nd.array(x)).shape == (4, 32)  # NDArrays are accepted too


def test_identical_functions_share_one_program_and_one_task(built):
    graph, lib = built
    assert lib.schedule_sources == {"dense_a": "default", "dense_b": "default", "add_bias": "default",
                                    "scale": "default"}
    assert lib.functions["dense_a"] is lib.functions["dense_b"]
    assert lib.num_modules == 3
    tasks, weights_ = extract_tasks(graph, "llvm")
    assert [t.desc for t in tasks] == ["dense_a", "add_bias", "scale"]
    assert weights_ == [2, 1, 1]
    assert tasks[0].workload_key == dense.workload_key
    assert isinstance(tasks[0], sc.SearchTask)


def test_default_schedule_parallelizes_large_stages_and_vectorizes_elementwise():
    state = default_state(add_bias.dag, "llvm")
    assert any(type(s).__name__ == "AnnotationStep" for s in state.transform_steps)
    big = sc.te.placeholder((1024, 1024), name="A")
    out = sc.te.compute((1024, 1024), lambda i, j: big[i, j] * 2.0, name="B")
    text = str(sc.lower(default_state(sc.ComputeDAG([big, out]), "llvm"), [big, out]))
    assert ("parallel" in text) == (os.cpu_count() > 1) and "ramp" in text
    reduction = str(sc.lower(default_state(dense.dag, "llvm"), list(dense.dag.tensors)))
    assert "Y_vacc" in reduction  # the reduction loop is vectorized into vector accumulators


def test_manual_state_is_used_and_time_evaluator_reports_seconds():
    graph = mlp_graph().bind_params(weights())
    manual = graph.functions["scale"].with_state(default_state(graph.functions["scale"].dag, "llvm"))
    lib = build_graph(graph.with_function(manual), "llvm")
    assert lib.schedule_source("scale") == "manual"
    assert lib.schedule_source("dense_a") == "default"
    np.testing.assert_allclose(lib(_x()), numpy_mlp(_x(), weights()), rtol=1e-4, atol=1e-4)
    res = lib.time_evaluator(number=5, repeat=2)(_x())
    assert len(res.results) == 2 and 0 < res.mean < 1 and 0 < res.median < 1


def test_json_round_trip_builds_and_runs():
    graph = mlp_graph()
    again = Graph.from_json(graph.to_json())
    assert again.to_json() == graph.to_json()
    lib = build_graph(again, "llvm", params=weights())
    np.testing.assert_allclose(lib(_x()), numpy_mlp(_x(), weights()), rtol=1e-4, atol=1e-4)
    free = build_graph(again, "llvm")  # unbound params are run-time arguments after the inputs
    p = weights()
    np.testing.assert_allclose(free(_x(), p["w1"], p["b1"], p["w2"]), numpy_mlp(_x(), p), rtol=1e-4, atol=1e-4)


def test_bad_arguments_give_clear_errors(built):
    graph, lib = built
    with pytest.raises(InvalidWorkloadError, match="takes 1 arguments"):
        lib(_x(), _x())
    with pytest.raises(InvalidWorkloadError, match=r"x: expected \(4, 32\) float32"):
        lib(np.zeros((4, 31), "float32"))
    with pytest.raises(BuildError, match="CPU"):
        build_graph(graph, "cuda")
    with pytest.raises(InvalidWorkloadError, match="needs a Graph"):
        build_graph("graph", "llvm")
    with pytest.raises(InvalidWorkloadError, match="not a param"):
        build_graph(mlp_graph(), "llvm", params={"nope": np.zeros(3)})
    with pytest.raises(InvalidWorkloadError, match="no tensor program named"):
        lib.schedule_source("relu")
    with pytest.raises(ValueError, match="number and repeat"):
        lib.time_evaluator(number=0)
    unknown = Graph.from_json({**mlp_graph().to_json(),
                               "calls": [{**c, "func": "test.nothing"} if c["kind"] == "library" else c
                                         for c in mlp_graph().to_json()["calls"]]})
    with pytest.raises(InvalidWorkloadError, match="no library function registered as 'test.nothing'"):
        build_graph(unknown, "llvm")


def test_memory_plan_reuses_the_buffers_of_dead_intermediates():
    """A chain of calls: each intermediate dies at its one reader, so the plan needs about two
    blocks where one buffer per value needs one per call; the compiled model still matches."""
    from scheduler_core.graph.build import plan_memory

    torch = pytest.importorskip("torch")
    from torch import nn

    from scheduler_core.frontend import from_pytorch

    torch.manual_seed(0)
    layers = []
    for _ in range(6):
        layers += [nn.Linear(32, 32), nn.Tanh()]
    module = nn.Sequential(*layers).eval()
    x = torch.randn(8, 32)
    graph = from_pytorch(module, (x,))
    plan = plan_memory(graph)
    assert len(graph.calls) == 6
    assert plan.planned_bytes < plan.unplanned_bytes
    assert len(plan.storage) == 2  # the arena of the intermediates, the graph output's own block
    assert plan.storage[0] <= 2 * 8 * 32 * 4  # ping-pong between two places in the arena
    assert plan.peak_live_bytes <= plan.planned_bytes
    lib = sc.build_graph(graph)
    assert lib.memory_plan.planned_bytes == plan.planned_bytes
    with torch.no_grad():
        want = module(x).numpy()
    for _ in range(2):  # a second run reads nothing stale from the shared blocks
        np.testing.assert_allclose(lib(x.numpy()), want, rtol=1e-4, atol=1e-5)


def test_memory_plan_of_a_residual_network_needs_only_its_peak():
    """Bottleneck blocks (a residual input lives across three convolutions, then the shortcut
    add): the offset plan places every intermediate so that values alive at the same call never
    overlap in memory, and its arena is the peak of live bytes (ResNet-50 at 224x224: 6.89 MiB,
    where reusing whole blocks took 9.19), within 1.5x of the two largest live activations."""
    from scheduler_core.graph.build import plan_memory

    torch = pytest.importorskip("torch")
    from torch import nn

    from scheduler_core.frontend import from_pytorch

    class Bottleneck(nn.Module):
        def __init__(self, cin, mid, cout, stride):
            super().__init__()
            self.body = nn.Sequential(nn.Conv2d(cin, mid, 1), nn.ReLU(), nn.Conv2d(mid, mid, 3, stride, 1), nn.ReLU(),
                                      nn.Conv2d(mid, cout, 1))
            self.short = nn.Conv2d(cin, cout, 1, stride) if (cin, stride) != (cout, 1) else nn.Identity()

        def forward(self, x):
            return torch.relu(self.body(x) + self.short(x))

    torch.manual_seed(0)
    module = nn.Sequential(nn.Conv2d(3, 8, 3, 2, 1), nn.ReLU(), Bottleneck(8, 4, 16, 1), Bottleneck(16, 4, 16, 1),
                           Bottleneck(16, 8, 32, 2), Bottleneck(32, 8, 32, 1), nn.AdaptiveAvgPool2d(1),
                           nn.Flatten(), nn.Linear(32, 10)).eval()
    x = torch.randn(1, 3, 32, 32)
    graph = from_pytorch(module, (x,))
    plan = plan_memory(graph)
    # every pair of values alive at one call occupies disjoint bytes of the arena
    first = {o.name: i for i, c in enumerate(graph.calls) for o in c.outputs}
    last = {a: i for i, c in enumerate(graph.calls) for a in c.args if a in first}
    spans = {n: (b, off, off + int(np.prod(shape)) * np.dtype(dt).itemsize)
             for n, (b, off, shape, dt) in plan.assignment.items()}
    for i in range(len(graph.calls)):
        alive = [n for n in first if first[n] <= i <= max(first[n], last.get(n, first[n]))]
        for a in alive:
            for b in alive:
                if a < b and spans[a][0] == spans[b][0]:
                    assert spans[a][2] <= spans[b][1] or spans[b][2] <= spans[a][1], (i, a, b)
    nbytes = {n: int(np.prod(s)) * np.dtype(dt).itemsize for n, (_, _, s, dt) in plan.assignment.items()}
    two = max(sum(sorted((nbytes[n] for n in first if first[n] <= i <= max(first[n], last.get(n, first[n]))),
                         reverse=True)[:2]) for i in range(len(graph.calls)))
    arena = plan.storage[0]
    assert arena <= 1.5 * two and arena <= plan.peak_live_bytes * 1.1, (arena, two, plan.peak_live_bytes)
    lib = sc.build_graph(graph)
    with torch.no_grad():
        want = module(x).numpy()
    for _ in range(2):  # buffers reused across runs
        np.testing.assert_allclose(lib(x.numpy()), want, rtol=1e-4, atol=1e-5)
    seconds = lib.run_individual(x.numpy(), number=2, repeat=1)  # TVM's debug executor: each call alone
    assert len(seconds) == len(graph.calls) and all(t > 0 for t in seconds)
    np.testing.assert_allclose(lib(x.numpy()), want, rtol=1e-4, atol=1e-5)
