"""ComputeDAG: structure, Ansor's DAG print, FLOP count, workload_key, access analysis.

The workloads here (seed 000 matmul+bias, matmul+bias+ReLU, softmax, padded
conv2d+bias+ReLU, seed 001 scans) are also used by ``test_dag_json``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from scheduler_core import ComputeDAG, InvalidWorkloadError, te
from scheduler_core.dag.tensor import ComputeOp, PlaceholderOp, ScanOp

REPO = Path(__file__).resolve().parents[3]


# -- workloads ---------------------------------------------------------------

def matmul_add(N=1024, L=1024, M=1024, dtype="float32", names=("A", "B", "C")):
    """Seed 000: matmul with a layout-free B, then a bias add."""
    A = te.placeholder((N, L), name=names[0], dtype=dtype)
    B = te.placeholder((L, M), name=names[1], dtype=dtype)
    C = te.placeholder((N, M), name=names[2], dtype=dtype)
    k = te.reduce_axis((0, L), name="k")
    matmul = te.compute((N, M), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="matmul",
                        attrs={"layout_free_placeholders": [B]})
    out = te.compute((N, M), lambda i, j: matmul[i, j] + C[i, j], name="out")
    return [A, B, C, out]


def matmul_bias_relu(N=8, L=4, M=6):
    A = te.placeholder((N, L), name="A")
    B = te.placeholder((L, M), name="B")
    bias = te.placeholder((M,), name="bias")
    k = te.reduce_axis((0, L), name="k")
    mm = te.compute((N, M), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="matmul")
    biased = te.compute((N, M), lambda i, j: mm[i, j] + bias[j], name="bias_add")
    relu = te.compute((N, M), lambda i, j: te.max(biased[i, j], 0.0), name="relu")
    return [A, B, bias, relu]


def softmax(n, m):
    A = te.placeholder((n, m), name="A")
    k1 = te.reduce_axis((0, m), name="k1")
    amax = te.compute((n,), lambda i: te.max(A[i, k1], axis=k1), name="amax")
    e = te.compute((n, m), lambda i, j: te.exp(A[i, j] - amax[i]), name="exp")
    k2 = te.reduce_axis((0, m), name="k2")
    s = te.compute((n,), lambda i: te.sum(e[i, k2], axis=k2), name="expsum")
    out = te.compute((n, m), lambda i, j: e[i, j] / s[i], name="softmax")
    return [A, out]


def conv2d_bias_relu(N=1, CI=3, H=6, W=5, CO=4, K=3, pad=1):
    """NCHW conv2d with zero padding written as if_then_else, then bias and ReLU."""
    data = te.placeholder((N, CI, H, W), name="data")
    kernel = te.placeholder((CO, CI, K, K), name="kernel")
    bias = te.placeholder((CO,), name="bias")
    padded = te.compute(
        (N, CI, H + 2 * pad, W + 2 * pad),
        lambda n, c, h, w: te.if_then_else(
            te.all(h >= pad, h < H + pad, w >= pad, w < W + pad),
            data[n, c, h - pad, w - pad], 0.0),
        name="pad")
    rc = te.reduce_axis((0, CI), name="rc")
    ry = te.reduce_axis((0, K), name="ry")
    rx = te.reduce_axis((0, K), name="rx")
    conv = te.compute(
        (N, CO, H, W),
        lambda n, f, y, x: te.sum(padded[n, rc, y + ry, x + rx] * kernel[f, rc, ry, rx],
                                  axis=[rc, ry, rx]),
        name="conv")
    biased = te.compute((N, CO, H, W), lambda n, f, y, x: conv[n, f, y, x] + bias[f], name="bias_add")
    relu = te.compute((N, CO, H, W), lambda n, f, y, x: te.max(biased[n, f, y, x], 0.0), name="relu")
    return [data, kernel, bias, relu]


def scan_cumsum():
    """Seed 001, the first example, verbatim."""
    m = te.var("m")
    n = te.var("n")
    X = te.placeholder((m, n), name="X")
    s_state = te.placeholder((m, n))
    s_init = te.compute((1, n), lambda _, i: X[0, i])
    s_update = te.compute((m, n), lambda t, i: s_state[t - 1, i] + X[t, i])
    s_scan = te.scan(s_init, s_update, s_state, inputs=[X])
    return [X, s_scan]


def scan_two_states():
    """Seed 001, the multi-state example."""
    m, n, l = te.var("m"), te.var("n"), te.var("l")
    X = te.placeholder((m, n), name="X")
    s_state1 = te.placeholder((m, n))
    s_state2 = te.placeholder((m, l))
    s_init1 = te.compute((1, n), lambda _, i: X[0, i])
    s_init2 = te.compute((1, l), lambda _, i: 0.0)
    s_update1 = te.compute((m, n), lambda t, i: s_state1[t - 1, i] + X[t, i])
    s_update2 = te.compute((m, l), lambda t, i: s_state2[t - 1, i] + s_state1[t - 1, 0])
    s_scan1, s_scan2 = te.scan([s_init1, s_init2], [s_update1, s_update2], [s_state1, s_state2],
                               inputs=[X])
    return [X, s_scan1, s_scan2]


def op_named(dag, name):
    (op,) = [o for o in dag.ops if o.name == name]
    return op


# -- structure and printing -----------------------------------------------------

SEED_000_PRINT = """\
A = PLACEHOLDER [1024, 1024]
B = PLACEHOLDER [1024, 1024]
matmul(i, j) += (A[i, k]*B[k, j])
C = PLACEHOLDER [1024, 1024]
out(i, j) = (matmul[i, j] + C[i, j])
"""


def test_seed_000_structure_and_print():
    """Ops in Ansor's order: A, B, matmul, C, out; the print is seed 000's, verbatim."""
    dag = ComputeDAG(matmul_add())
    assert [op.name for op in dag.ops] == ["A", "B", "matmul", "C", "out"]
    assert [type(op) for op in dag.ops] == [PlaceholderOp, PlaceholderOp, ComputeOp, PlaceholderOp,
                                            ComputeOp]
    assert [t.name for t in dag.inputs] == ["A", "B", "C"]
    assert [t.name for t in dag.outputs] == ["out"]
    assert str(dag) == SEED_000_PRINT


def test_print_reducers_where_and_softmax():
    dag = ComputeDAG(softmax(4, 8))
    assert str(dag).splitlines() == [
        "A = PLACEHOLDER [4, 8]",
        "amax(i) max= A[i, k1]",
        "exp(i, j) = exp((A[i, j] - amax[i]))",
        "expsum(i) += exp[i, k2]",
        "softmax(i, j) = (exp[i, j]/expsum[i])",
    ]
    A = te.placeholder((5, 6), name="A")
    k = te.reduce_axis((0, 6), name="k")
    lo = te.compute((5,), lambda i: te.min(A[i, k], axis=k, where=k > 1), name="lo")
    pr = te.compute((5,), lambda i: te.prod(A[i, k], axis=k), name="pr")
    text = str(ComputeDAG([A, lo, pr])).splitlines()
    assert "lo(i) min= A[i, k] where (k > 1)" in text
    assert "pr(i) *= A[i, k]" in text


def test_print_scan_and_symbolic_shapes():
    dag = ComputeDAG(scan_cumsum())
    assert str(dag).splitlines() == [
        "X = PLACEHOLDER [m, n]",
        "compute(_, i) = X[0, i]",
        "placeholder = PLACEHOLDER [m, n]",
        "compute(t, i) = (placeholder[(t - 1), i] + X[t, i])",
        "scan = SCAN(axis=scan.idx, min=1, extent=(m - 1), init=[compute], update=[compute], "
        "state=[placeholder])",
    ]
    assert isinstance(dag.ops[-1], ScanOp)


# -- FLOP count ---------------------------------------------------------------------

@pytest.mark.parametrize("N,L,M", [(1024, 1024, 1024), (64, 32, 48)])
def test_flop_count_matmul_add(N, L, M):
    """2*N*M*L for the multiply-adds plus N*M for the bias add."""
    assert ComputeDAG(matmul_add(N, L, M)).flop_ct == 2 * N * M * L + N * M


def test_flop_count_softmax_conv_and_int_index_math():
    n, m = 16, 24
    # TVM's FlopEstimator: max, sub, sum, div; exp is an intrinsic call and counts 0
    assert ComputeDAG(softmax(n, m)).flop_ct == 4 * n * m
    N, CI, H, W, CO, K = 1, 3, 6, 5, 4, 3
    # the padding stage counts 0: if_then_else is free and its integer bounds checks too
    conv = 2 * N * CO * H * W * CI * K * K
    assert ComputeDAG(conv2d_bias_relu(N, CI, H, W, CO, K)).flop_ct == conv + 2 * N * CO * H * W


def test_flop_count_symbolic_needs_bindings():
    dag = ComputeDAG(softmax(te.var("n"), te.var("m")))
    with pytest.raises(InvalidWorkloadError, match="symbolic"):
        _ = dag.flop_ct
    assert dag.flop_count({"n": 3, "m": 7}) == 4 * 3 * 7
    n_var = dag.tensors[0].shape[0]
    assert dag.flop_count({n_var: 3, "m": 7}) == 4 * 3 * 7
    scan = ComputeDAG(scan_cumsum())
    assert scan.flop_count({"m": 10, "n": 4}) == 10 * 4  # the update's add; init copies


def test_flop_attr_overrides_estimate():
    A = te.placeholder((4,), name="A")
    B = te.compute((4,), lambda i: A[i] * 2.0, name="B", attrs={"FLOP": 1000})
    assert ComputeDAG([A, B]).flop_ct == 1000


# -- workload_key ----------------------------------------------------------------------

KEY_SCRIPT = (
    "from tests.scheduler_core.dag.test_compute_dag import matmul_add, scan_cumsum;"
    "from scheduler_core import ComputeDAG;"
    "print(ComputeDAG(matmul_add()).workload_key, ComputeDAG(scan_cumsum()).workload_key)"
)


def test_workload_key_is_stable_across_builds_and_processes():
    key = ComputeDAG(matmul_add()).workload_key
    assert len(key) == 32 and int(key, 16) >= 0
    assert ComputeDAG(matmul_add()).workload_key == key
    env = dict(os.environ, PYTHONPATH=str(REPO), PYTHONHASHSEED="123")
    out = subprocess.run([sys.executable, "-c", KEY_SCRIPT], cwd=REPO, env=env,
                         capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.split() == [key, ComputeDAG(scan_cumsum()).workload_key]


def test_workload_key_changes_with_name_shape_dtype():
    key = ComputeDAG(matmul_add()).workload_key
    assert ComputeDAG(matmul_add(names=("A", "B", "Bias"))).workload_key != key
    assert ComputeDAG(matmul_add(1024, 1024, 512)).workload_key != key
    assert ComputeDAG(matmul_add(dtype="float64")).workload_key != key


# -- access analysis ---------------------------------------------------------------------

def test_access_analysis_matmul_add():
    dag = ComputeDAG(matmul_add(64, 64, 64))
    aa = dag.access_analyzer
    A, B, mm, C, out = dag.ops
    assert aa.needs_multi_level_tiling(mm) and not aa.needs_multi_level_tiling(out)
    assert not aa.is_simple_access(mm)  # reads A[i, k]: k is a reduce axis
    assert aa.is_simple_access(out) and aa.is_injective(out) and not aa.is_injective(mm)
    assert aa.is_output(out) and not aa.is_output(mm) and not aa.is_output(A)
    assert not aa.is_strictly_inlineable(out)  # an output
    assert [t.name for t in aa.read_from(mm)] == ["A", "B"]
    assert [str(idx) for idx in aa.read_from(mm)[A.output(0)][0]] == ["i", "k"]
    assert list(aa.read_by(mm)) == [out]
    assert aa.get_consumers(None, A) == [mm] and aa.get_producers(None, out) == [mm, C]
    assert aa.elementwise_match(mm, out)
    assert aa.num_common_outer_iterators(mm, out) == 2
    assert aa.num_common_outer_iterators(A, mm) == 1  # A[i, k]: only i is mm's outer axis
    assert aa.num_common_outer_iterators(B, mm) == 0
    assert aa.num_common_outer_iterators(out, mm) == 0  # not connected downstream


def test_access_analysis_bias_relu_inlining_and_consumers():
    dag = ComputeDAG(matmul_bias_relu())
    aa = dag.access_analyzer
    mm, biased, relu = (op_named(dag, n) for n in ("matmul", "bias_add", "relu"))
    assert aa.is_strictly_inlineable(biased)  # simple, non-output, cheap
    assert not aa.is_strictly_inlineable(relu) and aa.is_output(relu)
    assert aa.elementwise_match(mm, relu)
    assert aa.get_consumers(None, mm) == [biased]
    assert aa.get_consumers([biased], mm) == [relu]  # look through the inlined op
    state = SimpleNamespace(stages=[SimpleNamespace(op=op, compute_at="inlined" if op is biased else "root")
                                    for op in dag.ops])
    assert aa.get_consumers(state, mm) == [relu]
    assert [o.name for o in aa.get_producers(state, relu)] == ["matmul", "bias"]
    assert aa.num_common_outer_iterators(mm, relu) == 2
    assert aa.single_elementwise_consumer(None, mm) is biased
    assert aa.single_elementwise_consumer(state, mm) is relu
    assert aa.single_elementwise_consumer(None, relu) is None


def test_access_analysis_softmax():
    dag = ComputeDAG(softmax(8, 16))
    aa = dag.access_analyzer
    amax, e, s, out = (op_named(dag, n) for n in ("amax", "exp", "expsum", "softmax"))
    assert not any(aa.needs_multi_level_tiling(op) for op in dag.ops)
    assert aa.is_simple_access(e) and not aa.is_strictly_inlineable(e)  # exp is expensive
    assert not aa.is_simple_access(amax) and not aa.is_injective(amax)
    assert aa.get_consumers(None, e) == [s, out]
    assert not aa.elementwise_match(e, out)  # exp has two consumers
    assert aa.single_elementwise_consumer(None, e) is None
    # the minimum over paths: exp -> softmax shares 2 loops, exp -> expsum -> softmax 1
    assert aa.num_common_outer_iterators(e, out) == 1
    assert aa.num_common_outer_iterators(e, s) == 1
    assert aa.num_common_outer_iterators(amax, out) == 1


def test_access_analysis_conv2d_padding():
    dag = ComputeDAG(conv2d_bias_relu())
    aa = dag.access_analyzer
    pad, conv, biased, relu = (op_named(dag, n) for n in ("pad", "conv", "bias_add", "relu"))
    assert aa.needs_multi_level_tiling(conv)
    assert aa.is_simple_access(pad)  # data[n, c, h - 1, w - 1]: constant shifts
    assert not aa.is_strictly_inlineable(pad)  # has a branch (if_then_else)
    assert not aa.is_simple_access(conv)  # y + ry
    assert aa.is_strictly_inlineable(biased) and aa.elementwise_match(conv, relu)
    assert aa.num_common_outer_iterators(pad, conv) == 1  # padded[n, rc, ...]


def test_access_analysis_transpose_and_broadcast():
    A = te.placeholder((4, 4), name="A")
    v = te.placeholder((4,), name="v")
    T = te.compute((4, 4), lambda i, j: A[j, i], name="T")
    outer = te.compute((4, 4), lambda i, j: T[i, 0] * v[j], name="outer")
    dag = ComputeDAG([A, v, outer])
    aa = dag.access_analyzer
    T_op, outer_op = op_named(dag, "T"), op_named(dag, "outer")
    assert aa.is_simple_access(T_op) and not aa.is_strictly_inlineable(T_op)  # a transpose
    assert aa.needs_multi_level_tiling(outer_op)  # two inputs each miss an axis
    assert not aa.elementwise_match(T_op, outer_op)


def test_access_analysis_scan():
    dag = ComputeDAG(scan_two_states())
    aa = dag.access_analyzer
    scan = dag.ops[-1]
    init2 = [op for op in dag.ops if isinstance(op, ComputeOp) and not aa.read_from(op)][0]
    assert aa.is_strictly_inlineable(init2)  # a constant tensor
    assert aa.is_output(scan) and not aa.is_simple_access(scan) and not aa.is_injective(scan)
    assert all(v == [] for v in aa.read_from(scan).values())
    assert len(aa.get_producers(None, scan)) == 4  # two inits, two updates
    with pytest.raises(KeyError, match="not in this ComputeDAG"):
        aa.is_output(te.placeholder((1,), name="stranger").op)


def test_shape_dims_convert_to_python_numbers_as_in_tvm():
    A = te.placeholder((3, 5), name="A")
    assert [int(d) for d in A.shape] == [3, 5]
    assert float(te.const(2.5, "float32")) == 2.5


def test_get_init_state_is_tvm_spelling_of_state_from_dag():
    """``dag.get_init_state()`` and ``dag.init_state`` (TVM's names) give the State that
    ``State.from_dag`` gives: one stage per op, at root, with no transform steps."""
    from scheduler_core.schedule.loop_state import State

    dag = ComputeDAG(matmul_add(64, 32, 16))
    state = dag.get_init_state()
    assert isinstance(state, State) and isinstance(dag.init_state, State)
    assert state.dag is dag and state.transform_steps == ()
    assert [st.op for st in state.stages] == list(dag.ops)
    assert str(state) == str(State.from_dag(dag)) == str(dag.init_state)
