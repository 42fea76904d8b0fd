"""Mutation rules: each edits one step of the history and replays it (Ansor's
MutateTileSize, MutateComputeLocation, MutateAutoUnroll, MutateParallel)."""

from __future__ import annotations

import numpy as np
import pytest

from scheduler_core.schedule.transform_step import AnnotationStep, ComputeAtStep, FuseStep, PragmaStep, SplitStep
from sketch_rules import (
    DEFAULT_MUTATION_RULES,
    MutateAutoUnroll,
    MutateComputeLocation,
    MutateParallel,
    MutateTileSize,
    apply_mutation,
    generate_sketches,
    sample_init_population,
)
from sketch_rules.init_population import lowers
from tests import workloads as W
from tests.sketch_rules.stub_policy import make_policy


def _pop(tensors, n=12, seed=0, **params):
    policy = make_policy(tensors, **params)
    return policy, sample_init_population(policy, generate_sketches(policy), n,
                                          np.random.default_rng(seed))


def _diff(a, b) -> list:
    ra = [s.to_record() for s in a.transform_steps]
    rb = [s.to_record() for s in b.transform_steps]
    assert len(ra) == len(rb)
    return [k for k, (x, y) in enumerate(zip(ra, rb)) if x != y]


def test_default_rules_and_weights():
    """Ansor's weights: tile size .90, compute location .05, auto unroll .04, parallel .01."""
    assert [(type(r).__name__, r.weight) for r in DEFAULT_MUTATION_RULES] == [
        ("MutateTileSize", 0.90), ("MutateComputeLocation", 0.05),
        ("MutateAutoUnroll", 0.04), ("MutateParallel", 0.01)]
    assert MutateTileSize(weight=0.5).weight == 0.5


@pytest.mark.parametrize("max_inner", [64, 4])
def test_mutate_tile_size_keeps_the_product(max_inner):
    """One split changes; the positions it covers, ceil(extent / product(lengths)) * product,
    stay the same (a factor moved between levels: the extent itself for a split without a
    tail); innermost <= max_innermost_split_factor; the result lowers."""
    policy, pop = _pop(W.matmul(48, 64, 32), max_innermost_split_factor=max_inner)
    rng = np.random.default_rng(5)
    n_ok = 0
    for state in pop * 3:
        new = MutateTileSize().apply(policy, state, rng)
        if new is None:
            continue
        (k,) = _diff(state, new)
        old, step = state.transform_steps[k], new.transform_steps[k]
        assert isinstance(step, SplitStep) and step.extent == old.extent
        assert _covered(step) == _covered(old)
        assert step.lengths[-1] <= max_inner
        assert lowers(new)
        n_ok += 1
    assert n_ok >= len(pop)


