"""A record on a cuda task becomes a program through the same path as on the CPU
(``driver.program``): the service's best schedule shows the kernel form, the artifacts are the
CUDA source, PTX and launch description, and the program emulates to the reference."""

from __future__ import annotations

from scheduler_core.driver.nvcc import nvcc_available
from scheduler_core.driver.program import program_from_state
from tests.scheduler_core.gpu import gpu_schedules as G


def test_program_of_a_cuda_state_is_the_kernel_form_and_its_module():
    case = G.matmul_shared()
    program = program_from_state(case.state, "cuda -arch=sm_90")
    assert "storage_scope = shared" in program.lowered and "__syncthreads" in program.lowered
    module = program.build()
    assert module is program.build() and module.lowered == program.lowered
    arrays = case.arrays()
    module.emulate(*arrays)
    case.check(arrays)
    device = module.imported_modules[0]
    assert device.arch == "sm_90" and '"kernels"' in device.launch_json()
    if nvcc_available() is None:
        assert b".target sm_90" in device.ptx()
