"""The speed baselines (scheduler_core.measure.baseline) compute what the DAG computes, with the
library calls a user would write: ``A @ B``, ``torch.addmm``, ``F.conv2d``, einsum over windows.

Each baseline is checked against the reference evaluator on the measurement's random inputs;
the formulas are checked as text (what the CLI's last line prints)."""

from __future__ import annotations

import numpy as np
import pytest
from threadpoolctl import threadpool_info

from scheduler_core import te
from scheduler_core.dag.compute_dag import ComputeDAG
from scheduler_core.dag.reference import evaluate
from scheduler_core.measure.baseline import NoBaselineError, compact_formula, numpy_program, torch_program
from scheduler_core.measure.baseline_timing import Timing, compare_with_baselines, comparison_text, time_baseline
from scheduler_core.measure.local_runner import arg_specs, random_inputs
from tests import workloads as W

torch = pytest.importorskip("torch")

DAGS = {
    "matmul_add": lambda: W.matmul_add(24, 20, 16),
    "matmul_bias_relu": lambda: W.matmul_bias_relu(24, 20, 16),
    "conv2d stride 1 pad 1": lambda: W.conv2d_nchw(1, 4, 10, 10, 6, 3, 3, stride=1, pad=1),
    "conv2d stride 2 pad 1": lambda: W.conv2d_nchw(2, 3, 11, 9, 5, 3, 3, stride=2, pad=1),
    "conv2d 1x1 no pad": lambda: W.conv2d_nchw(1, 8, 7, 7, 4, 1, 1, stride=1, pad=0),
    "depthwise conv2d": lambda: W.depthwise_conv2d(1, 6, 9, 9, 3, 3, stride=1, pad=1),
    "softmax": lambda: W.softmax(12, 30),
    "layer_norm": lambda: W.layer_norm(12, 30),
    "batch_matmul": lambda: W.batch_matmul(3, 8, 6, 5),
    "transpose": lambda: W.transpose(7, 5),
}


def _check(program, dag):
    inputs = random_inputs(arg_specs(list(dag.tensors)))
    expected = evaluate(dag, inputs)
    got = program.run([program.convert(a) for a in inputs])
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        g = g.numpy() if hasattr(g, "numpy") else np.asarray(g)
        assert g.shape == e.shape and g.dtype == e.dtype, (g.shape, e.shape, g.dtype, e.dtype)
        np.testing.assert_allclose(g, e, rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("name", list(DAGS))
def test_baselines_compute_what_the_dag_computes(name):
    dag = ComputeDAG(DAGS[name]())
    _check(numpy_program(dag), dag)
    _check(torch_program(dag), dag)


def test_the_formulas_a_user_would_write():
    dag = ComputeDAG(W.matmul_add(24, 20, 16))
    assert numpy_program(dag).formula.endswith(" = (A @ B) + C")
    assert torch_program(dag).formula.endswith("= torch.addmm(C, A, B)")
    conv = ComputeDAG(W.conv2d_nchw(2, 3, 11, 9, 5, 3, 3, stride=2, pad=1))
    text = torch_program(conv).text
    assert "F.conv2d(" in text and "stride=(2, 2), padding=(1, 1)" in text and "pad(" not in text
    assert "einsum(" in numpy_program(conv).text  # im2col + BLAS through einsum(optimize=True)
    assert compact_formula("t = A @ B\nout = t + C") == "out = (A @ B) + C"


def test_a_dag_without_a_formulation_says_which_op():
    A = te.placeholder((50,), name="A")
    idx = te.placeholder((8,), name="idx", dtype="int32")
    gather = ComputeDAG([A, idx, te.compute((8,), lambda i: A[idx[i]], name="G")])
    with pytest.raises(NoBaselineError, match="op G: the index idx\\[i\\] of A is not affine"):
        numpy_program(gather)
    with pytest.raises(NoBaselineError, match="op s_update"):
        numpy_program(ComputeDAG(W.cumsum_scan(4, 5)))
    timings = compare_with_baselines(gather, random_inputs(arg_specs(list(gather.tensors))), 1, repeats=1)
    assert [t.label for t in timings] == ["numpy", "torch"] and all(t.seconds is None for t in timings)
    assert "no numpy formulation: op G" in timings[0].why


def test_comparison_text_says_slower_when_slower():
    text = comparison_text([Timing("tuned", "", 2e-3), Timing("numpy", "out = (A @ B) + C", 1e-3),
                            Timing("torch", "", None, "torch is not installed")], 2)
    assert text == ("timed here at 2 threads: tuned 2 ms; numpy out = (A @ B) + C 1 ms (tuned 2.00x slower); "
                    "torch: torch is not installed")
    assert "(tuned 4.00x faster)" in comparison_text([Timing("tuned", "", 1e-6), Timing("numpy", "x", 4e-6)], 1)


def test_baselines_run_at_the_thread_count_asked():
    dag = ComputeDAG(W.matmul_add(64, 64, 64))
    inputs = random_inputs(arg_specs(list(dag.tensors)))
    before = torch.get_num_threads()
    seen = []
    program = torch_program(dag)
    run = program.run

    def spy(args):
        seen.append((torch.get_num_threads(),
                     max(int(p["num_threads"]) for p in threadpool_info() if p.get("user_api") == "blas")))
        return run(args)
    program.run = spy
    time_baseline(program, inputs, 1, repeats=1)
    assert seen and all(s == (1, 1) for s in seen)
    assert torch.get_num_threads() == before
