"""ProgramMeasurer: builds and runs a batch, keeps the best, feeds the callbacks.

    [MeasureInput] --builder--> [BuildResult] --runner--> [MeasureResult] --callbacks (records)

A round's batch is measured in chunks (``chunk`` programs: twice the builder's parallel
builds, at least 4), each built, run and handed to the callbacks before the next starts, so
progress moves as measurements finish and a callback that stops the search (a cancelled job)
stops it within one chunk: what was measured is kept, the rest of the round is dropped.

A candidate that would become the best of its task is first checked against
the numpy reference evaluator; on a mismatch its result becomes WRONG_ANSWER,
so a wrong program is recorded as an error and never reported as best.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

from scheduler_core.measure.data import MeasureErrorNo
from scheduler_core.measure.local_builder import LocalBuilder
from scheduler_core.measure.local_runner import LocalRunner, check_against_reference

from .tuning_options import TuningOptions


class ProgramMeasurer:
    """Measure batches for a search (Ansor's ProgramMeasurer).

    builder/runner: objects with ``build(inputs)`` and ``run(inputs, build_results)``
    (``"local"`` makes a LocalBuilder/LocalRunner with ``timeout_s`` (seconds) and
    ``min_repeat_ms``).  callbacks: called as
    ``cb(policy, inputs, results)`` after every chunk of a batch (``chunk`` programs; default
    twice the builder's ``n_parallel``, at least 4).
    """

    def __init__(self, builder: Any = "local", runner: Any = "local", callbacks=None, verbose: int = 1,
                 check_best: bool = True, timeout_s: float = 10.0, min_repeat_ms: float = 40.0,
                 repeat: int = 3, chunk: int | None = None):
        self.builder = LocalBuilder(timeout_s=timeout_s) if builder == "local" else builder
        self.runner = (LocalRunner(timeout_s=timeout_s, min_repeat_ms=min_repeat_ms, repeat=repeat)
                       if runner == "local" else runner)
        self.callbacks = list(callbacks or [])
        self.chunk = chunk or max(4, 2 * int(getattr(self.builder, "n_parallel", 2) or 2))
        self.verbose = verbose
        self.check_best = check_best
        self.best_cost: dict = {}   # workload_key -> seconds
        self.best_state: dict = {}
        self.error_counts: dict = {}
        self.ct = 0
        self.time_build_s = 0.0
        self.time_run_s = 0.0

    def measure(self, task, policy, inputs: list) -> list:
        """Build, run and record ``inputs``, chunk by chunk (each chunk's callbacks run before the
        next chunk is built); returns their MeasureResults.  An exception from a callback ends the
        batch there, with the chunks measured so far recorded."""
        results: list = []
        for start in range(0, len(inputs), self.chunk):
            results += self._measure_chunk(task, policy, inputs[start:start + self.chunk])
        return results

    def _measure_chunk(self, task, policy, inputs: list) -> list:
        enter_phase = getattr(policy, "enter_phase", None)  # SketchPolicy.on_phase: "building", "measuring"
        t0 = time.perf_counter()
        if enter_phase is not None:
            enter_phase("building")
        builds = self.builder.build(inputs)
        t1 = time.perf_counter()
        if enter_phase is not None:
            enter_phase("measuring")
        results = list(self.runner.run(inputs, builds))
        self.time_build_s += t1 - t0
        for k, (inp, res) in enumerate(zip(inputs, results)):
            cost = res.cost
            key = task.workload_key
            # (a build made elsewhere, e.g. on a measurement-queue worker, was checked there)
            if cost is not None and cost < self.best_cost.get(key, float("inf")) and self.check_best \
                    and builds[k].filename:
                checked = check_against_reference(inp, builds[k])
                if checked.error_no != MeasureErrorNo.NO_ERROR:
                    res = replace(res, error_no=checked.error_no, error_msg=checked.error_msg)
                    results[k] = res
                    cost = None
            if cost is not None and cost < self.best_cost.get(key, float("inf")):
                self.best_cost[key] = cost
                self.best_state[key] = inp.state
            if res.error_no != MeasureErrorNo.NO_ERROR:
                name = MeasureErrorNo(res.error_no).name
                self.error_counts[name] = self.error_counts.get(name, 0) + 1
        self.time_run_s += time.perf_counter() - t1
        self.ct += len(inputs)
        for cb in self.callbacks:
            cb(policy, inputs, results)
        return results

    @classmethod
    def from_options(cls, options: TuningOptions) -> ProgramMeasurer:
        """The measurer of a search run with ``options`` (builder, runner, callbacks, timeouts)."""
        return cls(options.builder, options.runner, options.measure_callbacks, options.verbose,
                   timeout_s=options.timeout_s, min_repeat_ms=options.min_repeat_ms, repeat=options.repeat)
