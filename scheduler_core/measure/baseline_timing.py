"""A tuned program beside its baselines, timed in one process (the CLI's last line).

    compare_tuned(dag, target, steps)       "timed here at 2 threads: tuned ...; numpy ...; torch ..."
    compare_with_baselines(dag, inputs, threads, tuned_s) -> [Timing]
    time_baseline(program, inputs, threads) -> median seconds at ``threads`` threads
    comparison_text(timings, threads)       the line, saying faster or slower

Thread counts are set for the measurement with ``threadpoolctl`` (numpy's BLAS) and
``torch.set_num_threads``, so the baselines run at the tuned program's thread count.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Callable, Sequence

import numpy as np
from threadpoolctl import threadpool_limits

from scheduler_core.base.errors import SchedulerCoreError
from scheduler_core.base.target import Target
from scheduler_core.codegen.parallel import default_num_threads
from scheduler_core.dag.compute_dag import ComputeDAG
from scheduler_core.dag.task import Task
from scheduler_core.driver.program import program_from_steps

from .baseline import BaselineProgram, NoBaselineError, numpy_program, torch_program
from .local_runner import arg_specs, empty_outputs, random_inputs

__all__ = ["Timing", "time_baseline", "compare_with_baselines", "comparison_text", "compare_tuned",
           "torch_threads"]


def torch_threads() -> int | None:
    """``torch.get_num_threads()``, or None when torch is not installed."""
    try:
        import torch  # noqa: PLC0415 - the optional extra .[torch]
    except ImportError:
        return None
    return int(torch.get_num_threads())


def time_baseline(program: BaselineProgram, inputs: Sequence[np.ndarray], threads: int, repeats: int = 7,
                  budget_s: float = 3.0) -> float:
    """Median seconds of ``program.run`` on ``inputs`` (numpy arrays, converted once) with
    ``threads`` threads (numpy's BLAS through threadpoolctl, torch through set_num_threads):
    one warm-up, then up to ``repeats`` runs within ``budget_s`` seconds (at least one)."""
    args = [program.convert(a) for a in inputs]
    restore: Callable[[], None] = lambda: None  # noqa: E731
    if program.library == "torch":
        import torch  # noqa: PLC0415 - the optional extra .[torch]
        before = torch.get_num_threads()
        torch.set_num_threads(threads)
        restore = lambda: torch.set_num_threads(before)  # noqa: E731
    try:
        with threadpool_limits(limits=threads, user_api="blas"):
            program.run(args)
            times: list[float] = []
            spent = 0.0
            while len(times) < repeats and (not times or spent < budget_s):
                t0 = time.perf_counter()
                program.run(args)
                times.append(time.perf_counter() - t0)
                spent += times[-1]
    finally:
        restore()
    return statistics.median(times)


@dataclasses.dataclass(frozen=True)
class Timing:
    """One program timed in this process: ``label`` (``"tuned"``, ``"numpy"``, ``"torch"``), its
    ``formula`` (the library calls; ``""`` for the tuned program), median ``seconds`` or None with
    ``why`` (no formulation, torch not installed)."""

    label: str
    formula: str
    seconds: float | None
    why: str = ""


def compare_with_baselines(dag: ComputeDAG, inputs: Sequence[np.ndarray], threads: int,
                           tuned_s: float | None = None, repeats: int = 7,
                           budget_s: float = 3.0) -> list[Timing]:
    """Time the numpy and torch baselines of ``dag`` on ``inputs`` (the DAG's placeholders, in
    order) in this process, one after the other, each the median of up to ``repeats`` calls
    after a warm-up within ``budget_s`` seconds, at ``threads`` threads (the tuned program's).
    Returns the Timings, the tuned program's first when ``tuned_s`` (its median seconds, timed
    just before in this process on the same inputs) is given."""
    out: list[Timing] = []
    if tuned_s is not None:
        out.append(Timing("tuned", "", tuned_s))
    for label, make in (("numpy", numpy_program), ("torch", torch_program)):
        try:
            program = make(dag)
        except NoBaselineError as err:
            out.append(Timing(label, "", None, f"no {label} formulation: {err}"))
            continue
        if program is None:
            out.append(Timing(label, "", None, "torch is not installed"))
            continue
        out.append(Timing(label, program.formula,
                          time_baseline(program, inputs, threads, repeats=repeats, budget_s=budget_s)))
    return out


def _seconds_text(s: float) -> str:
    return f"{s * 1e3:.3g} ms" if s >= 1e-3 else f"{s * 1e6:.3g} us"


def comparison_text(timings: Sequence[Timing], threads: int) -> str:
    """One line: ``timed here at 2 threads: tuned 18.5 ms; numpy out = (A @ B) + C 15.6 ms (tuned
    1.19x slower); torch out = torch.addmm(C, A, B) 14.2 ms (tuned 1.30x slower)``."""
    tuned = next((t.seconds for t in timings if t.label == "tuned"), None)
    parts = []
    for t in timings:
        if t.label == "tuned":
            parts.append(f"tuned {_seconds_text(t.seconds)}" if t.seconds is not None else "tuned: not timed")
            continue
        if t.seconds is None:
            parts.append(f"{t.label}: {t.why}")
            continue
        text = f"{t.label} {t.formula} {_seconds_text(t.seconds)}"
        if tuned:
            ratio = t.seconds / tuned
            text += f" (tuned {ratio:.2f}x faster)" if ratio >= 1 else f" (tuned {1 / ratio:.2f}x slower)"
        parts.append(text)
    return f"timed here at {threads} thread{'s' if threads != 1 else ''}: " + "; ".join(parts)


def compare_tuned(dag: ComputeDAG, target: str, steps: list | None, repeats: int = 7, budget_s: float = 2.0) -> str:
    """The line ``timed here at T threads: tuned ...; numpy ...; torch ...``: the program of
    ``steps`` (a record's step list; None: not rebuilt) built for ``target`` and timed with its
    ``time_evaluator`` (calls from C, as the search measured it), and the numpy and torch
    baselines of ``dag`` (each call from Python) on the measurement's random inputs at the
    program's thread count (``-num-cores``, else OMP_NUM_THREADS or this process's CPUs).
    A ``cuda`` target is not compared (its baselines would run on the GPU)."""
    parsed = Target.parse(target)
    if parsed.is_gpu:
        return "no CPU baseline for a cuda target"
    threads = parsed.num_cores or default_num_threads()
    try:
        specs = arg_specs(list(dag.tensors))
    except ValueError as err:  # a symbolic shape
        return f"not timed here: {err}"
    inputs = random_inputs(specs)
    tuned_s = None
    if steps is not None:
        try:
            module = program_from_steps(Task.create(dag, target), steps).build()
        except SchedulerCoreError as err:
            return f"not timed here: the best record does not rebuild: {err}"
        outputs = empty_outputs(specs)
        it_in, it_out = iter(inputs), iter(outputs)
        call_args = [next(it_out) if is_output else next(it_in) for _, _, _, is_output in specs]
        evaluator = module.time_evaluator(module.entry_name, "cpu", number=1, repeat=repeats,
                                          min_repeat_ms=max(1.0, budget_s * 1e3 / max(repeats, 1) / 4))
        tuned_s = statistics.median(evaluator(*call_args).results)
    timings = compare_with_baselines(dag, inputs, threads, tuned_s, repeats=repeats, budget_s=budget_s)
    return comparison_text(timings, threads)
