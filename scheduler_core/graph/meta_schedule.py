"""Seed 002's ``ms.tune_tir``: tune one prim_func and get it back with its best schedule.

    from scheduler_core.graph import meta_schedule as ms
    mod_linear = IRModule.from_expr(MyModuleMixture["linear0"].with_attr("global_symbol", "main"))
    sch = ms.tune_tir(mod=mod_linear, target="llvm --num-cores=1",
                      config=ms.TuneConfig(max_trials_global=64, num_trials_per_iter=64),
                      work_dir="./tune_tmp", task_name="main")
    new_func = sch.mod["main"].with_attr("global_symbol", "linear0")   # a PrimFunction with .state

TVM's MetaSchedule names over this package's Ansor-style search: the function becomes a
SearchTask, a SketchPolicy tunes it (the records go to ``<work_dir>/records.json``, our
record format, appended: a second call in the same work_dir resumes, never re-measuring a
recorded program), and the best record in that file is the returned function's schedule.
Unlike MetaSchedule, the function's default schedule (what ``build_graph`` gives an untuned
function) is measured first, as a baseline and a seed of the search (``TuneConfig.measure_default``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from scheduler_core.base.errors import InvalidWorkloadError, SchedulerCoreError
from scheduler_core.measure.data import MeasureInput
from scheduler_core.measure.record_file import RecordToFile, load_best_record
from scheduler_core.schedule.schedule_printer import state_to_python
from scheduler_core.search.program_measurer import ProgramMeasurer
from scheduler_core.search.search_policy import PreloadMeasuredStates, SketchPolicy, state_key
from scheduler_core.search.search_task import SearchTask
from scheduler_core.search.tuning_options import TuningOptions

from .build import default_state
from .ir import PrimFunction
from .script import IRModule

RECORD_FILE = "records.json"


@dataclass(frozen=True)
class TuneConfig:
    """TVM's ``ms.TuneConfig``: ``max_trials_global`` programs measured in all,
    ``num_trials_per_iter`` per round (between cost-model updates).  Ours besides: the
    evolutionary search's ``population`` and ``num_iters``, ``seed``, ``verbose``, and the
    timing's ``min_repeat_ms`` / ``repeat`` (TuningOptions' fields, same bounds: an
    InvalidWorkloadError names a bad one when tuning starts), and ``measure_default``: measure
    the function's default schedule (``build.default_state``, what an untuned function gets)
    once before the search, as one more record and a seed of the search's population, so the
    returned schedule is never slower than the untuned one as measured."""

    # The defaults are TuningOptions' own.
    max_trials_global: int = TuningOptions.num_measure_trials
    num_trials_per_iter: int = TuningOptions.num_measures_per_round
    max_trials_per_task: int | None = None
    population: int = TuningOptions.population
    num_iters: int = TuningOptions.num_iters
    seed: int = TuningOptions.seed
    verbose: int = TuningOptions.verbose
    min_repeat_ms: float = TuningOptions.min_repeat_ms
    repeat: int = TuningOptions.repeat
    measure_default: bool = True

    def tuning_options(self, log_file: str) -> TuningOptions:
        trials = self.max_trials_global if self.max_trials_per_task is None \
            else min(self.max_trials_global, self.max_trials_per_task)
        return TuningOptions(num_measure_trials=trials, num_measures_per_round=self.num_trials_per_iter,
                             seed=self.seed, population=self.population, num_iters=self.num_iters,
                             verbose=self.verbose, min_repeat_ms=self.min_repeat_ms, repeat=self.repeat,
                             measure_callbacks=(RecordToFile(log_file),))


@dataclass(frozen=True)
class TuneResult:
    """What ``tune_tir`` returns (TVM returns a ``tir.Schedule``): ``mod["main"]`` is the
    tuned PrimFunction (its ``state`` set), ``cost_s`` its measured seconds, ``log_file``
    the records, ``trace`` the schedule as Python schedule code."""

    mod: IRModule
    state: Any
    cost_s: float
    log_file: str

    @property
    def trace(self) -> str:
        return state_to_python(self.state)


def _the_function(mod: Any, task_name: str) -> PrimFunction:
    if isinstance(mod, PrimFunction):
        return mod
    if not isinstance(mod, IRModule):
        raise InvalidWorkloadError(f"tune_tir takes an IRModule or a prim_func, not {type(mod).__name__}", "mod")
    prims = {k: f for k, f in mod.functions.items() if isinstance(f, PrimFunction)}
    if "main" in prims:
        return prims["main"]
    if task_name in prims:
        return prims[task_name]
    if len(prims) == 1:
        return next(iter(prims.values()))
    raise InvalidWorkloadError(f"tune_tir needs a module with one prim_func (or one named 'main'), "
                               f"got {sorted(prims)}", "mod")


def tune_tir(mod: Any, target: Any, config: TuneConfig | None = None, work_dir: str = "./tune_tmp",
             task_name: str = "main") -> TuneResult:
    """Tune the prim_func of ``mod`` (``"main"``, or its only one) for ``target``.

    Returns a TuneResult whose ``mod["main"]`` carries the best schedule found in
    ``<work_dir>/records.json``.  Raises InvalidWorkloadError for a module without a
    prim_func or a bad config value, InvalidTargetError for a bad target, and
    SchedulerCoreError when no valid program was measured.
    """
    func = _the_function(mod, task_name)
    config = config or TuneConfig()
    os.makedirs(work_dir, exist_ok=True)
    log_file = os.path.join(work_dir, RECORD_FILE)
    options = config.tuning_options(log_file)
    task = SearchTask(compute_dag=func.dag, target=target, desc=task_name)
    preload = [PreloadMeasuredStates(log_file)] if os.path.exists(log_file) else []
    policy = SketchPolicy.from_options(task, options, init_search_callbacks=preload)
    measurer = ProgramMeasurer.from_options(options)
    try:
        baseline = default_state(func.dag, task.target)
        if config.measure_default and state_key(baseline) not in policy.measured:
            result = measurer.measure(task, policy, [MeasureInput(task, baseline)])[0]
            policy.add_measured(baseline, result.cost)
        policy.search(options.num_measure_trials, options.early_stopping, options.num_measures_per_round, measurer)
    finally:
        for part in (measurer.builder, measurer.runner):
            if hasattr(part, "close"):
                part.close()
    best = load_best_record(log_file, task.workload_key, task.target, dags={task.workload_key: func.dag})
    if best is None:
        raise SchedulerCoreError(f"tune_tir: no valid program of {func.name} in {log_file} after "
                                 f"{options.num_measure_trials} trials")
    inp, res = best  # a NO_ERROR record: its cost is a number
    tuned = func.with_state(inp.state).with_attr("global_symbol", "main")
    return TuneResult(IRModule({"main": tuned}), inp.state, float(res.cost or 0.0), log_file)
