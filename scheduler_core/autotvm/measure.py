"""Measuring template configs (TVM's ``autotvm/measure``), on the project's process-isolated measurer.

    config --Task.instantiate--> Schedule --.state--> State
        --MeasureInput(core task, state)--> LocalBuilder (worker processes) --> LocalRunner (sandbox)
        --> MeasureResult(costs_s, error_no, ...)

The builder and runner are the auto-scheduler's (``scheduler_core.measure``), driven through
its ProgramMeasurer, so a crash, a hang or a wrong answer of one config is an error result
(``error_no``: TVM's codes, :class:`~scheduler_core.measure.data.MeasureErrorNo`), never the
tuner's end, and the would-be best program is checked against the numpy reference evaluator.
A config the template rejects (an exception while it runs) is INSTANTIATION_ERROR and is
not built.  ``autotvm.LocalRunner``'s defaults are TVM's (number=4, repeat=3,
min_repeat_ms=0, timeout=10 s); costs are seconds per call, one per repeat.
"""

from __future__ import annotations

import time
import traceback
from dataclasses import dataclass
from typing import Any

from scheduler_core.base.errors import BuildError
from scheduler_core.driver.nvcc import nvcc_available
from scheduler_core.measure.data import MeasureErrorNo, MeasureResult, failed_result
from scheduler_core.measure.data import MeasureInput as CoreMeasureInput
from scheduler_core.measure.local_builder import LocalBuilder as CoreLocalBuilder
from scheduler_core.measure.local_runner import LocalRunner as CoreLocalRunner
from scheduler_core.runtime.device import cuda_unavailable_reason
from scheduler_core.runtime.timer import check_timing_args
from scheduler_core.search.program_measurer import ProgramMeasurer

from .config import ConfigEntity


class LocalBuilder:
    """Build configs in ``n_parallel`` worker processes (TVM's ``autotvm.LocalBuilder``).

    timeout: seconds one build may take (BUILD_TIMEOUT beyond); n_parallel: builds at once
    (default: the CPU count), also the tuner's batch size.
    """

    def __init__(self, timeout: float = 10, n_parallel: int | None = None, build_func: str = "default"):
        if float(timeout) <= 0:
            raise ValueError(f"LocalBuilder: timeout must be > 0 seconds, got {timeout}")
        self.timeout, self.n_parallel = float(timeout), n_parallel

    def make(self) -> CoreLocalBuilder:
        return CoreLocalBuilder(timeout_s=self.timeout, n_parallel=self.n_parallel)


class LocalRunner:
    """Run built configs in a sandboxed worker process (TVM's ``autotvm.LocalRunner``).

    number: calls per measurement; repeat: measurements (one cost each); min_repeat_ms:
    milliseconds a measurement lasts at least (``number`` grows until it does); timeout:
    seconds one run may take (RUN_TIMEOUT beyond); enable_cpu_cache_flush: flush the
    caches before each measurement; check_correctness: compare every program with the
    reference evaluator (the best is always compared).
    """

    def __init__(self, timeout: float = 10, number: int = 4, repeat: int = 3, min_repeat_ms: float = 0,
                 cooldown_interval: float = 0.1, enable_cpu_cache_flush: bool = False,
                 check_correctness: bool = False):
        self.timeout, self.number, self.repeat = float(timeout), int(number), int(repeat)
        self.min_repeat_ms = float(min_repeat_ms)
        self.enable_cpu_cache_flush, self.check_correctness = bool(enable_cpu_cache_flush), bool(check_correctness)
        check_timing_args(self.number, self.repeat, self.min_repeat_ms)  # time_evaluator's rules

    def make(self) -> CoreLocalRunner:
        return CoreLocalRunner(timeout_s=self.timeout, number=self.number, repeat=self.repeat,
                               min_repeat_ms=self.min_repeat_ms, enable_cpu_cache_flush=self.enable_cpu_cache_flush,
                               check_correctness=self.check_correctness)


