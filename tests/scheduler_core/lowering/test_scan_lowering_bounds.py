"""Regression: stages of a scan's body placed inside another body stage's loop stay in bounds.

    steps --replay--> State --program_from_state (layout rewrite, lower, check_bounds)-->
        Program --build("llvm")--> Module(X) == reference.evaluate == np.cumsum / recurrence

Found with random schedules (``tests/scheduler_core/random_schedule.py``): a stage of the
scan body (the update's producer, or a cache stage of it) computed inside a loop of the
update stage that a non-divisible split cuts (``SP``) got a region one tile wide, and

* its region over the scan's time axis covered two steps when the update's split loop ran
  over a fused ``(t, i)`` axis (the consumer's ``floordiv`` over the whole split loop), so
  it read ``X`` one step past the end of the scan;
* it was never guarded against its op's domain (the ``likely`` guard of an
  over-approximated region skipped every stage of a scan body), so the part of the tile
  past the last column read ``X`` (and a cache buffer) past their ends.

The builder's bounds proof refused these programs (INSTANTIATION_ERROR records); the
lowering now cuts a consumer's root axes to its guarded region when it infers a
producer's region (as TVM's PassUpDomain: the update's region over the time axis is one
step, [t, t]) and guards an over-approximated region of a scan body stage too.
"""

from __future__ import annotations

import numpy as np
import pytest

from scheduler_core.base.errors import LoweringError
from scheduler_core.dag import reference
from scheduler_core.driver.program import program_from_state
from scheduler_core.ir import tir as T
from scheduler_core.schedule.dataflow_step import replay_steps
from scheduler_core.schedule.loop_state import State
from tests.scheduler_core.driver.test_bounds_random import _outside, access_ranges
from tests.scheduler_core.random_schedule import random_schedule
from tests.scheduler_core.test_random_schedules import get_dag, random_inputs, run_guarded

# Minimal step lists (greedy one-step removal while the old lowering was refused) of the
# sweep's refused programs: (DAG, seed, n_steps) they came from, steps.
MINIMISED = {
    "cumsum_scan-50-12": ("cumsum_scan", [["CHR", 3, "local", [4]], ["CA", 3, 4, 1],
                                          ["SP", 4, 1, 10, [9], 1]]),
    "cumsum_scan-57-13": ("cumsum_scan", [["CHR", 3, "local", [4]], ["FU", 4, [0, 1]],
                                          ["SP", 4, 0, 90, [6], 1]]),
    "cumsum_scan-69-18": ("cumsum_scan", [["CHR", 3, "local", [4]], ["SP", 4, 1, 10, [7, 7], 1],
                                          ["CHR", 0, "local", [1]], ["CHR", 1, "local", [2]],
                                          ["CA", 5, 6, 2]]),
    "cumsum_scan-100-21": ("cumsum_scan", [["CHW", 3, "local"], ["SP", 4, 1, 10, [6], 1],
                                           ["CA", 3, 4, 1]]),
    "two_stage_scan-71-15": ("two_stage_scan", [["SP", 4, 1, 6, [5], 0], ["CA", 3, 4, 2],
                                                ["CHW", 3, "local"]]),
    "two_stage_scan-100-22": ("two_stage_scan", [["CHW", 4, "local"], ["SP", 5, 1, 6, [4], 1],
                                                 ["CA", 4, 5, 1]]),
}

SCANS = ("cumsum_scan", "two_stage_scan")


def _recurrence(name: str, x: np.ndarray) -> np.ndarray:
    """The scan by hand: np.cumsum, or ``s[t] = 2 s[t-1] + X[t]``."""
    if name == "cumsum_scan":
        return np.cumsum(x.astype(np.float64), axis=0)
    s = np.empty(x.shape, np.float64)
    s[0] = x[0]
    for t in range(1, x.shape[0]):
        s[t] = 2 * s[t - 1] + x[t]
    return s


def _run(dag, program, inputs: list) -> list:
    """Run the built program with every argument between guard zones (as run_state)."""
    return run_guarded(program.build(), dag, inputs)


