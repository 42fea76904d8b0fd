"""RuleSimplifyComputeWithConstTensor and the Winograd conv2d it exists for.

    te.const_matrix (A, B, G) + attrs["auto_scheduler_simplify_const_tensor_indices"]
      --ComputeDAG--> JSON round trip, access analysis (no multi-level tiling)
      --generate_sketches--> TVM's 3 sketches (test_cpu_conv2d_winograd_sketch)
      --init rules--> states that build and match numpy's direct convolution

TVM: ``sketch_policy_rules.cc`` (RuleSimplifyComputeWithConstTensor), ``sketch_policy.cc``
(its place in the CPU rule order), ``topi/nn/conv2d.py`` (``_conv2d_winograd_nhwc_impl``)
and ``tests/python/unittest/test_auto_scheduler_sketch_generation.py``.
"""

from __future__ import annotations

import numpy as np
import pytest

import scheduler_core as sc
from scheduler_core import te
from scheduler_core.base.errors import InvalidWorkloadError, ScheduleError
from scheduler_core.dag import reference
from scheduler_core.dag.compute_dag import ComputeDAG
from scheduler_core.schedule.loop_state import State
from scheduler_core.schedule.transform_step import AnnotationStep, PragmaStep, ReorderStep, SplitStep
from sketch_rules import (
    ConditionKind,
    RuleSimplifyComputeWithConstTensor,
    apply_init_rules,
    apply_mutation,
    default_sketch_rules,
    generate_sketches,
)
from sketch_rules.const_tensor_rule import const_tensor_indices, unroll_and_tile
from sketch_rules.init_population import lowers
from sketch_rules.state_queries import is_strictly_inlineable, is_tiled, needs_multi_level_tiling
from sketch_rules.step_history import has_cache_write_stage, has_rfactor_stage
from tests import workloads as W
from tests.sketch_rules.stub_policy import make_policy

ATTR = "auto_scheduler_simplify_const_tensor_indices"
UNROLL = AnnotationStep(0, 0, "unroll").to_record()[3]
# TVM's test_cpu_conv2d_winograd_sketch workload: (1, 28, 28, 128, 128, 3, 1, 1), F(4x4, 3x3)
TVM_SIZES = dict(n=1, h=28, w=28, ci=128, co=128, kernel_size=3, pad=1, tile_size=4)
SMALL = dict(n=1, h=6, w=6, ci=4, co=4, kernel_size=3, pad=1, tile_size=2)


def names(stage) -> list:
    """Loop names, ``/u`` marking an unrolled loop."""
    return [it.name + ("/u" if it.annotation == "unroll" else "") for it in stage.iters]


def run_conv(state_or_dag, tensors, seed=0, pre_computed=True):
    """Build ``state_or_dag`` (a State, or a DAG for its default schedule) for llvm, run it
    on random data and weights and return (output, numpy's direct convolution)."""
    state = State.from_dag(state_or_dag) if isinstance(state_or_dag, ComputeDAG) else state_or_dag
    data_t, kernel_t, out_t = tensors  # every workload here: 3x3 kernel, pad 1
    n, h, w, ci = (int(s.value) for s in data_t.shape)
    out_shape = tuple(int(s.value) for s in out_t.shape)
    rng = np.random.default_rng(seed)
    data = rng.uniform(-1, 1, (n, h, w, ci)).astype("float32")
    weight = rng.uniform(-1, 1, (3, 3, ci, out_shape[3])).astype("float32")
    tile_size = int(kernel_t.shape[0].value) - 2
    kernel = W.winograd_kernel_pack(weight, tile_size) if pre_computed else weight
    out = np.full(out_shape, np.nan, dtype="float32")
    sc.build(state, tensors, "llvm")(data, kernel, out)
    return out, W.conv2d_nhwc_reference(data, weight, pad=1)


# -- the DAG -------------------------------------------------------------------------
def test_const_matrix_is_a_constant_compute():
    """te.const_matrix: a compute of the matrix's shape and dtype reading no tensor, with
    TVM's attrs, that evaluates to the matrix; not 2-D or empty -> InvalidWorkloadError."""
    mat = np.array([[1.0, 0.0, -0.5], [0.25, 2.0, 0.0]], dtype="float32")
    t = te.const_matrix(mat, name="M")
    assert [int(s.value) for s in t.shape] == [2, 3] and t.dtype == "float32"
    assert t.op.attrs == {"const_matrix": True} and t.op.input_tensors() == []
    out = te.compute((2, 3), lambda i, j: t[i, j] * 1.0, name="out")
    got = reference.evaluate(ComputeDAG([out]), [])[0]
    np.testing.assert_array_equal(got, mat)
    assert te.const_matrix(mat.astype("float64")).dtype == "float64"
    assert te.const_matrix(mat, attrs={"x": 1}).op.attrs == {"x": 1}
    for bad in (np.ones(3), np.ones((0, 2)), np.ones((2, 2, 2))):
        with pytest.raises(InvalidWorkloadError):
            te.const_matrix(bad)


