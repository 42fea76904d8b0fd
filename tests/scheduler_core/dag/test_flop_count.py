"""ComputeDAG.flop_ct counts what TVM's FlopEstimator counts (src/auto_scheduler/compute_dag.cc).

TVM's rules: an arithmetic, comparison or logical node counts 1 when either operand has
the compute's type code (float / int / uint, bool being uint), so integer index math and
bounds checks in a float compute are free; ``if_then_else`` is a call (0, plus all its
arguments); intrinsic calls and pow count 0 plus their arguments; casts count their value;
a reduction counts (combiner + source) per reduce iteration, its ``where`` not at all.
The padding stage of a conv2d therefore counts 0 (TVM's own test_estimate_flop: "should
not count the comparison operations in padding").
"""

from __future__ import annotations

import pytest

from scheduler_core import te
from scheduler_core.dag.compute_dag import ComputeDAG
from tests.workloads import conv2d_nchw, depthwise_conv2d, layer_norm, matmul, matmul_bias_relu, softmax

N = 16


def _per_point(fcompute, in_dtype="float32") -> float:
    """flop_ct / N of a 1-d compute of extent N over ``A`` (N,) of ``in_dtype``."""
    A = te.placeholder((N,), in_dtype, name="A")
    B = te.compute((N,), lambda i: fcompute(A, i), name="B")
    return ComputeDAG([A, B]).flop_ct / N


def test_padding_stage_counts_zero():
    args = conv2d_nchw(1, 3, 8, 8, 4, 3, 3)
    pad = next(op for op in ComputeDAG(args).ops if op.name == "pad")
    assert ComputeDAG([args[0], pad.output(0)]).flop_ct == 0


@pytest.mark.parametrize("n,c,h,w,k,r,stride", [(1, 3, 8, 8, 4, 3, 1), (2, 4, 9, 7, 5, 3, 2),
                                                 (1, 8, 14, 14, 16, 1, 1)])
def test_conv2d_with_padding_is_2NKCRS_OH_OW_plus_bias_relu(n, c, h, w, k, r, stride):
    dag = ComputeDAG(conv2d_nchw(n, c, h, w, k, r, r, stride=stride, pad=1))
    oh, ow = (h + 2 - r) // stride + 1, (w + 2 - r) // stride + 1
    assert [int(d.value) for d in dag.tensors[-1].shape] == [n, k, oh, ow]
    conv = 2 * n * k * c * r * r * oh * ow        # a multiply and the sum's add per iteration
    bias_relu = 2 * n * k * oh * ow              # the bias add and the max with 0
    assert dag.flop_ct == conv + bias_relu


@pytest.mark.parametrize("n,m,l", [(64, 32, 48), (1024, 1024, 1024), (1, 7, 3)])
def test_matmul_is_2NMK(n, m, l):
    assert ComputeDAG(matmul(n, m, l)).flop_ct == 2 * n * m * l
    assert ComputeDAG(matmul_bias_relu(n, m, l)).flop_ct == 2 * n * m * l + 2 * n * m


def test_depthwise_conv_inline_padding_is_free():
    # sum(if_then_else(inside, data, 0) * kernel): the multiply and the combiner only
    n, c, h, w, kh, kw = 1, 2, 5, 6, 3, 3
    assert ComputeDAG(depthwise_conv2d(n, c, h, w, kh, kw)).flop_ct == 2 * n * c * h * w * kh * kw


def test_softmax_and_layer_norm_count_no_intrinsic_calls():
    n, m = 16, 24
    assert ComputeDAG(softmax(n, m)).flop_ct == 4 * n * m   # max, sub (exp: 0), sum, div
    # total: sum; mean: div; sqsum: sub, sub, mul, add; out: sub, mul, div, add (rsqrt: 0), mul, add
    assert ComputeDAG(layer_norm(n, m)).flop_ct == n * m + n + 4 * n * m + 6 * n * m


