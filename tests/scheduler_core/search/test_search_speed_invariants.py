"""The search's shortcuts give exactly what the slow path gives.

The evolutionary search replays a mutant from a cached prefix of its parent's steps
(``sketch_rules.mutation.replay_edited``), remembers which states passed the
compute-location check (``check_compute_locations``), lowers with constant fast paths
and caches features by steps.  Here the states, lowered programs and features of many
mutants are compared with those rebuilt from scratch: a fresh replay of the step
records, an uncached lowering and an uncached feature extraction.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

import scheduler_core as sc
from cost_model import RandomModel
from cost_model.feature import FeatureCache, features_from_primfunc, get_per_store_features
from scheduler_core.base.errors import LoweringError
from scheduler_core.lowering.lower import lower_state
from scheduler_core.schedule.dataflow_step import replay_steps
from scheduler_core.schedule.transform_step import check_compute_locations
from sketch_rules import SketchPolicyParams, apply_mutation, generate_sketches, sample_init_population
from sketch_rules.init_population import lowers
from sketch_rules.step_history import replay_or_none
from tests import workloads as W
from tests.sketch_rules.stub_policy import make_policy

DAGS = {
    "conv2d_nchw": W.SMALL_DAGS["conv2d_nchw"],
    "softmax": W.SMALL_DAGS["softmax"],
    "matmul_bias_relu": W.SMALL_DAGS["matmul_bias_relu"],
    "cumsum_scan": W.SMALL_DAGS["cumsum_scan"],
    "matmul_add_64": lambda: W.matmul_add(64, 64, 64),
}


def _records(state) -> list:
    return [s.to_record() for s in state.transform_steps]


def _mutants(name: str, n: int, seed: int = 0) -> tuple:
    """The policy and ``n`` mutants of a small population, mutated in chains (so that some
    parents are mutated several times and prefixes are reused)."""
    policy = make_policy(DAGS[name](), seed=seed)
    rng = np.random.default_rng(seed)
    pop = sample_init_population(policy, generate_sketches(policy), 8, rng)
    assert pop, name
    out: list = []
    tries = 0
    while len(out) < n and tries < 20 * n:
        tries += 1
        parent = pop[int(rng.integers(len(pop)))] if not out or rng.random() < 0.5 else out[-1]
        child = apply_mutation(policy, parent, rng)
        if child is not None:
            out.append(child)
    return policy, out


@pytest.mark.parametrize("name", sorted(DAGS))
def test_mutants_equal_fresh_replays(name):
    """A mutant replayed from a cached prefix is the state a fresh replay of its records gives."""
    policy, mutants = _mutants(name, 40)
    if not mutants:
        pytest.skip(f"no mutation applies to {name}")
    for m in mutants:
        fresh = replay_steps(m.dag, _records(m))
        assert _records(fresh) == _records(m)
        assert str(fresh) == str(m)
        assert replay_or_none(m, list(m.transform_steps)) is not None


@pytest.mark.parametrize("name", sorted(DAGS))
def test_features_and_programs_of_mutants_equal_from_scratch(name):
    """Features through the search's path (cached lowering, FeatureCache) equal features of an
    uncached lowering of a fresh replay; so do the lowered programs."""
    policy, mutants = _mutants(name, 40, seed=1)
    if not mutants:
        pytest.skip(f"no mutation applies to {name}")
    cache = FeatureCache()
    fast = [get_per_store_features(policy.task, m, cache) for m in mutants]
    again = [get_per_store_features(policy.task, m, cache) for m in mutants]  # cache hits
    line = policy.task.hardware_params.cache_line_bytes
    for m, f, g in zip(mutants, fast, again):
        fresh = replay_steps(m.dag, _records(m))
        func_fresh = lower_state(fresh)
        assert str(lower_state(m)) == str(func_fresh)
        slow = features_from_primfunc(func_fresh, line)
        np.testing.assert_array_equal(f, slow)
        np.testing.assert_array_equal(g, slow)


def test_checked_states_still_refused():
    """The memory of checked states never lets a state that fails the check pass."""
    policy, mutants = _mutants("matmul_add_64", 4)
    state = mutants[0]
    out = len(state.stages) - 1
    k = next(i for i, st in enumerate(state.stages[:out]) if st.op_type == "compute")
    bad = state.with_stage(k, replace(state.stages[k], compute_at="iter", attach=(out, "no_such_loop")))
    for _ in range(2):
        with pytest.raises(LoweringError):
            check_compute_locations(bad)
    assert check_compute_locations(state) is state
    assert check_compute_locations(state) is state


def _round_keys(tensors, seed: int) -> tuple:
    task = sc.SearchTask(compute_dag=sc.ComputeDAG(tensors), target="llvm")
    policy = sc.SketchPolicy(task, RandomModel(seed), params=SketchPolicyParams(population=48, num_iters=2),
                             seed=seed, verbose=0)
    best, random = policy.search_one_round(8)
    return [_records(s) for s in best], [_records(s) for s in random], best + random


@pytest.mark.parametrize("name", ["conv2d_nchw", "softmax", "cumsum_scan"])
def test_search_round_is_reproducible_and_valid(name):
    """Same seed, same states; every state the round returns replays, checks and lowers."""
    best1, rand1, states = _round_keys(DAGS[name](), 3)
    best2, rand2, _ = _round_keys(DAGS[name](), 3)
    assert best1 == best2 and rand1 == rand2
    assert states
    for s in states:
        fresh = replay_steps(s.dag, _records(s))
        check_compute_locations(fresh)
        assert lowers(fresh)