@pytest.mark.parametrize("m", [2, 4])
def test_winograd_matrices_give_the_correlation(m):
    """A^T [(G g G^T) * (B^T d B)] A is the (m, m) correlation of an (m+2)^2 tile with a 3x3
    kernel (F(2x2, 3x3): Lavin's matrices)."""
    A, B, G = W.winograd_transform_matrices(m, 3, "float64")
    assert A.shape == (m + 2, m) and B.shape == (m + 2, m + 2) and G.shape == (m + 2, 3)
    rng = np.random.default_rng(m)
    d, g = rng.normal(size=(m + 2, m + 2)), rng.normal(size=(3, 3))
    want = [[np.sum(d[i:i + 3, j:j + 3] * g) for j in range(m)] for i in range(m)]
    np.testing.assert_allclose(A.T @ ((G @ g @ G.T) * (B.T @ d @ B)) @ A, want, atol=1e-12)
    if m == 2:
        np.testing.assert_array_equal(B.T, [[-1, 0, 1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, -1, 0, 1]])
        np.testing.assert_array_equal(A.T, [[1, 1, 1, 0], [0, 1, -1, 1]])


@pytest.mark.parametrize("tile_size, pre_computed, hw", [
    (2, True, 6), (2, False, 6), (4, True, 6), (4, False, 7), (2, True, 5)])
def test_winograd_default_schedule_matches_direct_conv(tile_size, pre_computed, hw):
    """The DAG (with a kernel_pack stage or a pre-transformed kernel, output sizes that the
    tile does or does not divide) builds with the default schedule and matches numpy's direct
    convolution; so does the reference evaluator."""
    tensors = W.conv2d_winograd_nhwc(1, hw, hw, 3, 5, tile_size=tile_size, pre_computed=pre_computed)
    dag = ComputeDAG(tensors)
    got, want = run_conv(dag, tensors, pre_computed=pre_computed)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    rng = np.random.default_rng(0)
    ins = [rng.uniform(-1, 1, tuple(int(s.value) for s in t.shape)).astype("float32")
           for t in dag.inputs]
    mod_out = np.zeros_like(got)
    sc.build(State.from_dag(dag), tensors, "llvm")(*ins, mod_out)
    np.testing.assert_allclose(mod_out, reference.evaluate(dag, ins)[0], rtol=1e-4, atol=1e-4)


def test_attrs_survive_the_json_round_trip_and_steer_the_analysis():
    """The attr (a list of loop names) and const_matrix's flag round-trip through the DAG
    JSON with the same workload key; data_pack and inverse need no multi-level tiling
    (TVM's "fake reduction"), A and B are strictly inlineable (constant tensors), bgemm
    needs multi-level tiling."""
    dag = ComputeDAG(W.conv2d_winograd_nhwc(**SMALL))
    back = ComputeDAG.from_json(dag.to_json())
    assert back.workload_key == dag.workload_key
    attrs = {op.name: getattr(op, "attrs", None) for op in back.ops}
    assert attrs["data_pack"] == {ATTR: ["eps", "nu", "r_a", "r_b"]}
    assert attrs["inverse"] == {ATTR: ["vh", "vw", "r_a", "r_b"]}
    assert attrs["A"] == attrs["B"] == {"const_matrix": True}
    state = State.from_dag(back)
    by_name = {st.name: k for k, st in enumerate(state.stages)}
    assert [needs_multi_level_tiling(state, by_name[n]) for n in ("data_pack", "bgemm", "inverse")] \
        == [False, True, False]
    assert is_strictly_inlineable(state, by_name["A"]) and is_strictly_inlineable(state, by_name["B"])
    assert not is_strictly_inlineable(state, by_name["input_tile"])  # p // (nH * nW): not simple


# -- the rule ------------------------------------------------------------------------
def test_the_rule_sits_after_always_inline_in_the_cpu_order():
    """TVM's CPU order: AlwaysInline, SimplifyComputeWithConstTensor, AddRfactor, ..."""
    assert [type(r).__name__ for r in default_sketch_rules()][:3] == [
        "RuleAlwaysInline", "RuleSimplifyComputeWithConstTensor", "RuleAddRfactor"]


