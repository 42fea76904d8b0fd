"""Initial population: each init rule's effect, and the sampler's guarantees
(Ansor, section 4.2; sketch_policy_rules.cc "Init Population")."""

from __future__ import annotations

import numpy as np
import pytest

from scheduler_core.schedule.dataflow_step import ComputeInlineStep
from scheduler_core.schedule.transform_step import AnnotationStep, ComputeAtStep, FuseStep, PragmaStep, SplitStep
from sketch_rules import (
    InitChangeComputeLocation,
    InitFillTileSize,
    InitParallel,
    InitUnroll,
    InitVectorization,
    apply_init_rules,
    generate_sketches,
    sample_init_population,
)
from sketch_rules.compute_location import get_compute_location_candidates
from sketch_rules.init_population import lowers, tiled_vectorize_limit
from sketch_rules.split_factors import factorization_schemes, factors_of
from sketch_rules.state_queries import has_nested_parallel, is_tiled, scan_body_ids
from sketch_rules.vector_tiles import MAX_TAIL_WASTE
from tests import workloads as W
from tests.sketch_rules.stub_policy import make_policy


def _population(tensors, n=20, seed=0, **params):
    policy = make_policy(tensors, **params)
    sketches = generate_sketches(policy)
    return policy, sketches, sample_init_population(policy, sketches, n, np.random.default_rng(seed))


def test_factor_lists_and_schemes():
    """Divisors ascending; schemes are the ordered factorizations with innermost bounded."""
    assert factors_of(12) == (1, 2, 3, 4, 6, 12)
    assert factors_of(1) == (1,)
    assert factorization_schemes(8, 2, 64) == (
        (1, 1), (1, 2), (1, 4), (1, 8), (2, 1), (2, 2), (2, 4), (4, 1), (4, 2), (8, 1))
    assert all(s[-1] <= 2 for s in factorization_schemes(64, 3, 2))
    for scheme in factorization_schemes(360, 3, 64):
        assert 360 % (scheme[0] * scheme[1] * scheme[2]) == 0


