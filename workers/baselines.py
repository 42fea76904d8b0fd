"""The honest baseline of a task job and the machine's estimated peak, stored with the job.

    tune_job --finalize--> record_job_baselines(store, job_id, dag, target)
        time_baselines(dag, target)   numpy (and torch, when importable and not switched off)
                                      formulation of the DAG (scheduler_core.measure.baseline),
                                      timed here at the tuned program's thread count
        peak_estimate(target)         cores x float32 lanes x 2 (FLOPs per FMA) x FMA units x GHz
        --> job hash ``baselines`` (JSON list) and ``peak`` (JSON), read back as
            workers.records.BaselineTiming / PeakEstimate (GET /jobs/{id}, GET /tasks/{id}/curve)

They are timed once, at the end of a task job, in the worker that ran its search (never in an
HTTP request): a short budget (``BUDGET_S``: a warm-up and up to ``REPEATS`` calls), so that a
job of a small workload gains a few milliseconds and one of a large workload a few tenths of a
second.  A DAG with no numpy formulation (a gather, a scan, a symbolic shape) and a cuda target
store no baseline.  torch costs seconds to import in the job's process, so it is timed only when
``AUTOSCHED_BASELINE_TORCH`` is not ``0`` (the test suite sets 0; the default times it when torch
is installed).  A baseline that fails to build or run is logged and not stored: it never fails
the tuning job.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import asdict
from pathlib import Path

from scheduler_core.base.target import HardwareParams, Target
from scheduler_core.codegen.parallel import default_num_threads
from scheduler_core.dag.compute_dag import ComputeDAG
from scheduler_core.measure.baseline import NoBaselineError, numpy_program, torch_program
from scheduler_core.measure.baseline_timing import time_baseline
from scheduler_core.measure.local_runner import arg_specs, random_inputs

from .records import BaselineTiming, PeakEstimate
from .store import RedisStore

log = logging.getLogger(__name__)

BASELINE_TORCH_ENV = "AUTOSCHED_BASELINE_TORCH"  # "0" (or off/false/no): never time torch in a job
REPEATS = 5
BUDGET_S = 0.15  # seconds of timed calls per library (at least one call after the warm-up)
FMA_UNITS = 2    # FMA pipes per core: Intel since Haswell, AMD since Zen 2 (an estimate)
CPUFREQ_MAX = Path("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq")  # kHz
CPUINFO = Path("/proc/cpuinfo")


def torch_wanted() -> bool:
    """Whether a job times the torch baseline: ``AUTOSCHED_BASELINE_TORCH`` is not 0/off/false/no."""
    return os.environ.get(BASELINE_TORCH_ENV, "").strip().lower() not in ("0", "off", "false", "no")


def tuned_threads(target: Target) -> int:
    """Threads the tuned program of ``target`` runs on: its ``-num-cores``, else this process's
    default (OMP_NUM_THREADS, else the CPUs of its affinity mask)."""
    return target.num_cores or default_num_threads()


def time_baselines(dag: ComputeDAG, target: str, torch: bool | None = None) -> list[BaselineTiming]:
    """The numpy and (``torch``: default :func:`torch_wanted`, and only when torch is installed)
    torch baselines of ``dag``, each the median seconds of up to REPEATS calls within BUDGET_S
    after a warm-up, on the measurement's random inputs at :func:`tuned_threads` threads.

    Returns [] for a cuda target (its baseline would run on a GPU), a symbolic shape, or a DAG
    with no numpy formulation (NoBaselineError; torch is then not tried either)."""
    parsed = Target.parse(target)
    if parsed.is_gpu:
        return []
    try:
        specs = arg_specs(list(dag.tensors))
        programs = [numpy_program(dag)]
        if torch_wanted() if torch is None else torch:
            program = torch_program(dag)
            if program is not None:
                programs.append(program)
    except (NoBaselineError, ValueError) as err:
        log.info("no baseline: %s", err)
        return []
    threads = tuned_threads(parsed)
    inputs = random_inputs(specs)
    return [BaselineTiming(p.library, p.formula, time_baseline(p, inputs, threads, repeats=REPEATS, budget_s=BUDGET_S),
                           threads) for p in programs]


def cpu_ghz() -> tuple[float, str] | None:
    """``(GHz, where it was read)``: the CPU's maximum frequency from cpufreq's ``cpuinfo_max_freq``,
    else the highest ``cpu MHz`` of /proc/cpuinfo (what the kernel reports now, which may be below
    the boost clock); None where neither is readable."""
    try:
        return int(CPUFREQ_MAX.read_text().split()[0]) / 1e6, "cpufreq cpuinfo_max_freq"
    except (OSError, ValueError, IndexError):
        pass
    try:
        mhz = [float(line.split(":", 1)[1]) for line in CPUINFO.read_text().splitlines()
               if line.lower().startswith("cpu mhz")]
    except (OSError, ValueError):
        return None
    return (max(mhz) / 1e3, "/proc/cpuinfo cpu MHz") if mhz else None


def peak_estimate(target: str) -> PeakEstimate | None:
    """An estimate of the float32 peak of this machine for ``target``, in GFLOP/s: threads of the
    tuned program x float32 lanes of the target's vector unit (HardwareParams.vector_unit_bytes / 4)
    x 2 FLOPs per FMA x FMA_UNITS x GHz (:func:`cpu_ghz`).  Not a measurement (``benchmarks/fma_peak.py``
    measures one); None for a cuda target or when no frequency is readable."""
    parsed = Target.parse(target)
    ghz = None if parsed.is_gpu else cpu_ghz()
    if ghz is None:
        return None
    threads = tuned_threads(parsed)
    lanes = max(1, HardwareParams.for_target(parsed).vector_unit_bytes // 4)
    gflops = threads * lanes * 2 * FMA_UNITS * ghz[0]
    how = (f"estimate: {threads} cores x {lanes} float32 lanes x 2 FLOPs per FMA x {FMA_UNITS} FMA units x "
           f"{ghz[0]:.3g} GHz ({ghz[1]})")
    return PeakEstimate(gflops, how)


def record_job_baselines(store: RedisStore, job_id: str, dag: ComputeDAG, target: str) -> list[BaselineTiming]:
    """Time the baselines of ``dag`` (:func:`time_baselines`) and estimate the peak
    (:func:`peak_estimate`), and store them in the job hash (``baselines``, ``peak``; nothing for
    what there is none of).  Returns the timings.  Any failure is logged and stores nothing."""
    try:
        timings = time_baselines(dag, target)
        peak = peak_estimate(target)
    except Exception as err:  # noqa: BLE001 - a baseline must never fail the tuning job
        log.warning("baselines not timed: %s: %s", type(err).__name__, err)
        return []
    fields = {}
    if timings:
        fields["baselines"] = json.dumps([asdict(t) for t in timings])
        log.info("baselines at %d threads: %s", timings[0].threads,
                 "; ".join(f"{t.library} {t.formula} {t.seconds * 1e3:.4g} ms" for t in timings))
    if peak is not None:
        fields["peak"] = json.dumps(asdict(peak))
    if fields:
        store.update_job(job_id, **fields)
    return timings