def test_cpu_conv2d_winograd_sketch():
    """Winograd conv2d NHWC 1x28x28x128 -> 128, 3x3, pad 1, F(4x4, 3x3) on llvm gives TVM's
    3 sketches (test_cpu_conv2d_winograd_sketch), the same for every stage but bgemm:

        data(0) data_pad(1) input_tile(2): root, untouched (not inlineable, no reuse)
        B(3), A: inlined (constant tensors are strictly inlineable)
        data_pack(4): RuleSimplifyComputeWithConstTensor:
            p.0 ci.0 p.1 ci.1 eps/u nu/u r_a/u r_b/u   (P = 49, ci = 128 split once)
        inverse:   p.0 co.0 p.1 co.1 vh/u vw/u r_a/u r_b/u
        conv2d_winograd (last): root, untouched
      No.0: bgemm(6) multi-level tiled "SSRSRS"; A(7) inlined, inverse(8), output(9)
      No.1: cache_write: bgemm.local(6) tiled, at bgemm(7) loop co.0 (fusion level 1);
            A(8) inlined, inverse(9), output(10)
      No.2: the same at bgemm loop co.1 (fusion level 2)
    No rfactor anywhere: the constant-tensor rule skips the rest for data_pack/inverse, and
    bgemm's spatial loops (6*6*49*128) are longer than its reduction (128).
    """
    sk = generate_sketches(make_policy(W.conv2d_winograd_nhwc(**TVM_SIZES)))
    assert len(sk) == 3
    tile_dp = ["p.0", "ci.0", "p.1", "ci.1", "eps/u", "nu/u", "r_a/u", "r_b/u"]
    tile_inv = ["p.0", "co.0", "p.1", "co.1", "vh/u", "vw/u", "r_a/u", "r_b/u"]
    mlt = [f"{a}.{lv}" for lv in range(2) for a in ("eps", "nu", "p", "co")] + ["ci.0"] + [
        "eps.2", "nu.2", "p.2", "co.2", "ci.1", "eps.3", "nu.3", "p.3", "co.3"]
    base = ["data", "data_pad", "input_tile", "B", "data_pack", "kernel_pack"]
    for k, s in enumerate(sk):
        cw = k > 0
        assert [st.name for st in s.stages] == base + (
            ["bgemm.local"] if cw else []) + ["bgemm", "A", "inverse", "conv2d_winograd"]
        st = s.stages
        assert [st[i].compute_at for i in (1, 2, 3)] == ["root", "root", "inlined"]
        assert not is_tiled(st[1]) and not is_tiled(st[2]) and not is_tiled(st[-1])
        assert names(st[4]) == tile_dp and names(st[-2]) == tile_inv
        assert st[-3].name == "A" and st[-3].compute_at == "inlined"
        assert names(st[6]) == mlt
        assert not any(has_rfactor_stage(s, i) for i in range(len(st)))
        assert has_cache_write_stage(s, 6) == cw
    assert sk[0].stages[6].compute_at == "root"
    for s, level in ((sk[1], 1), (sk[2], 2)):
        tgt, loop = s.stages[6].attach
        assert s.stages[6].compute_at == "iter" and (tgt, loop) == (7, f"co.{level - 1}")
        assert names(s.stages[7]) == [f"{a}.{lv}" for lv in range(level + 1)
                                      for a in ("eps", "nu", "p", "co")]
    assert [r.to_record() for r in sk[0].transform_steps[:7]] == [
        ["AN", 8, 0, UNROLL], ["AN", 8, 1, UNROLL], ["SP", 8, 2, 49, [None], 1],
        ["SP", 8, 4, 128, [None], 1], ["AN", 8, 6, UNROLL], ["AN", 8, 7, UNROLL],
        ["RE", 8, [2, 4, 3, 5, 0, 1, 6, 7]]]
    assert [r.to_record() for r in sk[0].transform_steps[-8:]] == [
        ["AN", 4, 0, UNROLL], ["AN", 4, 1, UNROLL], ["SP", 4, 2, 49, [None], 1],
        ["SP", 4, 4, 128, [None], 1], ["AN", 4, 6, UNROLL], ["AN", 4, 7, UNROLL],
        ["RE", 4, [2, 4, 3, 5, 0, 1, 6, 7]], ["CI", 3]]


