"""LocalRunner: time built programs in a worker process, optionally checking their answers.

    BuildResult(filename, args) --worker: load_module, inputs, [check], time_evaluator-->
        MeasureResult(costs_s per repeat, error_no, error_msg, all_cost_s, timestamp)

TVM's ``auto_scheduler.LocalRunner`` (Ansor section 6).  Runs are serial (one
worker) so that measurements do not disturb each other.  A program that
segfaults, aborts or is killed for memory gives RUNTIME_DEVICE; one that runs past
``timeout_s`` is killed and gives RUN_TIMEOUT; either way the worker is replaced
and the next input is measured.

Inputs are random arrays drawn from a fixed seed (floats uniform in [0, 1),
integers in [1, 8), bools fair), so every schedule of a workload sees the same
data.  With ``check_correctness`` the expected outputs come from the numpy
reference evaluator, computed once per workload in *this* process (it runs no
generated code) and handed to the worker as an ``.npz`` file; the outputs of the
program's first call (output buffers pre-filled with NaN, so unwritten elements
show) must match within rtol 1e-3, atol 1e-4 (float32/float64; float16: 1e-2,
1e-3; other dtypes exactly), otherwise WRONG_ANSWER.

Timing: the first call is the warm-up (and, when it takes SLOW_CALL_S or more, the
measurement itself); then ``repeat`` rounds of ``time_evaluator`` with ``min_repeat_ms``.
When the repeats disagree by more than NOISY_SPREAD (``(max - min) / median``) the machine
is judged noisy and the program is timed again (up to MAX_REMEASURES more times; the round
with the smallest spread is kept): ``costs`` in the record are that round's repeats, and the
search ranks programs by their median (``MeasureResult.cost``).

The worker is a sandbox of sorts (belt and braces around generated code): it runs
without the service's credentials in its environment (``popen_pool.worker_environment``:
no REDIS_URL, AUTOSCHED_API_TOKEN or *TOKEN*/*PASSWORD*/*SECRET*/*KEY* variables), with
no core files (RLIMIT_CORE = 0), a bounded address space (RLIMIT_AS = ``mem_limit_bytes``,
by default half the machine's physical memory, at least 1 GiB: a program that
allocates more gets NULL from malloc or dies, giving RUNTIME_DEVICE, instead of
taking the machine's memory) and a CPU-time bound per run (RLIMIT_CPU,
:func:`cpu_limit_s`; SIGXCPU past it, a backstop behind the wall-clock timeout).

A ``cuda`` task is measured on CUDA device 0 (:func:`run_cuda_in_worker`): the worker
rebuilds the program's launch description from the input's steps
(``driver.program.program_from_steps``, as the builder), checks it against the limits the device itself
reports (``cuda_driver.device_hardware_params``: a program the target allowed but this GPU
cannot launch is an INSTANTIATION_ERROR, never launched), loads the builder's cubin, copies the inputs to
the GPU and times ``CudaModule.time_evaluator`` (CUDA events); with ``check_correctness``
the outputs are compared as above first.  It runs in a second worker without the
address-space limit (the CUDA driver reserves far more virtual memory than it uses).  Where
there is no usable CUDA device (no driver, no GPU, or pycuda missing) nothing is run: the
result is RUNTIME_DEVICE with a message saying why, never a made-up time.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from scheduler_core.base.bounded_cache import BoundedCache
from scheduler_core.base.errors import InvalidTargetError, SchedulerCoreError
from scheduler_core.base.target import Target
from scheduler_core.dag.reference import evaluate
from scheduler_core.dag.tensor import PlaceholderOp
from scheduler_core.driver.gpu_validity import gpu_program_problems
from scheduler_core.driver.program import program_from_steps
from scheduler_core.ir.simplify import const_value
from scheduler_core.runtime import load_module, ndarray
from scheduler_core.runtime.cuda_driver import device_hardware_params
from scheduler_core.runtime.device import cuda, cuda_unavailable_reason
from scheduler_core.runtime.timer import check_timing_args

from .data import (
    FAILED_COST_S,
    BuildResult,
    MeasureErrorNo,
    MeasureInput,
    MeasureResult,
    failed_result,
    input_payload,
    spread_of,
)
from .local_builder import LocalBuilder, cached_task
from .popen_pool import PopenPool, WorkerLimits

_WORKER_FUNC = "scheduler_core.measure.local_runner:run_in_worker"
_CUDA_WORKER_FUNC = "scheduler_core.measure.local_runner:run_cuda_in_worker"
MAX_RUNS_PER_WORKER = 200   # a runner worker is replaced after this many runs (loaded .so files pile up)
INPUT_SEED = 0              # seed of the random input arrays
MEM_LIMIT_FRACTION = 0.5    # default RLIMIT_AS of a runner worker: this much of the physical memory
MIN_MEM_LIMIT_BYTES = 1 << 30  # ... but never less than 1 GiB
TOLERANCES = {"float16": (1e-2, 1e-3), "float32": (1e-3, 1e-4), "float64": (1e-3, 1e-4)}  # dtype -> (rtol, atol)


class LocalRunner:
    """Runs built programs one after another in a worker process.

    Parameters
    ----------
    timeout_s : float, seconds one run may take (loading, the correctness check
        and all timed calls); a longer one is killed and gives RUN_TIMEOUT
    number : int, calls per measurement (grows until a measurement lasts min_repeat_ms)
    repeat : int, measurements; ``costs`` has one entry (mean seconds per call) per repeat
    min_repeat_ms : float, milliseconds a measurement must at least last
    enable_cpu_cache_flush : bool, flush the CPU caches before each measurement
    check_correctness : bool, compare the outputs with the reference evaluator first
    mem_limit_bytes : int or None, the worker's address-space limit (RLIMIT_AS); None:
        :func:`default_mem_limit_bytes` (half the physical memory, at least 1 GiB); 0: none.
        It bounds the whole worker (Python, numpy, the inputs, the program), so it
        must leave room for more than the program's buffers.

    The worker also runs without secrets in its environment, without core files and with
    a CPU-time limit of :func:`cpu_limit_s` per run (see the module docstring).
    The meaning of number/repeat/min_repeat_ms is ``Module.time_evaluator``'s (TVM's).
    """

    def __init__(self, timeout_s: float = 10, number: int = 3, repeat: int = 1, min_repeat_ms: float = 100,
                 enable_cpu_cache_flush: bool = False, check_correctness: bool = False,
                 mem_limit_bytes: int | None = None):
        check_timing_args(number, repeat, min_repeat_ms)
        self.timeout_s = float(timeout_s)
        if mem_limit_bytes is None:
            mem_limit_bytes = default_mem_limit_bytes()
        if int(mem_limit_bytes) < 0:
            raise ValueError(f"mem_limit_bytes must be >= 0 (0: no limit), got {mem_limit_bytes}")
        self.mem_limit_bytes = int(mem_limit_bytes)
        limits = WorkerLimits(core_bytes=0, address_space_bytes=self.mem_limit_bytes or None,
                              cpu_s_per_task=cpu_limit_s(self.timeout_s))
        self.number, self.repeat, self.min_repeat_ms = int(number), int(repeat), float(min_repeat_ms)
        self.enable_cpu_cache_flush = bool(enable_cpu_cache_flush)
        self.check_correctness = bool(check_correctness)
        self._pool = PopenPool(1, preload=("scheduler_core.measure.local_runner",),
                               max_tasks_per_worker=MAX_RUNS_PER_WORKER, limits=limits)
        self._cuda_pool: PopenPool | None = None  # started on the first cuda run
        self._data_dir = tempfile.mkdtemp(prefix="autosched_run_")
        self._reference_files: dict = {}  # (workload_key, arg specs) -> (.npz path, error message)
        self._finalizer = weakref.finalize(self, shutil.rmtree, self._data_dir, True)

    def run(self, inputs: list[MeasureInput], build_results: list[BuildResult],
            verbose: int = 0) -> list[MeasureResult]:
        """Measure each built program; one MeasureResult per input, in order.

        A failed build passes through with its error_no and ``costs == (FAILED_COST_S,)``.
        verbose: 1 prints ``*`` per measurement and ``E`` after a failed one.
        """
        return self._run(inputs, build_results, self.check_correctness, self.number, self.repeat,
                         self.min_repeat_ms, verbose)

    def close(self) -> None:
        """End the workers and remove the reference data files."""
        self._pool.close()
        if self._cuda_pool is not None:
            self._cuda_pool.close()
        self._finalizer()

    def __enter__(self) -> LocalRunner:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- internals ----------------------------------------------------------
    def _run(self, inputs, build_results, check: bool, number: int, repeat: int, min_repeat_ms: float,
             verbose: int = 0) -> list[MeasureResult]:
        inputs, build_results = list(inputs), list(build_results)
        if len(inputs) != len(build_results):
            raise ValueError(f"{len(inputs)} inputs but {len(build_results)} build results")
        for target in {inp.task.target for inp, br in zip(inputs, build_results)
                       if br.error_no == MeasureErrorNo.NO_ERROR and isinstance(inp.task.target, Target)}:
            refuse_foreign_cpu(target)  # a failed build passes through as its error record
        results: list = [None] * len(inputs)
        jobs, job_index, cuda_jobs, cuda_index = [], [], [], []
        for k, (inp, br) in enumerate(zip(inputs, build_results)):
            job = self._job(inp, br, check, number, repeat, min_repeat_ms)
            if isinstance(job, MeasureResult):
                results[k] = job
            elif inp.task.target.is_gpu:
                cuda_jobs.append(job)
                cuda_index.append(k)
            else:
                jobs.append(job)
                job_index.append(k)
        outcomes = self._pool.map(_WORKER_FUNC, jobs, self.timeout_s) if jobs else []
        for k, outcome in zip(job_index, outcomes):
            results[k] = _to_measure_result(outcome, build_results[k].time_cost, self.timeout_s)
        for k, job in zip(cuda_index, cuda_jobs):
            # one at a time: a fault that poisons the CUDA context ends that worker, and the next
            # candidate gets a fresh one instead of inheriting the error
            outcome = self._cuda_workers().map(_CUDA_WORKER_FUNC, [job], self.timeout_s)[0]
            results[k] = _to_measure_result(outcome, build_results[k].time_cost, self.timeout_s)
            if results[k].error_no == MeasureErrorNo.RUNTIME_DEVICE and cuda_context_lost(results[k].error_msg):
                self._cuda_workers().close()
                self._cuda_pool = None
        if verbose >= 1:
            print("".join("*" if r.error_no == 0 else "*E" for r in results), flush=True)
        return results

    def _cuda_workers(self) -> PopenPool:
        if self._cuda_pool is None:
            limits = WorkerLimits(core_bytes=0, address_space_bytes=None,
                                  cpu_s_per_task=cpu_limit_s(self.timeout_s))
            self._cuda_pool = PopenPool(1, preload=("scheduler_core.measure.local_runner",),
                                        max_tasks_per_worker=MAX_RUNS_PER_WORKER, limits=limits)
        return self._cuda_pool

    def _job(self, inp: MeasureInput, br: BuildResult, check: bool, number, repeat, min_repeat_ms):
        """The worker's arguments for one input, or the MeasureResult when no run is needed."""
        if br.error_no != MeasureErrorNo.NO_ERROR:
            return failed_result(br.error_no, br.error_msg, br.time_cost, time.time())
        cuda = inp.task.target.is_gpu
        if cuda:
            reason = cuda_unavailable()
            if reason:
                return failed_result(MeasureErrorNo.RUNTIME_DEVICE,
                                     f"cannot measure a cuda program here: {reason}; it was built "
                                     f"({br.filename}) but not run, and no time is reported",
                                     br.time_cost, time.time())
        try:
            specs = arg_specs(br.args)
        except ValueError as err:
            return failed_result(MeasureErrorNo.INSTANTIATION_ERROR, str(err), br.time_cost, time.time())
        data_file = None
        if check:
            data_file, problem = self._reference_file(inp, specs)
            if problem:
                return failed_result(MeasureErrorNo.UNKNOWN_ERROR, problem, br.time_cost, time.time())
        if cuda:
            _, dag_json, target, records = input_payload(inp)
            return (dag_json, target, records, br.filename, specs, data_file, number, repeat, min_repeat_ms)
        return (br.filename, specs, data_file, number, repeat, min_repeat_ms, self.enable_cpu_cache_flush)

    def _reference_file(self, inp: MeasureInput, specs: list) -> tuple:
        """``(path of the .npz with inputs and expected outputs, "")`` for this workload, made
        once; ``(None, message)`` when the reference evaluator fails on it."""
        key = (str(inp.task.workload_key), repr(specs))
        if key not in self._reference_files:
            arrays = random_inputs(specs)
            try:
                expected = evaluate(inp.task.compute_dag, arrays)
            except (SchedulerCoreError, ValueError, ArithmeticError, MemoryError) as err:
                self._reference_files[key] = (None, f"reference evaluator failed: {type(err).__name__}: {err}")
            else:
                path = os.path.join(self._data_dir, f"ref{len(self._reference_files)}.npz")
                named = {f"in{k}": a for k, a in enumerate(arrays)}
                named.update({f"out{k}": c_array(a) for k, a in enumerate(expected)})
                np.savez(path, **named)
                self._reference_files[key] = (path, "")
        return self._reference_files[key]


