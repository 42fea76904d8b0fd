"""What a measurement reports: the median of its repeats, their spread kept in the record, a
noisy set of repeats re-measured; the timing options of the search reach the runner."""

from __future__ import annotations

import json

import numpy as np
import pytest

import scheduler_core as sc
from scheduler_core.measure.data import FAILED_COST_S, MeasureErrorNo, MeasureResult, median_of, spread_of
from scheduler_core.measure.local_runner import NOISY_SPREAD, least_noisy_costs
from scheduler_core.measure.record_file import load_best_record, load_records
from scheduler_core.search.program_measurer import ProgramMeasurer
from scheduler_core.search.tuning_options import TuningOptions
from tests.workloads import matmul_add


def _result(costs, error_no=MeasureErrorNo.NO_ERROR) -> MeasureResult:
    return MeasureResult(tuple(costs), int(error_no), "", 0.0, 0.0)


def test_cost_is_the_median_of_the_repeats():
    r = _result([1.0, 9.0, 2.0])  # one repeat disturbed by another process
    assert r.cost == 2.0 and r.median_cost == 2.0
    assert r.mean_cost == pytest.approx(4.0)  # TVM's mean is still there
    assert r.spread == pytest.approx((9.0 - 1.0) / 2.0)
    assert _result([1.0, 3.0]).cost == 2.0
    assert _result([5.0]).spread == 0.0
    assert _result([1.0], MeasureErrorNo.RUNTIME_DEVICE).cost is None
    assert median_of(()) == FAILED_COST_S
    assert spread_of([0.0, 0.0]) == 0.0


def test_a_quiet_round_is_measured_once():
    calls = []

    def measure():
        calls.append(1)
        return (1.00, 1.02, 1.01)

    assert least_noisy_costs(measure) == (1.00, 1.02, 1.01)
    assert len(calls) == 1


def test_a_noisy_round_is_measured_again_and_the_least_spread_kept():
    rounds = iter([(1.0, 3.0, 1.1), (1.0, 1.5, 1.05), (1.0, 1.01, 1.02)])
    calls = []

    def measure():
        calls.append(1)
        return next(rounds)

    assert least_noisy_costs(measure) == (1.0, 1.01, 1.02)
    assert len(calls) == 3
    stays_noisy = iter([(1.0, 3.0, 1.1), (1.0, 5.0, 1.1), (1.0, 4.0, 1.1)])
    assert least_noisy_costs(lambda: next(stays_noisy)) == (1.0, 3.0, 1.1)  # the least noisy of three
    assert spread_of((1.0, 1.0 + NOISY_SPREAD, 1.0)) <= NOISY_SPREAD  # the threshold itself is not noisy


def test_single_repeat_is_never_re_measured():
    calls = []
    assert least_noisy_costs(lambda: calls.append(1) or (2.0,)) == (2.0,)
    assert len(calls) == 1


def test_best_record_is_chosen_by_median(tmp_path):
    """Two records of one workload: the one with the lower mean but the higher median loses."""
    dag = sc.ComputeDAG(matmul_add(16, 16, 16))
    task = sc.SearchTask(compute_dag=dag, target="llvm")
    log = tmp_path / "log.json"
    options = TuningOptions(num_measure_trials=2, num_measures_per_round=2, population=16, num_iters=1,
                            measure_callbacks=[sc.RecordToFile(str(log))], verbose=0, repeat=3, min_repeat_ms=1)
    task.tune(options)
    lines = [json.loads(x) for x in log.read_text().splitlines() if x.strip()]
    other = [x for x in lines if "r" not in x]  # the DAG line
    ok = [x for x in lines if "r" in x and x["r"][1] == 0]
    assert len(ok) >= 2 and all(len(x["r"][0]) == 3 for x in ok)  # three repeats kept in the record
    a, b = ok[0], ok[1]
    a["r"][0], b["r"][0] = [1.0, 1.0, 10.0], [2.0, 2.0, 2.0]  # a: mean 4, median 1; b: mean 2, median 2
    log.write_text("\n".join(json.dumps(x) for x in (*other, a, b)) + "\n")
    inp, res = load_best_record(str(log), task=task)
    assert res.costs == (1.0, 1.0, 10.0)
    assert len(list(load_records(str(log)))) == 2


def test_tuning_options_carry_repeat_to_the_local_runner():
    opts = TuningOptions(repeat=5, min_repeat_ms=7.5)
    assert opts.to_json()["repeat"] == 5
    measurer = ProgramMeasurer.from_options(opts)
    try:
        assert measurer.runner.repeat == 5 and measurer.runner.min_repeat_ms == 7.5
    finally:
        measurer.runner.close()
    with pytest.raises(ValueError, match="repeat"):
        TuningOptions(repeat=0)
    assert np.isclose(TuningOptions().min_repeat_ms, 40.0) and TuningOptions().repeat == 3