@pytest.mark.parametrize("fcompute,expected", [
    # if_then_else: 0 itself; a float comparison in a float compute counts (TVM's test case)
    (lambda A, i: te.if_then_else(A[i] > 0.0, A[i], te.const(0.0, "float32")), 1),
    # integer bounds checks and index arithmetic in a float compute are free
    (lambda A, i: te.if_then_else(te.all(i >= 1, i < N - 1), A[i * 0 + i], te.const(0.0, "float32")), 0),
    # both branches are counted (tir.if_then_else is a call: its arguments are summed)
    (lambda A, i: te.if_then_else(A[i] > 0.0, A[i] * 2.0, A[i] + 1.0), 3),
    # max / min are binary nodes: 1 each
    (lambda A, i: te.max(A[i], te.const(0.0, "float32")), 1),
    (lambda A, i: te.min(te.max(A[i], te.const(0.0, "float32")), te.const(6.0, "float32")), 2),
    # intrinsic calls and pow count 0 plus their arguments
    (lambda A, i: te.exp(A[i]), 0),
    (lambda A, i: te.sqrt(A[i] * A[i] + 1.0), 2),
    (lambda A, i: te.pow(A[i], te.const(2.0, "float32")), 0),
    (lambda A, i: te.sigmoid(-A[i]), 1),                       # negation is 0 - x
    # a cast counts its value only
    (lambda A, i: (A[i] * 2.0).astype("float64"), 1),
])
def test_float_expressions(fcompute, expected):
    assert _per_point(fcompute) == expected


@pytest.mark.parametrize("fcompute,expected", [
    # an integer compute counts its integer arithmetic (TVM counts by the output's type code)
    (lambda A, i: A[i] * 2 + i, 2),
    (lambda A, i: te.floordiv(A[i], 3) + te.floormod(A[i], 3), 3),
    # float arithmetic inside an int compute does not have the int type code
    (lambda A, i: (A[i].astype("float32") * 2.0).astype("int32"), 0),
    # an integer comparison in an integer compute counts
    (lambda A, i: te.if_then_else(A[i] > 3, A[i], 0), 1),
])
def test_integer_compute_expressions(fcompute, expected):
    assert _per_point(fcompute, "int32") == expected


def test_bool_compute_counts_logical_ops_only():
    # bool is TVM's UInt(1): in a bool compute the float comparisons (float operands) are
    # free and the and / not (bool operands) count
    assert _per_point(lambda A, i: te.all(A[i] > 0.0, A[i] < 1.0)) == 1
    assert _per_point(lambda A, i: ~(A[i] > 0.0)) == 1


def test_reductions_count_combiner_and_source_not_condition():
    A = te.placeholder((8, 32), name="A")
    k = te.reduce_axis((0, 32), name="k")
    S = te.compute((8,), lambda i: te.sum(A[i, k], axis=k), name="S")
    assert ComputeDAG([A, S]).flop_ct == 8 * 32
    k = te.reduce_axis((0, 32), name="k")
    M = te.compute((8,), lambda i: te.max(A[i, k] * 2.0, axis=k), name="M")
    assert ComputeDAG([A, M]).flop_ct == 8 * 32 * 2
    k = te.reduce_axis((0, 32), name="k")
    W = te.compute((8,), lambda i: te.sum(A[i, k], axis=k, where=A[i, k] > 0.5), name="W")
    assert ComputeDAG([A, W]).flop_ct == 8 * 32                # where= is not counted
    I = te.placeholder((8, 32), "int32", name="I")
    k = te.reduce_axis((0, 32), name="k")
    P = te.compute((8,), lambda i: te.prod(I[i, k] + 1, axis=k), name="P")
    assert ComputeDAG([I, P]).flop_ct == 8 * 32 * 2
    k = te.reduce_axis((0, 32), name="k")
    Z = te.compute((), lambda: te.sum(A[3, k], axis=k), name="Z")    # zero-rank: one point
    assert ComputeDAG([A, Z]).flop_ct == 32


def test_flop_attr_still_overrides():
    A = te.placeholder((4,), name="A")
    B = te.compute((4,), lambda i: te.if_then_else(A[i] > 0.0, A[i], 0.0), name="B", attrs={"FLOP": 77})
    assert ComputeDAG([A, B]).flop_ct == 77
