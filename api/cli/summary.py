"""What the command line says when a tuning ends: the best beside what a user would otherwise call,
and why a search stopped early.

    compare_here(dag, target, steps)   "timed here at 2 threads: tuned 18.5 ms; numpy out = (A @ B) + C
                                       15.6 ms (tuned 1.19x slower); torch out = torch.addmm(C, A, B) ..."
                                       (the best program rebuilt from its steps and the numpy / torch
                                       baselines of scheduler_core.measure.baseline, all timed in this
                                       process on the same inputs at the same thread count)
    final_line(...)                    "best 1.23 ms (215.4 GFLOP/s) after 64 trials; <compare_here>"
    early_end_reason(...)              why a finished job measured fewer trials than asked, or None

The reference evaluator (scheduler_core.dag.reference) checks every measured program; it is not a
speed baseline and is never compared with here.
"""

from __future__ import annotations

from scheduler_core.dag.compute_dag import ComputeDAG
from scheduler_core.measure.baseline_timing import compare_tuned

from .progress import format_gflops, format_seconds


def compare_here(dag: ComputeDAG, target: str, steps: list | None, repeats: int = 7, budget_s: float = 2.0) -> str:
    """``compare_tuned``'s line: the best program (``steps``) beside numpy and torch, timed here."""
    return compare_tuned(dag, target, steps, repeats=repeats, budget_s=budget_s)


def final_line(cost_s: float, gflops: float | None, trials: int, comparison: str, reused: int = 0) -> str:
    """The last line of a tuning: the best latency and GFLOP/s as measured in the search, the
    trials (``reused`` of them from earlier runs), then ``comparison`` (:func:`compare_here`)."""
    flops = f" ({format_gflops(gflops)} GFLOP/s)" if gflops else ""
    trials_text = f"{trials} trial{'s' if trials != 1 else ''}"
    if reused:
        trials_text += f" ({reused} reused, {trials - reused} new)"
    return f"best {format_seconds(cost_s)}{flops} after {trials_text}; {comparison}"


def early_end_reason(job: dict, distinct_states: int, early_stopping: int | None) -> str | None:
    """Why a finished job measured fewer trials than it asked for, or None when it did not.

    job : the job dict (state, trials_done, trials_total, errors)
    distinct_states : records of the workload+target after the job (every state measured once)
    early_stopping : the task's early_stopping option (None: never)
    """
    done, total = int(job.get("trials_done") or 0), int(job.get("trials_total") or 0)
    if job.get("state") != "finished" or done >= total:
        return None
    if early_stopping is not None and done > early_stopping:
        return (f"stopped after {done} of {total} trials: no better program in the last {early_stopping} "
                f"trials (--early-stopping {early_stopping})")
    if distinct_states <= 1:
        return ("the search space of this DAG has a single state (no loop to split, reorder, parallelize or "
                f"vectorize): {max(done, 1)} trial measured it")
    return (f"stopped after {done} of {total} trials: the search found no state left to measure; the search "
            f"space of this DAG holds only the {distinct_states} distinct states now measured")