def local_measurer(timeout_s: float = 10.0, min_repeat_ms: float = 40.0, repeat: int = 3,
                   check_correctness: bool = False) -> tuple[LocalBuilder, LocalRunner]:
    """``(LocalBuilder, LocalRunner)`` measuring on this machine with a search's timing options
    (``timeout_s`` seconds per build and per run, ``min_repeat_ms``, ``repeat``): the one place a
    search, a service job and a measurement worker make their measurer."""
    return (LocalBuilder(timeout_s=timeout_s),
            LocalRunner(timeout_s=timeout_s, min_repeat_ms=min_repeat_ms, repeat=repeat,
                        check_correctness=check_correctness))


def refuse_foreign_cpu(target) -> None:
    """InvalidTargetError when ``target`` is for a CPU with features this host lacks (``llvm
    -mcpu=skylake-avx512`` on an AVX2 machine): its programs would die with SIGILL or, worse,
    be timed as something they are not.  ``llvm`` means this host."""
    missing = target.missing_on_host()
    if missing:
        host = Target.parse("llvm")
        raise InvalidTargetError(
            f"target {str(target)!r} is for a CPU with {', '.join(missing)}, which this host's CPU "
            f"({host.mcpu}) lacks: its programs cannot be measured here. Tune for this host with 'llvm' "
            f"(the host CPU), or measure on a machine with that CPU (an 'autosched worker' there, "
            f"measure=queue)")