def _covered(step) -> int:
    p = int(np.prod(step.lengths))
    return -(-step.extent // p) * p


def test_mutate_tile_size_keeps_a_tail_split_covering_the_same_rows():
    """A register tile of 6 rows on 1024 (lengths 1, 19, 6: 1026 rows): mutations move
    factors of 9 = ceil(1024 / 114), 19 and 6 between the levels, and every mutant still
    covers 1026 rows."""
    from dataclasses import replace

    from sketch_rules.step_history import replay_or_none

    policy, pop = _pop(W.matmul(1024, 64, 32), n=4)
    rng = np.random.default_rng(9)
    seen = set()
    for state in pop:
        steps = list(state.transform_steps)
        k = next(i for i, s in enumerate(steps) if isinstance(s, SplitStep) and s.extent == 1024
                 and len(s.lengths) == 3)
        steps[k] = replace(steps[k], lengths=(1, 19, 6))
        tail = replay_or_none(state, steps)
        assert tail is not None
        for _ in range(40):
            new = MutateTileSize().apply(policy, tail, rng)
            if new is not None and _diff(tail, new) == [k]:
                assert _covered(new.transform_steps[k]) == 1026
                seen.add(new.transform_steps[k].lengths)
    assert len(seen) >= 4


def test_mutate_tile_size_needs_a_split():
    policy, pop = _pop(W.rgb_to_yuv(11, 6), n=1)
    assert MutateTileSize().apply(policy, pop[0], np.random.default_rng(0)) is None


def test_mutate_auto_unroll():
    """Only an auto_unroll_max_step pragma changes, to a value in {0, 16, 64, 512}."""
    policy, pop = _pop(W.matmul(32, 32, 32))
    rng = np.random.default_rng(2)
    changed = 0
    for state in pop:
        new = MutateAutoUnroll().apply(policy, state, rng)
        for k in _diff(state, new):
            step = new.transform_steps[k]
            assert isinstance(step, PragmaStep) and step.parsed()[1] in (0, 16, 64, 512)
            changed += 1
    assert changed >= 1


def test_mutate_compute_location():
    """A ComputeAtStep of an untiled stage (conv2d's padding) moves to another candidate;
    the tiled stages' compute_at never changes."""
    policy, pop = _pop(W.conv2d_nchw(1, 3, 10, 10, 4, 3, 3), n=30, seed=4)
    rng = np.random.default_rng(1)
    moved = 0
    for state in pop:
        new = MutateComputeLocation().apply(policy, state, rng)
        if new is None:
            continue
        for k in _diff(state, new):
            step = new.transform_steps[k]
            assert isinstance(step, ComputeAtStep) and step.stage_id == 1
            moved += 1
        assert lowers(new)
    assert moved >= 1
    disabled = make_policy(W.conv2d_nchw(1, 3, 10, 10, 4, 3, 3), disable_change_compute_location=True)
    assert all(MutateComputeLocation().apply(disabled, s, rng) is None for s in pop)


def test_mutate_parallel_changes_the_fused_outer_loops():
    """The fuse before a parallel loop 0 takes another number of outer loops; loop ids of
    the stage's later annotation steps shift accordingly; the result lowers."""
    policy, pop = _pop(W.matmul_bias_relu(64, 64, 16), n=30, seed=2)
    rng = np.random.default_rng(3)
    done = 0
    for state in pop:
        for _ in range(3):
            new = MutateParallel().apply(policy, state, rng)
            if new is None:
                continue
            fuses = [k for k, (a, b) in enumerate(zip(state.transform_steps, new.transform_steps))
                     if isinstance(a, FuseStep) and a != b and a.iter_ids[0] == 0]
            assert fuses
            k = fuses[0]
            old_fuse, new_fuse = state.transform_steps[k], new.transform_steps[k]
            assert len(old_fuse.iter_ids) != len(new_fuse.iter_ids)
            par = new.transform_steps[k + 1]
            assert isinstance(par, AnnotationStep) and par.annotation == "parallel"
            assert par.iter_id == 0 and par.stage_id == new_fuse.stage_id
            assert lowers(new)
            done += 1
    assert done >= 1


def test_apply_mutation_picks_by_weight_and_is_reproducible():
    """With all weight on one rule only that rule runs; the same seed mutates the same way."""
    policy, pop = _pop(W.matmul(32, 32, 32))
    only_unroll = (MutateTileSize(weight=0.0), MutateAutoUnroll(weight=1.0))
    rng = np.random.default_rng(0)
    for state in pop:
        new = apply_mutation(policy, state, rng, only_unroll)
        assert all(isinstance(new.transform_steps[k], PragmaStep) for k in _diff(state, new))
    a = [apply_mutation(policy, s, np.random.default_rng(9)) for s in pop]
    b = [apply_mutation(policy, s, np.random.default_rng(9)) for s in pop]
    key = lambda s: None if s is None else [x.to_record() for x in s.transform_steps]  # noqa: E731
    assert [key(s) for s in a] == [key(s) for s in b]
    assert apply_mutation(policy, pop[0], rng, (MutateTileSize(weight=0.0),)) is None
