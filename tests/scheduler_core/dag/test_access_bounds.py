"""No validated DAG describes an access outside its tensors.

``check_access_bounds`` proves every load of every op in bounds by interval analysis;
the JSON decoder runs it, so ``ComputeDAG.from_json`` rejects out-of-bounds DAGs with
an error whose path names the op (``ops[k]``).

Expected: reads past a tensor and scans longer than their state are rejected with a
message naming op, tensor, index and ranges; every shared workload (padded conv2d,
depthwise conv with inline padding, scans, softmax, symbolic shapes, the examples) is
accepted; 5000-deep expressions give no RecursionError.
"""

from __future__ import annotations

import json
import pathlib

import pytest

from scheduler_core import ComputeDAG, InvalidWorkloadError, te
from scheduler_core.dag.access_bounds import check_access_bounds
from scheduler_core.dag.dag_json import dag_to_json
from tests import workloads as W

from .test_dag_json import WORKLOADS as JSON_WORKLOADS

REPO = pathlib.Path(__file__).resolve().parents[3]
EXAMPLES = sorted((REPO / "examples" / "workloads").glob("*.json"))

OOB_MESSAGE = ("op B reads A[(i + 1000)]: index 0 ranges over [1000, 1009] "
               "but A has 10 elements along dimension 0")


def oob_read():
    A = te.placeholder((10,), name="A")
    B = te.compute((10,), lambda i: A[i + 1000], name="B")
    return [A, B]


def long_scan_payload() -> dict:
    """The issue's scan: state [8, 16], scanned over 0..400 (the JSON allows any range)."""
    obj = dag_to_json(ComputeDAG(W.cumsum_scan(8, 16)))
    scan = next(op for op in obj["ops"] if op["kind"] == "scan")
    scan["scan_axis"]["min"] = 0
    scan["scan_axis"]["extent"] = 400
    return obj


def _rejects(tensors, match: str) -> None:
    with pytest.raises(InvalidWorkloadError, match=match):
        check_access_bounds(ComputeDAG(tensors))
    with pytest.raises(InvalidWorkloadError, match=match):
        ComputeDAG.from_json(dag_to_json(ComputeDAG(tensors)))


# -- rejected -------------------------------------------------------------------

def test_read_past_the_end_is_rejected_with_the_message():
    with pytest.raises(InvalidWorkloadError) as info:
        check_access_bounds(ComputeDAG(oob_read()))
    assert str(info.value) == OOB_MESSAGE
    assert info.value.path == ""


def test_json_decoder_rejects_it_naming_the_op():
    with pytest.raises(InvalidWorkloadError) as info:
        ComputeDAG.from_json(ComputeDAG(oob_read()).to_json())
    assert info.value.path == "ops[1]"
    assert str(info.value) == f"ops[1]: {OOB_MESSAGE}"


def test_scan_longer_than_its_state_is_rejected():
    with pytest.raises(InvalidWorkloadError) as info:
        ComputeDAG.from_json(long_scan_payload())
    assert info.value.path == "ops[4]"
    assert str(info.value) == ("ops[4]: op scan: scan axis scan.idx ranges over [0, 399] but "
                               "state s_state has 8 elements along dimension 0")


def test_scan_built_in_python_longer_than_its_state_is_rejected():
    X = te.placeholder((400, 16), name="X")
    state = te.placeholder((8, 16), name="s_state")
    init = te.compute((1, 16), lambda _, i: X[0, i], name="s_init")
    update = te.compute((400, 16), lambda t, i: state[t - 1, i] + X[t, i], name="s_update")
    scan = te.scan(init, update, state, inputs=[X], name="scan")
    _rejects([X, scan], r"op scan: scan axis scan\.idx ranges over \[1, 399\] but state s_state "
                        r"has 8 elements along dimension 0")


def test_scan_init_wider_than_the_output_is_rejected():
    X = te.placeholder((8, 16), name="X")
    state = te.placeholder((8, 16), name="s_state")
    init = te.compute((1, 20), lambda _, i: 0.0, name="s_init")
    update = te.compute((8, 16), lambda t, i: state[t - 1, i] + X[t, i], name="s_update")
    scan = te.scan(init, update, state, inputs=[X], name="scan")
    _rejects([X, scan], r"op scan: init s_init has 20 elements along dimension 1 but the scan's "
                        r"output \(update s_update\) has 16")


def test_negative_index_is_rejected():
    A = te.placeholder((6,), name="A")
    B = te.compute((6,), lambda i: A[i - 1], name="B")
    _rejects([A, B], r"op B reads A\[\(i - 1\)\]: index 0 ranges over \[-1, 4\] but A has 6 "
                     r"elements along dimension 0")


def test_taken_else_branch_out_of_range_is_rejected():
    A = te.placeholder((4,), name="A")
    B = te.compute((4,), lambda i: te.if_then_else(i < 3, A[i + 1], A[i + 2]), name="B")
    _rejects([A, B], r"A\[\(i \+ 2\)\]: index 0 ranges over \[5, 5\]")


def test_reduction_past_the_end_is_rejected():
    A = te.placeholder((4, 8), name="A")
    k = te.reduce_axis((0, 9), name="k")
    B = te.compute((4,), lambda i: te.sum(A[i, k], axis=k), name="B")
    _rejects([A, B], r"op B reads A\[i, k\]: index 1 ranges over \[0, 8\] but A has 8 elements "
                     r"along dimension 1")