def cuda_unavailable() -> str:
    """Why CUDA device 0 cannot run measurements here (``""`` when it can): no driver, no
    device, or no pycuda (the optional extra ``.[cuda]``)."""
    reason = cuda_unavailable_reason(0)
    if reason:
        return f"no usable CUDA device ({reason})"
    if importlib.util.find_spec("pycuda") is None:
        return "pycuda is not installed (pip install 'autosched[cuda]'), so kernels cannot be launched"
    return ""


def default_mem_limit_bytes() -> int:
    """The default address-space limit of a runner worker: MEM_LIMIT_FRACTION of the physical
    memory (``os.sysconf``), at least MIN_MEM_LIMIT_BYTES; 8 GiB where it cannot be read."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 8 << 30
    if total <= 0:
        return 8 << 30
    return max(MIN_MEM_LIMIT_BYTES, int(total * MEM_LIMIT_FRACTION))


def cpu_limit_s(timeout_s: float) -> float:
    """CPU seconds one run may use in the worker: ``(4 * timeout_s + 10) * cpus``.

    RLIMIT_CPU counts the CPU time of every thread, and a parallel program keeps all the
    worker's CPUs busy, so the bound scales with the CPUs it may use; it never fires
    before the wall-clock ``timeout_s`` and only stops a run the timeout failed to stop.
    """
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    return (4.0 * float(timeout_s) + 10.0) * max(1, cpus)


def check_against_reference(inp: MeasureInput, build_result: BuildResult, timeout_s: float = 60.0,
                            runner: LocalRunner | None = None) -> MeasureResult:
    """Run ``build_result``'s program once in a worker and compare it with the reference evaluator.

    Returns a MeasureResult with NO_ERROR (``costs`` from one timed call, in
    seconds) or WRONG_ANSWER (``error_msg`` names the output and the largest
    difference); a program that crashes or hangs gives RUNTIME_DEVICE /
    RUN_TIMEOUT, and a failed build passes through.  ``runner``: reuse that
    runner's worker (its timeout_s applies) instead of starting a new one.
    The issue's rule "the best program of a search is always checked".
    """
    if runner is not None:
        return runner._run([inp], [build_result], True, 1, 1, 0.0)[0]
    with LocalRunner(timeout_s=timeout_s, number=1, repeat=1, min_repeat_ms=0, check_correctness=True) as own:
        return own._run([inp], [build_result], True, 1, 1, 0.0)[0]


def _to_measure_result(outcome, build_cost_s: float, timeout_s: float) -> MeasureResult:
    all_cost = float(build_cost_s) + outcome.wall_s
    now = time.time()
    if outcome.status == "ok":  # the worker's MeasureResult.to_json(); the wall time is the parent's
        # the timestamp is the worker's: when this candidate's run ended (as TVM's runner
        # stamps each input), not when the whole batch did
        return replace(MeasureResult.from_json(outcome.value), all_cost=all_cost)
    if outcome.status == "timeout":
        return failed_result(MeasureErrorNo.RUN_TIMEOUT, f"run exceeded timeout_s={timeout_s:g}: {outcome.value}",
                             all_cost, now)
    return failed_result(MeasureErrorNo.RUNTIME_DEVICE, f"runner {outcome.status}: {outcome.value}", all_cost, now)


# ---------------------------------------------------------------------------
# argument arrays (used in both processes)
# ---------------------------------------------------------------------------

def arg_specs(args) -> list:
    """``[(name, shape, dtype, is_output), ...]`` of the argument tensors, shapes as int lists
    (``[]`` for a zero-rank tensor; its arrays have shape ``()``, never ``(1,)``).

    Raises ValueError for a symbolic shape (such a workload cannot be measured/tuned).
    """
    specs = []
    for t in args:
        shape = [const_value(d) for d in t.shape]
        if any(not isinstance(d, int) for d in shape):
            raise ValueError(f"argument {t.name} has a symbolic shape {tuple(str(d) for d in t.shape)};"
                             " only concrete shapes can be measured (bind the variables first)")
        specs.append((t.name, shape, str(t.dtype), not isinstance(t.op, PlaceholderOp)))
    return specs


def c_array(a) -> np.ndarray:
    """``a`` (an array or numpy scalar) as a C-contiguous ndarray of the same shape.

    Unlike ``np.ascontiguousarray``, which returns at least one dimension, a zero-rank
    value stays zero-rank (shape ``()``), the shape of a zero-rank tensor's argument.
    """
    return np.asarray(a, order="C")


def random_inputs(specs: list, seed: int = INPUT_SEED) -> list:
    """Random arrays for the non-output arguments of ``specs``, in order (reproducible from ``seed``)."""
    rng = np.random.default_rng(seed)
    arrays = []
    for _, shape, dtype, is_output in specs:
        if is_output:
            continue
        kind = np.dtype(dtype).kind
        if kind == "f":
            a = rng.random(shape, dtype=np.float32 if dtype == "float32" else np.float64).astype(dtype, copy=False)
        elif kind in "iu":
            a = rng.integers(1, 8, size=shape).astype(dtype)
        else:
            a = rng.random(shape) < 0.5
        arrays.append(c_array(a))
    return arrays


def empty_outputs(specs: list) -> list:
    """Output buffers of the specs' shapes (``()`` for a zero-rank output): NaN for floats (so
    elements a program never writes show up), zeros otherwise."""
    return [np.full(shape, np.nan, dtype) if np.dtype(dtype).kind == "f" else np.zeros(shape, dtype)
            for _, shape, dtype, is_output in specs if is_output]


def compare_outputs(specs: list, got: list, expected: list) -> str:
    """``""`` when every output matches, else a message naming the first mismatching output."""
    names = [name for name, _, _, is_output in specs if is_output]
    for name, g, e in zip(names, got, expected):
        rtol, atol = TOLERANCES.get(str(g.dtype), (0.0, 0.0))
        if g.shape != e.shape:
            return f"output {name}: shape {g.shape}, expected {e.shape}"
        if g.dtype.kind == "f":
            ok = np.isclose(g, e.astype(g.dtype, copy=False), rtol=rtol, atol=atol, equal_nan=True)
        else:
            ok = g == e
        if not ok.all():
            bad = np.flatnonzero(~ok)
            diff = np.abs(g.astype(np.float64) - e.astype(np.float64)).ravel()
            worst = int(bad[np.argmax(np.nan_to_num(diff[bad], nan=np.inf))])
            idx = np.unravel_index(worst, g.shape)
            return (f"output {name}: {bad.size} of {g.size} elements differ from the reference "
                    f"(rtol={rtol:g}, atol={atol:g}); worst at {tuple(int(i) for i in idx)}: "
                    f"got {g.ravel()[worst].item()!r}, expected {e.ravel()[worst].item()!r}")
    return ""


# ---------------------------------------------------------------------------
# in the worker process
# ---------------------------------------------------------------------------

# per runner worker: .npz path or repr(specs) -> (inputs, expected outputs or None)
_DATA: BoundedCache[str, tuple[list, list | None]] = BoundedCache(2)


def _cached_data(specs: list, data_file: str | None) -> tuple:
    """``(input arrays, expected outputs or None)`` of a run: the reference file's, else random inputs."""
    def load() -> tuple[list, list | None]:
        if not data_file:
            return random_inputs(specs), None
        with np.load(data_file) as f:
            n_in = sum(1 for s in specs if not s[3])
            return [f[f"in{k}"] for k in range(n_in)], [f[f"out{k}"] for k in range(len(specs) - n_in)]
    return _DATA.get_or_make(data_file or repr(specs), load)