def test_without_the_rule_the_transforms_would_get_rfactor_variants():
    """Leaving the rule out, data_pack and inverse (reduction 36 > 2 cores, no reuse) each
    get Ansor's two rfactor variants beside the plain one: 3 x 3 x 3 = 27 sketches, 24
    with an rfactor stage.  With the rule: 3 sketches, none."""
    policy = make_policy(W.conv2d_winograd_nhwc(**TVM_SIZES))
    rules = [r for r in default_sketch_rules() if not isinstance(r, RuleSimplifyComputeWithConstTensor)]
    sk = generate_sketches(policy, rules)
    assert len(sk) == 27
    assert sum(any(st.name.endswith(".rf") for st in s.stages) for s in sk) == 24


def test_kernel_transform_stage_multiplies_the_sketches():
    """Without a pre-transformed kernel, kernel_pack (sum over r_kh, r_kw of weight * G * G;
    no attr, as TOPI) needs multi-level tiling and has no element-wise consumer: like bgemm
    it is tiled plainly (level 0 below) or with a cache write fused at level 1 or 2, so
    3 x 3 = 9 sketches (the product of the two choices), G inlined, data_pack and inverse
    as above."""
    sk = generate_sketches(make_policy(W.conv2d_winograd_nhwc(**{**TVM_SIZES, "pre_computed": False})))
    assert len(sk) == 9
    variants = set()
    for s in sk:
        by_name = {st.name: k for k, st in enumerate(s.stages)}
        assert s.stages[by_name["G"]].compute_at == "inlined"
        assert names(s.stages[by_name["data_pack"]])[-4:] == ["eps/u", "nu/u", "r_a/u", "r_b/u"]
        variants.add(tuple(
            int(s.stages[by_name[f"{n}.local"]].attach[1].rsplit(".", 1)[1]) + 1
            if f"{n}.local" in by_name else 0 for n in ("kernel_pack", "bgemm")))
    assert variants == {(a, b) for a in range(3) for b in range(3)}


def _const_dag(attr_names, reduce=True):
    """T[i, j, x] = sum_{r} X[r, x] * M[r, i] * M[r, j]: a small constant-tensor stage."""
    X = te.placeholder((3, 10), name="X")
    M = te.const_matrix(np.arange(9.0, dtype="float32").reshape(3, 3), name="M")
    r = te.reduce_axis((0, 3), name="r")
    if reduce:
        T = te.compute((3, 3, 10), lambda i, j, x: te.sum(X[r, x] * M[r, i] * M[r, j], axis=r),
                       name="T", attrs={ATTR: attr_names})
    else:
        T = te.compute((3, 3, 10), lambda i, j, x: X[0, x] * M[0, i] * M[1, j], name="T",
                       attrs={ATTR: attr_names})
    return [X, T]


def test_rule_applies_only_to_well_formed_attrs():
    """The rule applies (and skips the rest) to an untiled compute stage whose attr is a list
    of loop names covering every reduction loop; not to a stage without the attr, with a
    non-list attr, with an unlisted reduction loop, or already tiled (TVM aborts there)."""
    rule = RuleSimplifyComputeWithConstTensor()

    def cond(tensors):
        policy = make_policy(tensors)
        state = State.from_dag(policy.task.compute_dag)
        return rule.meet_condition(policy, state, len(state.stages) - 1)

    assert cond(_const_dag(["i", "j", "r"])) == ConditionKind.APPLY_AND_SKIP_REST
    assert cond(_const_dag(("i", "j", "r"))) == ConditionKind.APPLY_AND_SKIP_REST
    assert cond(_const_dag(["i", "j"], reduce=False)) == ConditionKind.APPLY_AND_SKIP_REST
    assert cond(_const_dag(["i", "j"])) == ConditionKind.SKIP  # r not listed
    assert cond(_const_dag("i")) == ConditionKind.SKIP
    assert cond(W.matmul(8, 8, 8)) == ConditionKind.SKIP
    state = State.from_dag(ComputeDAG(_const_dag(["i", "j", "r"])))
    assert const_tensor_indices(state, 2) == frozenset({"i", "j", "r"})
    tiled = SplitStep(2, 2, 10, (2,), True).apply(state)
    assert const_tensor_indices(tiled, 2) is None


