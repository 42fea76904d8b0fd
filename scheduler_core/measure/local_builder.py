"""LocalBuilder: compile MeasureInputs into shared libraries in worker processes.

    MeasureInput --input_payload--> (dag JSON, target, step records) + the BuildConfig's fields
        --worker: Task, driver.program_from_steps(...).build(), backend.export--> <tmp>/<n>.so
        --> BuildResult(filename, args = dag.tensors, error_no, error_msg, time_cost)

TVM's ``auto_scheduler.LocalBuilder`` (Ansor section 6): builds run in parallel in
separate processes so that a compiler crash or a build that never ends costs one
result (COMPILE_HOST / BUILD_TIMEOUT), never the search.

A ``cuda`` task takes the same path; its backend (``driver.backend``) writes different
artifacts (no GPU needed):

    steps --program_from_steps (no layout rewrite, as TVM on GPUs)--> CudaModule
        --check_gpu_program (static: threads, shared memory, vthreads, vector width)-->
        --nvcc--> <n>.ptx, <n>.cubin, <n>.cu, <n>.json
        --check_gpu_program (registers, from ptxas -v)--> BuildResult(filename=<n>.cubin)

A program the GPU could not launch is an INSTANTIATION_ERROR (TVM's VerifyGPUCode) and is
never run; an nvcc failure (or no nvcc) is COMPILE_DEVICE.  The runner rebuilds the
program from the same steps (``program_from_steps(...).build(device_image=cubin)``) and
loads the builder's cubin.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
import time
import traceback
import weakref

from scheduler_core.base.bounded_cache import BoundedCache
from scheduler_core.base.build_config import BuildConfig
from scheduler_core.base.errors import BuildError, InvalidWorkloadError, LoweringError, ScheduleError
from scheduler_core.dag.compute_dag import ComputeDAG
from scheduler_core.dag.task import Task
from scheduler_core.driver.backend import backend_of
from scheduler_core.driver.gpu_validity import InvalidGpuProgramError
from scheduler_core.driver.program import program_from_steps

from .data import BuildResult, MeasureErrorNo, MeasureInput, input_payload
from .popen_pool import PopenPool

_WORKER_FUNC = "scheduler_core.measure.local_builder:build_in_worker"
_DAG_CACHE_SIZE = 8


class LocalBuilder:
    """Builds MeasureInputs in ``n_parallel`` worker processes.

    Parameters
    ----------
    timeout_s : float, seconds one build may take; a longer one is killed and
        gives BUILD_TIMEOUT (the worker is replaced, the other builds go on)
    n_parallel : int or None, builds at once (default: the number of CPUs)
    config : BuildConfig or None, the codegen options the workers build with (default: the
        ``BuildConfig.current()`` of each :meth:`build` call); they travel with every job

    The libraries go to a temporary directory owned by this builder; it is removed
    by :meth:`close` (or when the builder is garbage collected), so run the
    results before that.  Workers start on the first :meth:`build` and are reused.
    """

    def __init__(self, timeout_s: float = 15, n_parallel: int | None = None,
                 config: BuildConfig | None = None):
        self.timeout_s = float(timeout_s)
        self.config = config
        self.n_parallel = int(n_parallel or os.cpu_count() or 1)
        self.build_dir = tempfile.mkdtemp(prefix="autosched_build_")
        self._pool = PopenPool(self.n_parallel, preload=("scheduler_core.measure.local_builder",))
        self._count = 0
        self._finalizer = weakref.finalize(self, shutil.rmtree, self.build_dir, True)

    def build(self, inputs: list[MeasureInput], verbose: int = 0) -> list[BuildResult]:
        """Build each input into ``<build_dir>/<n>.so`` (``<n>.cubin`` for a cuda task); one
        BuildResult per input, in order.

        Failures are results, not exceptions: INSTANTIATION_ERROR (the steps do not
        replay or lower), COMPILE_HOST (codegen/link failed, or the worker died),
        COMPILE_DEVICE (a device target failed), BUILD_TIMEOUT.
        verbose: 1 prints one character per input (``.`` built, ``E`` error).
        """
        inputs = list(inputs)
        config = dataclasses.asdict(BuildConfig.resolve(self.config))
        jobs = []
        for inp in inputs:
            self._count += 1
            ext = _artifact_ext(inp.task.target)
            filename = os.path.join(self.build_dir, f"{self._count:07d}.{ext}")
            _, dag_json, target, records = input_payload(inp)
            jobs.append((dag_json, target, records, filename, config))
        outcomes = self._pool.map(_WORKER_FUNC, jobs, self.timeout_s)
        results = []
        for inp, outcome in zip(inputs, outcomes):
            args = tuple(inp.task.compute_dag.tensors)
            results.append(_to_build_result(outcome, args, self.timeout_s))
            if verbose >= 1:
                print("." if results[-1].error_no == MeasureErrorNo.NO_ERROR else "E", end="", flush=True)
        if verbose >= 1 and results:
            print(flush=True)
        return results

    def close(self) -> None:
        """End the workers and remove the build directory with its libraries."""
        self._pool.close()
        self._finalizer()

    def __enter__(self) -> LocalBuilder:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _artifact_ext(target) -> str:
    """The extension of the file a build of ``target`` writes ("so" for a target the parser
    rejects: the worker reports that as the build's error)."""
    try:
        return backend_of(target).artifact_ext
    except BuildError:
        return "so"


def _to_build_result(outcome, args: tuple, timeout_s: float) -> BuildResult:
    if outcome.status == "ok":
        filename, error_no, error_msg, time_cost = outcome.value
        return BuildResult(filename, args, int(error_no), error_msg, float(time_cost))
    if outcome.status == "timeout":
        return BuildResult("", args, MeasureErrorNo.BUILD_TIMEOUT,
                           f"build exceeded timeout_s={timeout_s:g}: {outcome.value}", outcome.wall_s)
    return BuildResult("", args, MeasureErrorNo.COMPILE_HOST, f"builder {outcome.status}: {outcome.value}",
                       outcome.wall_s)


# ---------------------------------------------------------------------------
# in the worker process
# ---------------------------------------------------------------------------

_TASKS: BoundedCache[tuple, Task] = BoundedCache(_DAG_CACHE_SIZE)  # (dag JSON, target) -> Task


def cached_task(dag_json: str, target: str) -> Task:
    """The Task of a DAG's JSON and a target string; the last few are kept (workers build many
    candidates of the same task)."""
    return _TASKS.get_or_make((dag_json, target), lambda: Task.create(ComputeDAG.from_json(dag_json), target))


def build_in_worker(dag_json: str, target: str, records: list, filename: str, config: dict | None = None) -> tuple:
    """Make the program of ``records`` on the DAG for ``target`` and export it to ``filename``.

    Runs in a builder worker, through ``driver.program`` (the same path as the final
    artifact: layout rewrite, lowering, passes, bounds proof, codegen), then the backend's
    ``export`` (a .so; for cuda the .cubin with its .cu, .ptx, .json).  ``config``: the fields
    of the builder's BuildConfig (default: this process's current one).  Returns
    ``(filename or "", error_no, error_msg, seconds)``; never raises for a bad schedule.
    """
    start = time.perf_counter()
    device_errors = False
    try:
        task = cached_task(dag_json, target)
        backend = backend_of(task.target)
        device_errors = backend.device_errors
        program = program_from_steps(task, records, config=None if config is None else BuildConfig(**config))
        backend.export(program.build(), task.target, filename)
        return filename, int(MeasureErrorNo.NO_ERROR), "", time.perf_counter() - start
    except (ScheduleError, LoweringError, InvalidWorkloadError, InvalidGpuProgramError) as err:
        code, message = MeasureErrorNo.INSTANTIATION_ERROR, _describe(err)
    except BuildError as err:
        code = MeasureErrorNo.COMPILE_DEVICE if device_errors else MeasureErrorNo.COMPILE_HOST
        message = _describe(err)
    except Exception as err:  # noqa: BLE001 - any other failure of codegen is a compile error
        code, message = MeasureErrorNo.COMPILE_HOST, _describe(err)
    return "", int(code), message, time.perf_counter() - start


def _describe(err: BaseException) -> str:
    """``Type: message``; errors not raised on purpose by this library get a traceback tail."""
    text = f"{type(err).__name__}: {err}"
    if not type(err).__module__.startswith("scheduler_core"):
        text += "\n" + "".join(traceback.format_exception(type(err), err, err.__traceback__)[-4:])
    return text
