"""The per-kind backend table and the one Program path: both kinds prove bounds after the passes,
build through their backend, and name their artifacts and queues from the table."""

from __future__ import annotations

import pytest

import scheduler_core as sc
from scheduler_core.base.target import Target, TargetKind, default_cuda_arch
from scheduler_core.driver import program as program_mod
from scheduler_core.driver.backend import BACKENDS, backend_of
from scheduler_core.driver.pipeline import PASSES_DONE
from scheduler_core.driver.program import program_from_state
from scheduler_core.runtime.cuda_module import CudaModule
from scheduler_core.runtime.module import Module
from tests.scheduler_core.gpu import gpu_schedules as G


def test_every_kind_has_a_backend():
    assert set(BACKENDS) == set(TargetKind)
    cpu, gpu = backend_of("llvm"), backend_of(Target.parse("cuda -arch=sm_90"))
    assert (cpu.artifact_ext, cpu.device_errors, cpu.rewrites_layout) == ("so", False, True)
    assert (gpu.artifact_ext, gpu.device_errors, gpu.rewrites_layout) == ("cubin", True, False)
    assert cpu.queue_device(Target.parse("llvm")) is None
    assert gpu.queue_device(Target.parse("cuda -arch=sm_90")) == "sm_90"
    assert gpu.queue_device(Target.parse("cuda")) == default_cuda_arch()  # sm_80 without a GPU


@pytest.mark.parametrize("target,module_type", [("llvm", Module), ("cuda -arch=sm_80", CudaModule)])
def test_bounds_are_proved_after_the_passes_for_every_kind(monkeypatch, target, module_type):
    checked = []
    real = program_mod.check_bounds
    monkeypatch.setattr(program_mod, "check_bounds", lambda func: checked.append(func) or real(func))
    case = G.matmul_shared()
    program = program_from_state(case.state, target)
    assert len(checked) == 1 and checked[0].attrs.get(PASSES_DONE)
    module = program.build()
    assert isinstance(module, module_type) and module is program.build()
    arrays = case.arrays()
    (module.emulate if module_type is CudaModule else module)(*arrays)
    case.check(arrays)


def test_cuda_build_refuses_a_program_the_cpu_passes_ran_on():
    case = G.matmul_shared()
    passed = sc.lower(case.state, list(case.state.dag.tensors))
    with pytest.raises(sc.BuildError, match="before the CPU passes"):
        sc.build(passed, target="cuda")


@pytest.mark.parametrize("runtime,symbol,other", [("gomp", b"GOMP_parallel", b"__autosched_parallel_pool"),
                                                  ("pool", b"__autosched_parallel_pool", b"GOMP_parallel")])
def test_build_options_travel_to_the_builder_workers(runtime, symbol, other):
    from scheduler_core.base.build_config import BuildConfig
    from scheduler_core.dag.task import Task
    from scheduler_core.measure.data import MeasureErrorNo, MeasureInput
    from tests.scheduler_core.driver.test_program import _tiled_state

    state = _tiled_state(32)
    inp = MeasureInput(Task.create(state.dag, "llvm -num-cores=2"), state)
    with sc.LocalBuilder(timeout_s=120, n_parallel=1, config=BuildConfig(parallel_runtime=runtime)) as builder:
        (res,) = builder.build([inp])
        assert res.error_no == MeasureErrorNo.NO_ERROR, res.error_msg
        with open(res.filename, "rb") as f:
            data = f.read()
        assert symbol in data and other not in data
