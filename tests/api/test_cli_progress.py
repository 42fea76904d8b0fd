"""The progress bar's parts (phase, ETA, best), the final line and the early-end reason, without a search."""

from __future__ import annotations

import io
import logging
import re

import pytest
from rich.console import Console

from api.cli.progress import EtaEstimator, JobProgress, best_text, eta_text, log_to_console, phase_text
from api.cli.summary import compare_here, early_end_reason, final_line
from scheduler_core.dag.compute_dag import ComputeDAG
from tests.workloads import matmul_add


def test_best_appears_only_once_there_is_one():
    for cost in (None, 0.0, float("inf"), float("nan")):
        assert best_text({"best_cost_s": cost, "best_gflops": 0.0}) == ""
    assert best_text({"best_cost_s": 1.234e-3, "best_gflops": 215.43}) == "best 1.23 ms (215.4 GFLOP/s)"
    assert best_text({"best_cost_s": 4.2e-6, "best_gflops": 0.00311}) == "best 4.2 us (0.00311 GFLOP/s)"
    assert best_text({"best_cost_s": 2.0, "best_gflops": None}) == "best 2 s"


def test_phase_is_shown_only_when_the_job_reports_one():
    assert phase_text({"state": "running", "phase": "evolution"}) == "evolution"
    assert phase_text({"state": "running"}) == "" and phase_text({"state": "running", "phase": ""}) == ""
    assert phase_text({"state": "queued", "phase": ""}) == "waiting for a worker"
    assert phase_text({"state": "finished", "phase": "saving"}) == "finished"


def test_eta_needs_two_batches_then_follows_the_trial_rate():
    eta = EtaEstimator()
    assert eta.observe(0, 64, 0.0) is None
    assert eta.observe(8, 64, 10.0) is None          # one batch: no rate yet
    assert eta.observe(16, 64, 20.0) == 60.0          # 16 trials in 20 s: 48 left take 60 s
    assert eta.observe(16, 64, 25.0) == 55.0          # time passes without a batch
    assert eta.observe(64, 64, 80.0) is None          # done
    assert eta_text(None) == "ETA -:--" and eta_text(61) == "ETA 1:01" and eta_text(3725) == "ETA 1:02:05"


def test_bar_renders_phase_trials_and_best():
    out = io.StringIO()
    console = Console(file=out, width=160, force_terminal=False)
    times = iter([0.0, 10.0, 20.0])
    with JobProgress(console, clock=lambda: next(times)) as bar:
        bar.update({"state": "running", "phase": "sketches", "trials_done": 0, "trials_total": 8})
        bar.update({"state": "running", "phase": "measuring", "trials_done": 2, "trials_total": 8,
                    "best_cost_s": None, "best_gflops": None})
        bar.update({"state": "running", "phase": "evolution", "trials_done": 4, "trials_total": 8,
                    "best_cost_s": 1e-3, "best_gflops": 12.5, "errors": {"RUN_TIMEOUT": 1}})
    text = out.getvalue()
    assert "evolution" in text and "4/8" in text and "best 1 ms (12.5 GFLOP/s)" in text and "errors 1" in text
    assert "ETA 0:20" in text and "inf" not in text and "None" not in text


def test_logging_goes_above_the_bar_at_warning_only():
    out = io.StringIO()
    console = Console(file=out, width=200)
    log = logging.getLogger("workers.test_cli_progress")
    with log_to_console(console):
        log.info("an info line")
        log.warning("killed 1 orphaned process(es) of a dead worker: 123")
    assert "an info line" not in out.getvalue()
    assert "WARNING workers.test_cli_progress: killed 1 orphaned process(es) of a dead worker: 123" in out.getvalue()


def test_final_line_and_early_end_reason():
    assert final_line(1.23e-3, 215.43, 64, "timed here ...") == \
        "best 1.23 ms (215.4 GFLOP/s) after 64 trials; timed here ..."
    assert final_line(1e-3, 10.0, 8, "x", reused=4) == "best 1 ms (10.0 GFLOP/s) after 8 trials (4 reused, 4 new); x"
    job = {"state": "finished", "trials_done": 1, "trials_total": 8}
    assert early_end_reason(job, 1, None).startswith("the search space of this DAG has a single state")
    assert "only the 5 distinct states" in early_end_reason({**job, "trials_done": 5}, 5, None)
    assert "--early-stopping 3" in early_end_reason({**job, "trials_done": 5}, 5, 3)
    assert early_end_reason({**job, "trials_done": 8}, 8, None) is None
    assert early_end_reason({**job, "state": "cancelled"}, 1, None) is None


def test_compare_here_times_the_program_and_the_baselines_in_this_process():
    """The program rebuilt from its steps (none here: the naive loops) beside numpy's and torch's
    formulations, at the target's thread count; no CPU baseline for a cuda target."""
    pytest.importorskip("torch")
    dag = ComputeDAG(matmul_add(16, 16, 16))
    text = compare_here(dag, "llvm -num-cores=1", [], repeats=1, budget_s=0.1)
    assert re.fullmatch(r"timed here at 1 thread: tuned [\d.]+ (us|ms); numpy out = \(A @ B\) \+ C [\d.]+ (us|ms) "
                        r"\(tuned [\d.]+x (faster|slower)\); torch out = torch.addmm\(C, A, B\) [\d.]+ (us|ms) "
                        r"\(tuned [\d.]+x (faster|slower)\)", text), text
    assert compare_here(dag, "cuda", []) == "no CPU baseline for a cuda target"
