"""A search on a cuda SearchTask runs the whole pipeline without a GPU: GPU sketches, thread
binding, evolution, builds (kernel form, CUDA C, nvcc, validity checks); the runner then
records that there is no device (RUNTIME_DEVICE) instead of a time, and the best
recorded schedule applies and emulates to the reference."""

from __future__ import annotations

import numpy as np
import pytest

import scheduler_core as sc
from scheduler_core.driver.nvcc import nvcc_available
from scheduler_core.measure.data import MeasureErrorNo
from sketch_rules import SketchPolicyParams
from tests.workloads import matmul_add

NO_NVCC = nvcc_available()


# slow tier: twice in the fast tier under xdist (2026-11-28), the emulation of the candidate this
# test picks aborted inside LLVM's finalize_object and took its worker down (xdist then hung); the
# candidate depends on which builds pass under load.  Root cause not found yet.
@pytest.mark.slow
@pytest.mark.skipif(NO_NVCC is not None, reason=f"nvcc: {NO_NVCC}")
@pytest.mark.skipif(sc.cuda(0).exist, reason="a CUDA device is present: the runner would time the kernels")
def test_cuda_search_builds_every_candidate_and_records_no_device(tmp_path):
    log = tmp_path / "cuda.json"
    task = sc.SearchTask(compute_dag=sc.ComputeDAG(matmul_add(64, 64, 64)), target="cuda -arch=sm_80")
    policy = sc.SketchPolicy(task, sc.RandomModel(), params=SketchPolicyParams(population=16, num_iters=1),
                             seed=0, verbose=0)
    # timeout_s: nvcc on a loaded 2-core machine can pass the default 10 s per build
    task.tune(sc.TuningOptions(num_measure_trials=4, num_measures_per_round=4, verbose=0, timeout_s=120,
                               measure_callbacks=[sc.RecordToFile(str(log))]), search_policy=policy)
    records = list(sc.load_records(str(log)))
    assert len(records) == 4
    errors = {MeasureErrorNo(r.error_no) for _, r in records}
    assert errors <= {MeasureErrorNo.RUNTIME_DEVICE, MeasureErrorNo.INSTANTIATION_ERROR}, errors
    assert MeasureErrorNo.RUNTIME_DEVICE in errors   # built, then refused to fake a time
    inp = next(i for i, r in records if r.error_no == MeasureErrorNo.RUNTIME_DEVICE)
    mod = sc.build(inp.state, list(inp.state.dag.tensors), "cuda")  # a measured candidate is correct
    rng = np.random.default_rng(0)
    a, b, c = (rng.random((64, 64), dtype=np.float32) for _ in range(3))
    out = np.zeros((64, 64), np.float32)
    mod.emulate(a, b, c, out)
    np.testing.assert_allclose(out, a @ b + c, rtol=1e-4)