@pytest.mark.parametrize("max_inner", [64, 4])
def test_fill_tile_size(max_inner):
    """Every unknown split length is filled; the product divides the extent, or (a register
    tile with a tail, vector_tiles.tail_schemes) covers at most MAX_TAIL_WASTE more; the
    innermost length is <= max_innermost_split_factor; the result is a replayed state."""
    policy = make_policy(W.matmul(96, 60, 48), max_innermost_split_factor=max_inner)
    rng = np.random.default_rng(3)
    for sketch in generate_sketches(policy):
        for _ in range(10):
            state = InitFillTileSize().apply(policy, sketch, rng)
            for step in state.transform_steps:
                if isinstance(step, SplitStep):
                    prod = int(np.prod(step.lengths))
                    covered = -(-step.extent // prod) * prod
                    assert step.extent <= covered <= step.extent * (1 + MAX_TAIL_WASTE)
                    assert step.lengths[-1] <= max_inner
            assert all(it.extent is not None for st in state.stages for it in st.iters)


def test_fill_tile_size_fills_the_rfactor_split():
    """The rfactor sketches' unknown split gets a factor of the reduction length."""
    policy = make_policy(W.matmul(4, 4, 96))
    rng = np.random.default_rng(0)
    for sketch in generate_sketches(policy)[:2]:
        state = InitFillTileSize().apply(policy, sketch, rng)
        (split,) = [s for s in state.transform_steps if isinstance(s, SplitStep)]
        assert 96 % split.lengths[0] == 0
        assert lowers(state)


def test_parallel_fuses_outer_loops_up_to_16_per_core():
    """Root stages get a parallel loop fused from their outer spatial loops; it stops
    growing once past 16 x num_cores (or at a reduction / attach point).  Loops of
    extent 1 stay serial and pass the job inwards; no parallel loop is nested."""
    policy, _, pop = _population(W.matmul_add(64, 64, 64), n=20)
    for state in pop:
        out = state.stages[-1]
        assert any(it.annotation == "parallel" for st in state.stages for it in st.iters)
        if out.iters[0].const_extent > 1:
            assert out.iters[0].annotation == "parallel"
        assert not has_nested_parallel(state)
    policy, _, pop = _population(W.transpose(64, 64), n=1)
    (state,) = pop
    assert [it.name for it in state.stages[1].iters][0] == "j"  # 64 > 32: no fuse needed
    assert state.stages[1].iters[0].annotation == "parallel"


def test_parallel_recurses_into_attached_stages_when_outer_loops_are_trivial():
    """A root stage whose outer loop has extent 1 lets a stage computed at that loop take
    the parallel loop instead (Ansor's InitParallel recursion)."""
    policy = make_policy(W.conv2d_nchw(1, 3, 10, 10, 4, 3, 3))
    sk = generate_sketches(policy)
    rng = np.random.default_rng(0)
    seen = 0
    for _ in range(60):
        state = apply_init_rules(policy, sk[0], rng)
        if state is None:
            continue
        out, conv = state.stages[5], state.stages[3]
        if all(it.const_extent == 1 for it in out.iters[:4]):  # conv2d attached at x.0
            assert all(it.annotation == "none" for it in out.iters[:4])
            if conv.iters[0].const_extent > 1:
                assert conv.iters[0].annotation == "parallel"
                seen += 1
        assert not has_nested_parallel(state)
    assert seen >= 1


def test_unroll_pragma_on_reduction_stages():
    """Every stage with a reduction loop gets auto_unroll_max_step in {0, 16, 64, 512} on its
    outermost loop; other stages get none."""
    policy, _, pop = _population(W.softmax(8, 64), n=20)
    values = set()
    for state in pop:
        for step in state.transform_steps:
            if isinstance(step, PragmaStep):
                key, val = step.parsed()
                assert key == "auto_unroll_max_step" and step.iter_id == 0
                assert any(it.kind == "reduce" for it in state.stages[step.stage_id].iters)
                values.add(val)
    assert values <= {0, 16, 64, 512} and len(values) >= 2


def test_vectorization_is_innermost_and_short():
    """A vectorized loop is the innermost loop of its stage, <= 16 lanes (spatial, or the
    inner part of a split reduce loop); the innermost loop of a tiled stage up to 4 vector
    registers (32 float32 lanes with the stub's 32-byte vectors)."""
    for tensors in (W.matmul(32, 48, 16), W.rgb_to_yuv(16, 8), W.layer_norm(8, 16)):
        policy, _, pop = _population(tensors, n=15)
        assert tiled_vectorize_limit(policy, "float32") == 32
        for state in pop:
            for st in state.stages:
                for k, it in enumerate(st.iters):
                    if it.annotation == "vectorize":
                        assert k == len(st.iters) - 1
                        assert it.const_extent <= (32 if is_tiled(st) else 16)


def test_long_rows_and_plain_reductions_get_a_split_vector_loop():
    """Softmax over 1024-long rows: in some states the row max/sum reduce loops and the
    exp/divide rows are split and their inner part vectorized (Ansor leaves them scalar)."""
    _, _, pop = _population(W.softmax(64, 1024), n=30)
    kinds = set()
    for state in pop:
        for st in state.stages:
            if st.iters and st.iters[-1].annotation == "vectorize" and st.iters[-1].const_extent in (4, 8, 16):
                kinds.add(st.iters[-1].kind)
    assert kinds == {"spatial", "reduce"}, kinds


def test_change_compute_location_moves_untiled_stages():
    """Over a population of conv2d states the padding stage is seen inlined, at root and
    computed inside conv2d; tiled stages never move."""
    _, _, pop = _population(W.conv2d_nchw(1, 3, 10, 10, 4, 3, 3), n=60, seed=1)
    places = {state.stages[1].compute_at for state in pop}
    assert places == {"root", "iter", "inlined"}
    for state in pop:
        moves = [s for s in state.transform_steps
                 if isinstance(s, (ComputeAtStep, ComputeInlineStep)) and s.stage_id == 3]
        assert len(moves) <= 1  # the fusion sketches' own compute_at, nothing more


def test_disable_change_compute_location():
    """With the param set, no stage is moved by the init rules."""
    _, _, pop = _population(W.conv2d_nchw(1, 3, 10, 10, 4, 3, 3), n=20,
                            disable_change_compute_location=True)
    for state in pop:
        assert state.stages[1].compute_at == "root"


def test_compute_location_candidates_of_pad():
    """In the plain tiling sketch of conv2d the padding stage may go to conv2d's outer
    spatial loops (through the first reduction tile), never past an attached loop."""
    policy = make_policy(W.conv2d_nchw(1, 3, 10, 10, 4, 3, 3))
    plain = InitFillTileSize().apply(policy, generate_sketches(policy)[2], np.random.default_rng(0))
    cands = get_compute_location_candidates(plain, 1)
    assert cands and all(t == 3 for t, _ in cands)
    kinds = [plain.stages[3].iters[i].kind for _, i in cands]
    first_red = kinds.index("reduce") if "reduce" in kinds else len(kinds)
    assert all(k == "spatial" for k in kinds[:first_red])


def test_sampling_is_reproducible_and_distinct():
    """The same seed gives the same states; states are distinct and all lower."""
    policy = make_policy(W.matmul_bias_relu(16, 24, 8))
    sk = generate_sketches(policy)
    a = sample_init_population(policy, sk, 25, np.random.default_rng(11))
    b = sample_init_population(policy, sk, 25, np.random.default_rng(11))
    rec = [[s.to_record() for s in st.transform_steps] for st in a]
    assert rec == [[s.to_record() for s in st.transform_steps] for st in b]
    assert len(a) == 25 and len({repr(r) for r in rec}) == 25
    assert all(lowers(s) for s in a)


def test_sampling_stops_when_the_space_is_small():
    """RGB->YUV has one sketch and few annotations: asking for 50 returns fewer, quickly."""
    _, _, pop = _population(W.rgb_to_yuv(11, 6), n=50)
    assert 1 <= len(pop) < 50


def test_sampling_edge_cases():
    policy = make_policy(W.matmul(8, 8, 8))
    assert sample_init_population(policy, [], 10, np.random.default_rng(0)) == []
    assert sample_init_population(policy, generate_sketches(policy), 0, np.random.default_rng(0)) == []


def test_scan_states_keep_the_scan_body_in_place():
    """Sampled cumsum states: the update stage is never moved or inlined, its time loop
    is never vectorized or parallel; the parallel sketch keeps its parallel loop."""
    _, _, pop = _population(W.cumsum_scan(16, 64), n=20)
    assert pop
    for state in pop:
        body = scan_body_ids(state)
        assert body == {3}
        upd = state.stages[3]
        assert upd.compute_at == "root"
        assert upd.iters[0].name == "t" and upd.iters[0].annotation == "none"
        for step in state.transform_steps:
            if isinstance(step, (FuseStep, ComputeAtStep)):
                assert step.stage_id != 3
        assert any(isinstance(s, AnnotationStep) and s.stage_id == 1 and s.annotation == "parallel"
                   for s in state.transform_steps) or state.stages[1].iters[0].const_extent == 1


@pytest.mark.parametrize("rule", [InitChangeComputeLocation(), InitParallel(), InitUnroll(),
                                  InitVectorization()])
def test_rules_leave_the_input_state_unchanged(rule):
    """States are values: a rule returns a new state and never edits its input."""
    policy = make_policy(W.matmul_add(16, 16, 16))
    state = InitFillTileSize().apply(policy, generate_sketches(policy)[0], np.random.default_rng(0))
    before = [s.to_record() for s in state.transform_steps]
    rule.apply(policy, state, np.random.default_rng(1))
    assert [s.to_record() for s in state.transform_steps] == before
