"""Property: states sampled from the sketches lower, build and match the reference.

    DAG --generate_sketches--> sketches --init rules / mutations--> States
        --lower_state--> PrimFunc   (every state the steps accepted must lower)
        --build("llvm")--> Module(random inputs) == reference.evaluate  (rtol 1e-4)

Thousands of random states sampled from the sketches of each DAG in the core's test set
all lower, build and match the reference.  States are sampled
without the sampler's lowering filter, so a state that the transform steps
accepted but the compiler cannot lower (or builds wrongly) fails here, with its
step records in the message, ready for ``test_compiler_regressions.py``.

Programs are built and run in a worker process (``program_check``), so a
compiler crash fails one test instead of killing the session.  Fast tier: 30
states per DAG lowered, 3 built and run.  ``slow`` tier: 1200 states per DAG
lowered, 40 built and run.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from scheduler_core.lowering.lower import lower_state
from sketch_rules import apply_init_rules, apply_mutation, generate_sketches
from sketch_rules.state_queries import has_nested_parallel
from tests.sketch_rules.program_check import DAGS, RUNNER, get_dag
from tests.sketch_rules.stub_policy import make_policy

_POLICIES: dict = {}


def get_policy(name: str):
    if name not in _POLICIES:
        policy = make_policy(get_dag(name))
        _POLICIES[name] = (policy, generate_sketches(policy))
    return _POLICIES[name]


def records(state) -> str:
    return json.dumps([s.to_record() for s in state.transform_steps])


def sample_states(name: str, seed: int, n_init: int, n_mutate: int) -> list:
    """``n_init`` states from the init rules (no lowering filter, duplicates dropped) and
    ``n_mutate`` successful mutations of random states of the growing pool."""
    policy, sketches = get_policy(name)
    rng = np.random.default_rng(seed)
    pool, seen = [], set()
    for _ in range(4 * n_init):
        if len(pool) >= n_init:
            break
        state = apply_init_rules(policy, sketches[int(rng.integers(len(sketches)))], rng)
        if state is not None and records(state) not in seen and not has_nested_parallel(state):
            seen.add(records(state))
            pool.append(state)
    assert pool, f"{name}: the init rules produced no state"
    n_init_got = len(pool)
    for _ in range(8 * n_mutate):
        if len(pool) - n_init_got >= n_mutate:
            break
        new = apply_mutation(policy, pool[int(rng.integers(len(pool)))], rng)
        if new is not None and records(new) not in seen:
            seen.add(records(new))
            pool.append(new)
    return pool


def check_lowers(name: str, state) -> None:
    try:
        lower_state(state)
    except Exception as err:
        raise AssertionError(f"{name}: a state the steps accepted does not lower: "
                             f"{type(err).__name__}: {err}\nsteps: {records(state)}\n{state}") from err


def check_runs(name: str, state, seed: int) -> None:
    """Build and run ``state`` in the crash-safe worker; compare with the reference."""
    error = RUNNER.check(name, records(state), seed)
    if error is not None:
        raise AssertionError(f"{name}: a sampled state fails to build or run correctly: {error}\n"
                             f"steps: {records(state)}\n{state}")


def check_dag(name: str, seed: int, n_init: int, n_mutate: int, n_build: int) -> None:
    states = sample_states(name, seed, n_init, n_mutate)
    for state in states:
        check_lowers(name, state)
    rng = np.random.default_rng(seed)
    picks = sorted(set(int(x) for x in rng.choice(len(states), size=min(n_build, len(states)),
                                                  replace=False)))
    if len(states) > n_init and n_build >= 2:
        picks[-1] = len(states) - 1  # always one mutated state
    for k in picks:
        check_runs(name, states[k], seed + k)


@pytest.mark.parametrize("name", sorted(DAGS))
def test_sampled_states_lower_build_and_match(name):
    """20 init states + 10 mutants lower; 3 of them build and match the reference."""
    check_dag(name, seed=20240501, n_init=20, n_mutate=10, n_build=3)


def test_every_sketch_gives_lowerable_states():
    """Each sketch of each DAG yields at least one state that lowers within 20 tries."""
    for name in sorted(DAGS):
        policy, sketches = get_policy(name)
        rng = np.random.default_rng(1)
        for k, sketch in enumerate(sketches):
            for _ in range(20):
                state = apply_init_rules(policy, sketch, rng)
                if state is not None and not has_nested_parallel(state):
                    check_lowers(name, state)
                    break
            else:
                raise AssertionError(f"{name}: sketch {k} gave no state in 20 tries:\n{sketch}")


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(DAGS))
def test_sampled_states_lower_build_and_match_slow(name):
    """600 init states + 600 mutants lower; 40 of them build and match the reference."""
    check_dag(name, seed=7, n_init=600, n_mutate=600, n_build=40)