SLOW_CALL_S = 0.25  # seconds: a first call this slow is the measurement
NOISY_SPREAD = 0.15  # (max - min) / median of the repeats above which the machine is judged noisy
MAX_REMEASURES = 2  # extra timing rounds for a noisy program; the least spread round is kept


def worker_reply(error_no: int, error_msg: str, costs_s: Sequence[float] = ()) -> dict[str, Any]:
    """What a runner worker sends back: ``MeasureResult.to_json()`` (the one wire form of a result),
    with ``all_cost`` 0 and the worker's timestamp; the parent puts in the wall time it saw."""
    costs = tuple(float(c) for c in costs_s) or (FAILED_COST_S,)
    return MeasureResult(costs, int(error_no), error_msg, 0.0, time.time()).to_json()


def run_in_worker(filename: str, specs: list, data_file: str | None, number: int, repeat: int,
                  min_repeat_ms: float, enable_cpu_cache_flush: bool) -> dict[str, Any]:
    """Load ``filename``, [check it against ``data_file``], time it.  Runs in the runner worker.

    Returns :func:`worker_reply` (a MeasureResult's JSON form); a crash kills the process instead.
    """
    try:
        module = load_module(filename)
        inputs, expected = _cached_data(specs, data_file)
        outputs = empty_outputs(specs)
        ins, outs = iter(inputs), iter(outputs)
        args = [next(outs) if is_output else next(ins) for _, _, _, is_output in specs]
        if expected is not None:
            module(*args)
            message = compare_outputs(specs, outputs, expected)
            if message:
                return worker_reply(MeasureErrorNo.WRONG_ANSWER, message)
        # A slow candidate's timing is cut short (tinygrad's habit): one call already
        # shows it is far from the best, and timing it number x repeat more would
        # dominate the search's wall time.  The first call is also the warm-up.
        start = time.perf_counter()
        module(*args)
        first_s = time.perf_counter() - start
        if first_s >= SLOW_CALL_S:
            return worker_reply(MeasureErrorNo.NO_ERROR, "", (first_s,))
        evaluator = module.time_evaluator(module.entry_name, "cpu", number=number, repeat=repeat,
                                          min_repeat_ms=min_repeat_ms, enable_cpu_cache_flush=enable_cpu_cache_flush)
        return worker_reply(MeasureErrorNo.NO_ERROR, "", least_noisy_costs(lambda: evaluator(*args).results))
    except (Exception, MemoryError) as err:  # noqa: BLE001 - a failed run is a result
        return worker_reply(MeasureErrorNo.RUNTIME_DEVICE, f"{type(err).__name__}: {err}")