def test_or_condition_does_not_narrow():
    A = te.placeholder((6,), name="A")
    B = te.compute((6,), lambda i: te.if_then_else(te.any(i >= 1, i == 0), A[i - 1], 0.0),
                   name="B")
    _rejects([A, B], r"index 0 ranges over \[-1, 4\]")


# -- accepted -------------------------------------------------------------------

def test_padded_conv2d_is_accepted():
    for stride, pad, k in ((1, 1, 3), (2, 1, 3), (1, 2, 5), (2, 0, 1)):
        dag = ComputeDAG(W.conv2d_nchw(1, 3, 10, 9, 4, k, k, stride=stride, pad=pad))
        check_access_bounds(dag)
        ComputeDAG.from_json(dag.to_json())


@pytest.mark.parametrize("name", sorted(W.SMALL_DAGS))
def test_small_dags_are_accepted(name):
    dag = ComputeDAG(W.SMALL_DAGS[name]())
    check_access_bounds(dag)
    assert ComputeDAG.from_json(dag.to_json()).to_json() == dag.to_json()


@pytest.mark.parametrize("name", sorted(JSON_WORKLOADS))
def test_json_workloads_are_accepted(name):
    dag = ComputeDAG(JSON_WORKLOADS[name]())
    check_access_bounds(dag)
    ComputeDAG.from_json(dag.to_json())


def _more_workloads():
    n, m = te.var("n"), te.var("m")
    return {
        "matmul_add": W.matmul_add(4, 5, 6),
        "matmul_symbolic": W.matmul(n, m, 8),
        "conv2d_symbolic": W.conv2d_nchw(1, 3, n, m, 4, 3, 3, pad=1),
        "depthwise_stride2": W.depthwise_conv2d(1, 3, 11, 11, 3, 3, stride=2, pad=1),
        "depthwise_pad2": W.depthwise_conv2d(1, 2, 7, 6, 5, 5, pad=2),
        "softmax_symbolic": W.softmax(n, m),
        "layer_norm_symbolic": W.layer_norm(n, m),
        "rgb_to_yuv_symbolic": W.rgb_to_yuv(n, m),
        "cumsum_scan_symbolic": W.cumsum_scan(n, m),
        "two_stage_scan": W.two_stage_scan(9, 10),
        "two_state_scan": W.two_state_scan(9, 10, 4),
        "batch_matmul_symbolic": W.batch_matmul(2, n, m, 3),
    }


@pytest.mark.parametrize("name", sorted(_more_workloads()))
def test_other_workloads_are_accepted(name):
    check_access_bounds(ComputeDAG(_more_workloads()[name]))


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_example_workloads_are_accepted(path):
    text = path.read_text()
    dag = ComputeDAG.from_json(text)  # the decoder runs the check
    check_access_bounds(dag)
    assert json.loads(dag.to_json()) == json.loads(ComputeDAG.from_json(dag.to_json()).to_json())


def test_guards_narrow_the_checked_range():
    A = te.placeholder((6,), name="A")
    k = te.reduce_axis((0, 8), name="k")
    ok = [
        te.compute((6,), lambda i: te.if_then_else(i < 1, 0.0, A[i - 1]), name="else_branch"),
        te.compute((6,), lambda i: te.if_then_else(te.all(i >= 1, i < 7), A[i - 1], 0.0),
                   name="shifted"),
        te.compute((6,), lambda i: te.if_then_else(~(i == 0), A[i - 1], 0.0), name="not_eq"),
        te.compute((3,), lambda i: te.sum(A[i + k - 2], axis=k,
                                          where=te.all(i + k >= 2, i + k - 2 < 6)), name="where"),
    ]
    for B in ok:
        check_access_bounds(ComputeDAG([A, B]))


def test_symbolic_shapes_are_skipped():
    n = te.var("n")
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i + 1], name="B")  # unprovable: not checked
    check_access_bounds(ComputeDAG([A, B]))
    C = te.placeholder((n, 4), name="C")
    D = te.compute((n, 4), lambda i, j: C[i, j + 1], name="D")  # the constant dim is checked
    with pytest.raises(InvalidWorkloadError, match=r"index 1 ranges over \[1, 4\]"):
        check_access_bounds(ComputeDAG([C, D]))


# -- deep expressions -------------------------------------------------------------

DEEP = 5000


def test_deep_body_gives_no_recursion_error():
    A = te.placeholder((10,), name="A")

    def body(i):
        e = A[i]
        for _ in range(DEEP):
            e = e + A[i]
        return e + A[i + 1000]
    B = te.compute((10,), body, name="B")
    with pytest.raises(InvalidWorkloadError, match=r"A\[\(i \+ 1000\)\]"):
        check_access_bounds(ComputeDAG([A, B]))


def test_deep_selects_and_indices_give_no_recursion_error():
    A = te.placeholder((10,), name="A")

    def nested(i):
        e = A[i]
        for _ in range(DEEP):
            e = te.if_then_else(i > 0, e, A[i])
        return e
    check_access_bounds(ComputeDAG([A, te.compute((10,), nested, name="B")]))

    def deep_index(i):
        idx = i
        for _ in range(DEEP):
            idx = idx + 1
        return A[idx]
    # too deep to analyse: skipped, not rejected, and no RecursionError
    check_access_bounds(ComputeDAG([A, te.compute((10,), deep_index, name="C")]))

    def many_conditions(i):
        return te.if_then_else(te.all(*[i >= 1 for _ in range(DEEP)]), A[i - 1], 0.0)
    check_access_bounds(ComputeDAG([A, te.compute((10,), many_conditions, name="D")]))