def _check(name: str, state, seed: int) -> str | None:
    """None if ``state`` passes the bounds proof, builds and matches the reference; else why."""
    dag = get_dag(name)
    try:
        program = program_from_state(state, "llvm")
    except LoweringError as err:
        return f"refused: {err}"
    inputs = random_inputs(dag, np.random.default_rng(seed))
    expected = reference.evaluate(dag, inputs)
    got = _run(dag, program, inputs)
    for g, e in zip(got, expected):
        if not np.allclose(g, e, rtol=1e-4, atol=1e-5):
            return f"wrong result: max error {np.nanmax(np.abs(g - e))}"
    return None


@pytest.mark.parametrize("case", sorted(MINIMISED))
def test_minimised_schedules_stay_in_bounds_and_match(case):
    name, steps = MINIMISED[case]
    dag = get_dag(name)
    state = replay_steps(dag, steps)
    program = program_from_state(state, "llvm")  # raises if the bounds proof refuses it
    accesses, exact = access_ranges(program.func)
    assert exact and not _outside(accesses), [(a.what, a.buffer.name, a.lo, a.hi) for a in _outside(accesses)]
    inputs = random_inputs(dag, np.random.default_rng(0))
    (got,) = _run(dag, program, inputs)
    (expected,) = reference.evaluate(dag, inputs)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(got, _recurrence(name, inputs[0]), rtol=1e-4, atol=1e-5)


def _allocations(s: T.Stmt) -> dict:
    """Name -> element count of every buffer allocated in ``s``."""
    out: dict = {}
    stack = [s]
    while stack:
        n = stack.pop()
        if isinstance(n, T.Allocate):
            out[n.buffer.name] = int(n.buffer.shape[0].value)
        for k in ("seq", "body", "then_case", "else_case"):
            v = getattr(n, k, None)
            if isinstance(v, tuple):
                stack += list(v)
            elif isinstance(v, T.Stmt):
                stack.append(v)
    return out


def test_the_update_producer_computes_one_time_step():
    """cumsum_scan-57-13: the update's split loop runs over the fused (t, i) axis of one step;
    its producer, computed in the scan's time loop, holds the one step [t, t] (10 elements),
    not [t, t + 1] (20, whose second row read X one step past the end)."""
    name, steps = MINIMISED["cumsum_scan-57-13"]
    program = program_from_state(replay_steps(get_dag(name), steps), "llvm")
    assert _allocations(program.func.body) == {"s_update": 10}


def _sweep(name: str, seeds, n_steps_list) -> tuple:
    bad = []
    count = 0
    for seed in seeds:
        for n_steps in n_steps_list:
            state = random_schedule(State.from_dag(get_dag(name)), np.random.default_rng(seed), n_steps)
            why = _check(name, state, seed)
            count += 1
            if why is not None:
                steps = [s.to_record() for s in state.transform_steps]
                bad.append(f"seed={seed} n_steps={n_steps}: {why}\n  steps: {steps}")
    return count, bad


FAST_SEEDS = sorted({57, 100, *range(0, 201, 20)})


@pytest.mark.parametrize("name", SCANS)
def test_scan_sweep_is_never_refused_and_matches(name):
    """The seeds refused before the fix (cumsum_scan 57 and 100, two_stage_scan 100) and every
    20th seed of 0..200 at the sweep's longest schedules (25 steps): every program passes the
    bounds proof, builds and matches the reference."""
    count, bad = _sweep(name, FAST_SEEDS, [25])
    assert count == len(FAST_SEEDS)
    assert not bad, "\n".join(bad)


@pytest.mark.slow
@pytest.mark.parametrize("name", SCANS + ("two_state_scan",))
def test_scan_sweep_is_never_refused_and_matches_slow(name):
    """Seeds 0..200 at 25 steps: 201 programs per DAG.  (The sweep over every n_steps 1..25,
    5025 programs per DAG, refused 24 cumsum_scan and 5 two_stage_scan programs before the
    fix.)"""
    _, bad = _sweep(name, range(201), [25])
    assert not bad, "\n".join(bad)