def least_noisy_costs(measure: Callable[[], tuple], noisy_spread: float = NOISY_SPREAD,
                      max_remeasures: int = MAX_REMEASURES) -> tuple:
    """Per-repeat seconds of one timing round (``measure()``), re-measured while the machine
    looks noisy.

    A round whose repeats disagree by more than ``noisy_spread`` (``(max - min) / median``)
    is taken again, up to ``max_remeasures`` more times; the round with the smallest spread
    is returned, so the record keeps the repeats it was judged by.  With a single repeat
    there is no spread and nothing is re-measured.
    """
    best = tuple(float(c) for c in measure())
    for _ in range(int(max_remeasures)):
        if spread_of(best) <= noisy_spread:
            break
        again = tuple(float(c) for c in measure())
        if spread_of(again) < spread_of(best):
            best = again
    return best


# CUDA errors after which the context is unusable for the rest of the process (CUDA's "sticky"
# errors: every later call in the process fails with the same error)
STICKY_CUDA_ERRORS = ("illegal memory access", "misaligned address", "illegal instruction",
                      "unspecified launch failure", "hardware stack error", "illegal address",
                      "invalid program counter", "context is destroyed")


def cuda_context_lost(message: str) -> bool:
    """Whether a measurement's error message is one of CUDA's sticky errors."""
    low = message.lower()
    return any(s in low for s in STICKY_CUDA_ERRORS)