def measure_option(builder: Any = "local", runner: Any = "local") -> dict:
    """How to measure (TVM's ``autotvm.measure_option``): ``{"builder": LocalBuilder, "runner": LocalRunner}``.

    builder: ``"local"`` or a LocalBuilder; runner: ``"local"`` or a LocalRunner.  Raises
    ValueError for anything else (RPC runners do not exist here).
    """
    if builder == "local":
        builder = LocalBuilder()
    if runner == "local":
        runner = LocalRunner()
    if not isinstance(builder, LocalBuilder):
        raise ValueError(f"measure_option: builder must be 'local' or autotvm.LocalBuilder(...), got {builder!r}")
    if not isinstance(runner, LocalRunner):
        raise ValueError(f"measure_option: runner must be 'local' or autotvm.LocalRunner(...), got {runner!r}")
    return {"builder": builder, "runner": runner}


@dataclass
class MeasureInput:
    """One config to measure (TVM's ``autotvm.MeasureInput``): target, task, config; after
    instantiation ``state`` (the State the config made, None when the template rejected it)
    and ``core`` (the MeasureInput of the auto-scheduler's measurer and records)."""

    target: Any
    task: Any
    config: ConfigEntity
    state: Any = None
    core: Any = None


def result_text(res: MeasureResult) -> str:
    """A result as TVM's log prints it: ``MeasureResult(costs=(0.0041,), error_no=0, all_cost=.., timestamp=..)``;
    a failure shows its error name and message instead of the costs."""
    if res.error_no == MeasureErrorNo.NO_ERROR:
        costs = "(" + ", ".join(repr(float(c)) for c in res.costs) + ("," if len(res.costs) == 1 else "") + ")"
    else:
        msg = (res.error_msg or "").strip().splitlines()
        costs = f"({MeasureErrorNo(res.error_no).name}({(msg[-1] if msg else '')[:120]!r}),)"
    return (f"MeasureResult(costs={costs}, error_no={int(res.error_no)}, all_cost={res.all_cost}, "
            f"timestamp={res.timestamp})")


def cuda_refusal() -> str | None:
    """Why cuda configs cannot be measured here (no GPU, no nvcc), or None."""
    return cuda_unavailable_reason() or nvcc_available()


class MeasureBatch:
    """Measures lists of :class:`MeasureInput` for one task; ``n_parallel`` is the batch size.

    Raises BuildError at construction for a cuda task where no GPU (or no nvcc) is attached,
    naming why.  Use as a context manager (or :meth:`close`) to stop the worker processes.
    """

    def __init__(self, task: Any, option: dict):
        if task.target.is_gpu:
            why = cuda_refusal()
            if why:
                raise BuildError(f"cannot tune {task.name!r} for {task.target}: {why}; build the template for "
                                 f"cuda with sc.build (CUDA C source) or tune for an llvm target")
        self.task = task
        builder, runner = option["builder"], option["runner"]
        self.core_builder, self.core_runner = builder.make(), runner.make()
        self.n_parallel = self.core_builder.n_parallel
        self.measurer = ProgramMeasurer(self.core_builder, self.core_runner, verbose=0, check_best=True)

    def instantiate(self, inp: MeasureInput) -> str | None:
        """Fill ``inp.state`` / ``inp.core``; the error text when the template rejects the config."""
        try:
            s, _ = self.task.instantiate(inp.config)
        except Exception as err:  # the template is user code: any exception rejects the config (TVM's rule)
            return f"{type(err).__name__}: {err}\n{traceback.format_exc(limit=3)}"
        inp.state = s.state
        inp.core = CoreMeasureInput(self.task.core_task_of(s.state.dag), s.state)
        return None

    def __call__(self, inputs: list) -> list:
        results: list = [None] * len(inputs)
        todo = []
        for k, inp in enumerate(inputs):
            t0 = time.time()
            why = self.instantiate(inp)
            if why is not None:
                results[k] = failed_result(MeasureErrorNo.INSTANTIATION_ERROR, why, time.time() - t0, time.time())
            else:
                todo.append(k)
        if todo:
            measured = self.measurer.measure(self.task.core_task, None, [inputs[k].core for k in todo])
            for k, res in zip(todo, measured):
                results[k] = res
        return results

    def close(self) -> None:
        for part in (self.core_builder, self.core_runner):
            close = getattr(part, "close", None)
            if close is not None:
                close()

    def __enter__(self) -> MeasureBatch:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


__all__ = ["LocalBuilder", "LocalRunner", "measure_option", "MeasureInput", "MeasureBatch", "result_text"]