def test_unroll_and_tile_steps():
    """Unlisted spatial loops split into TILE_LEVEL = 2 pieces (unknown length), level by
    level, then the listed loops unrolled in their order; listing no spatial loop tiles
    them all; an unlisted reduction loop is a ScheduleError."""
    state = State.from_dag(ComputeDAG(_const_dag(["i", "j", "r"])))
    out = unroll_and_tile(state, 2, {"i", "j", "r"})
    assert names(out.stages[2]) == ["x.0", "x.1", "i/u", "j/u", "r/u"]
    assert [type(s) for s in out.transform_steps] == [AnnotationStep, AnnotationStep, SplitStep,
                                                      AnnotationStep, ReorderStep]
    out = unroll_and_tile(state, 2, {"r"})
    assert names(out.stages[2]) == ["i.0", "j.0", "x.0", "i.1", "j.1", "x.1", "r/u"]
    with pytest.raises(ScheduleError):
        unroll_and_tile(state, 2, {"i", "j"})


# -- init population and programs ----------------------------------------------------
def _one_state_per_sketch(tensors, seed):
    policy = make_policy(tensors)
    sketches = generate_sketches(policy)
    rng = np.random.default_rng(seed)
    states = []
    for sketch in sketches:
        for _ in range(40):
            state = apply_init_rules(policy, sketch, rng)
            if state is not None and lowers(state):
                states.append(state)
                break
        else:
            raise AssertionError(f"no lowerable state from sketch:\n{sketch}")
    return policy, states


def _check_const_stages(state):
    """The constant-tensor stages keep their unrolled loops innermost, nothing vectorized
    there (the innermost loop is an unrolled reduction), and get an auto-unroll pragma."""
    pragmas = {s.stage_id for s in state.transform_steps if isinstance(s, PragmaStep)}
    for k, st in enumerate(state.stages):
        if ATTR in (getattr(st.op, "attrs", None) or {}):
            assert [it.annotation for it in st.iters[-4:]] == ["unroll"] * 4, st
            assert all(it.annotation != "vectorize" for it in st.iters)
            assert k in pragmas


def test_init_states_of_every_sketch_build_and_match_numpy():
    """One state sampled (init rules) from each of the 3 sketches of a small Winograd conv2d
    builds and matches numpy's direct convolution; in the lowered program the unrolled
    transforms read no constant matrix (every select of A and B folded to a literal)."""
    tensors = W.conv2d_winograd_nhwc(**SMALL)
    _, states = _one_state_per_sketch(tensors, seed=11)
    assert len(states) == 3
    for k, state in enumerate(states):
        _check_const_stages(state)
        got, want = run_conv(state, tensors, seed=k)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    lines = [ln.strip() for ln in str(sc.lower(states[0], tensors)).splitlines()]
    stores = [ln for ln in lines if ln.startswith(("data_pack[", "inverse["))]
    # unrolled: per (eps, nu) of data_pack (4 x 4) and (vh, vw) of inverse (2 x 2), one
    # init and one update per (r_a, r_b) (4 x 4)
    assert len(stores) >= (4 * 4 + 2 * 2) * (1 + 4 * 4)
    assert not any("if_then_else" in ln for ln in stores)


def test_mutated_states_lower():
    """The mutation rules keep states of the Winograd sketches lowerable (a few rounds)."""
    policy, states = _one_state_per_sketch(W.conv2d_winograd_nhwc(**SMALL), seed=5)
    rng = np.random.default_rng(5)
    done = 0
    for _ in range(60):
        new = apply_mutation(policy, states[int(rng.integers(len(states)))], rng)
        if new is None:
            continue
        assert lowers(new), new
        states.append(new)
        done += 1
    assert done >= 5


@pytest.mark.slow
@pytest.mark.parametrize("tile_size, pre_computed", [(2, True), (4, True), (2, False)])
def test_many_sampled_states_build_and_match_numpy(tile_size, pre_computed):
    """12 init states (and the mutants of some) per DAG build and match numpy's direct conv."""
    tensors = W.conv2d_winograd_nhwc(1, 7, 7, 4, 6, tile_size=tile_size, pre_computed=pre_computed)
    policy = make_policy(tensors)
    sketches = generate_sketches(policy)
    rng = np.random.default_rng(tile_size)
    states = []
    for _ in range(200):
        if len(states) >= 12:
            break
        state = apply_init_rules(policy, sketches[int(rng.integers(len(sketches)))], rng)
        if state is not None and lowers(state):
            new = apply_mutation(policy, state, rng) if len(states) % 3 == 2 else None
            states.append(new if new is not None and lowers(new) else state)
    assert len(states) == 12
    for k, state in enumerate(states):
        _check_const_stages(state)
        got, want = run_conv(state, tensors, seed=k, pre_computed=pre_computed)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