def run_cuda_in_worker(dag_json: str, target: str, records: list, cubin_path: str, specs: list,
                       data_file: str | None, number: int, repeat: int, min_repeat_ms: float) -> dict[str, Any]:
    """Rebuild the cuda program of ``records`` with the builder's cubin, [check it against
    ``data_file``], time it on CUDA device 0 with CUDA events.  Runs in the cuda runner worker.

    Returns :func:`worker_reply` (a MeasureResult's JSON form).
    """
    try:
        with open(cubin_path, "rb") as f:
            cubin = f.read()
        module = program_from_steps(cached_task(dag_json, target), records).build(device_image=cubin)
        # The builder checked the target's limits; the device itself may allow less.
        problems = gpu_program_problems(module, target, device_hardware_params(0), registers=False)
        if problems:
            return worker_reply(MeasureErrorNo.INSTANTIATION_ERROR,
                                "InvalidGpuProgramError: not launched: " + "; ".join(p[4] for p in problems))
        dev = cuda(0)
        inputs, expected = _cached_data(specs, data_file)
        outputs = empty_outputs(specs)
        ins, outs = iter(inputs), iter(outputs)
        host = [next(outs) if is_output else next(ins) for _, _, _, is_output in specs]
        args = [ndarray.array(a, dev) for a in host]
        if expected is not None:
            module(*args)
            got = [a.numpy() for a, spec in zip(args, specs) if spec[3]]
            message = compare_outputs(specs, got, expected)
            if message:
                return worker_reply(MeasureErrorNo.WRONG_ANSWER, message)
        evaluator = module.time_evaluator(module.entry_name, dev, number=number, repeat=repeat,
                                          min_repeat_ms=min_repeat_ms)
        profile = evaluator(*args)
        return worker_reply(MeasureErrorNo.NO_ERROR, "", profile.results)
    except (Exception, MemoryError) as err:  # noqa: BLE001 - a failed run is a result
        return worker_reply(MeasureErrorNo.RUNTIME_DEVICE, f"{type(err).__name__}: {err}")
