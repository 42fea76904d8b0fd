"""What the command line says when a tuning ends: the best beside numpy, and why a search stopped early.

    numpy_reference_time(dag)   median seconds of the library's numpy reference evaluator
                                (scheduler_core.dag.reference.evaluate, the check every measured
                                program passes) on random inputs of the DAG's shapes and dtypes
    final_line(...)             "best 1.23 ms (215.4 GFLOP/s) after 64 trials; numpy reference evaluator
                                2.41 ms: 1.96x faster"
    early_end_reason(...)       why a finished job measured fewer trials than asked, or None
"""

from __future__ import annotations

import statistics
import time

from scheduler_core.base.errors import SchedulerCoreError
from scheduler_core.dag.compute_dag import ComputeDAG
from scheduler_core.dag.reference import evaluate
from scheduler_core.measure.local_runner import arg_specs, random_inputs

from .progress import format_gflops, format_seconds


def numpy_reference_time(dag: ComputeDAG, repeats: int = 5, budget_s: float = 3.0) -> tuple[float | None, str]:
    """``(median seconds, "")`` of evaluating ``dag`` with numpy, or ``(None, why)`` when it cannot.

    Inputs are the measurement's random inputs (``random_inputs`` of the DAG's argument shapes
    and dtypes).  Runs up to ``repeats`` times, stopping once ``budget_s`` seconds are spent
    (at least once).
    """
    try:
        inputs = random_inputs(arg_specs(list(dag.tensors)))
    except ValueError as err:  # a symbolic shape
        return None, str(err)
    times: list[float] = []
    spent = 0.0
    while len(times) < repeats and (not times or spent < budget_s):
        t0 = time.perf_counter()
        try:
            evaluate(dag, inputs)
        except (SchedulerCoreError, ValueError, ArithmeticError, MemoryError) as err:
            return None, f"{type(err).__name__}: {err}"
        times.append(time.perf_counter() - t0)
        spent += times[-1]
    return statistics.median(times), ""


def final_line(cost_s: float, gflops: float | None, trials: int, numpy_s: float | None, numpy_why: str = "",
               reused: int = 0) -> str:
    """The last line of a tuning: the best latency and GFLOP/s, the trials, numpy's time and the
    speed-up (``reused`` of the ``trials`` came from earlier runs)."""
    flops = f" ({format_gflops(gflops)} GFLOP/s)" if gflops else ""
    trials_text = f"{trials} trial{'s' if trials != 1 else ''}"
    if reused:
        trials_text += f" ({reused} reused, {trials - reused} new)"
    line = f"best {format_seconds(cost_s)}{flops} after {trials_text}; "
    if numpy_s is None:
        return line + f"numpy reference evaluator unavailable ({numpy_why})"
    ratio = numpy_s / cost_s
    verdict = f"{ratio:.2f}x faster" if ratio >= 1 else f"{1 / ratio:.2f}x slower than numpy"
    # the library's numpy evaluator of the DAG (loop-free numpy, not a BLAS call per op)
    return line + f"numpy reference evaluator {format_seconds(numpy_s)}: {verdict}"


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
