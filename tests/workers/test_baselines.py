"""workers.baselines: the numpy (and torch) baseline a task job stores, and the peak estimate.

The end-to-end path (a real job through a real RQ worker stores the matmul's numpy baseline, a
gather's job stores none, the dashboard draws it) is tests/api/test_dashboard_browser.py; here
the pieces, in this process.
"""

from __future__ import annotations

import importlib.util

import pytest

from scheduler_core import te
from scheduler_core.dag.compute_dag import ComputeDAG
from tests.workloads import matmul_add
from workers.baselines import cpu_ghz, peak_estimate, time_baselines
from workers.job_state import JobState
from workers.records import BaselineTiming, JobRecord, PeakEstimate


def _gather() -> ComputeDAG:
    A = te.placeholder((50,), name="A")
    idx = te.placeholder((8,), name="idx", dtype="int32")
    return ComputeDAG([A, idx, te.compute((8,), lambda i: A[idx[i]], name="G")])


def test_matmul_gets_a_numpy_baseline_at_the_targets_threads():
    [numpy_t] = time_baselines(ComputeDAG(matmul_add(32, 32, 32)), "llvm -num-cores=1", torch=False)
    assert numpy_t.library == "numpy" and numpy_t.formula == "out = (A @ B) + C"
    assert 0 < numpy_t.seconds < 0.05 and numpy_t.threads == 1


def test_no_formulation_no_cpu_baseline_for_cuda():
    assert time_baselines(_gather(), "llvm", torch=False) == []
    assert time_baselines(ComputeDAG(matmul_add(8, 8, 8)), "cuda -arch=sm_80", torch=False) == []
    assert peak_estimate("cuda -arch=sm_80") is None


def test_peak_estimate_says_how():
    peak = peak_estimate("llvm -num-cores=2")
    if cpu_ghz() is None:
        assert peak is None
        return
    ghz, _ = cpu_ghz()
    assert peak is not None and peak.gflops == pytest.approx(2 * 8 * 2 * 2 * ghz, rel=1.0)  # lanes: 4, 8 or 16
    assert peak.how.startswith("estimate: 2 cores x ") and "FMA" in peak.how and "GHz" in peak.how


def test_job_record_keeps_them():
    job = JobRecord("j", "t", JobState.finished, first_trials={"t": 4},
                    baselines=(BaselineTiming("numpy", "out = (A @ B) + C", 1.5e-3, 2),),
                    peak=PeakEstimate(150.0, "estimate"))
    assert JobRecord.from_hash(job.to_hash()) == job
    bare = JobRecord("j", "t", JobState.queued)
    assert not {"baselines", "peak", "first_trials"} & set(bare.to_hash())  # the old layout, unchanged
    assert JobRecord.from_hash(bare.to_hash()) == bare


@pytest.mark.slow  # imports torch (seconds)
@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed")
def test_torch_baseline_when_asked():
    timings = time_baselines(ComputeDAG(matmul_add(16, 16, 16)), "llvm", torch=True)
    assert [t.library for t in timings] == ["numpy", "torch"]
    assert timings[1].formula == "out = torch.addmm(C, A, B)" and timings[1].seconds > 0
