"""``sc.build(schedule, args, "cuda")`` end to end without a GPU: a CudaModule whose CUDA C source
(seed 004's ``imported_modules[0].get_source()``) compiles with nvcc, and whose ``emulate`` runs
every kernel on the CPU with CUDA's semantics and matches the numpy reference, for every
hand-written GPU schedule of ``gpu_schedules.py`` (the seeds' GPU schedules among them)."""

from __future__ import annotations

import json

import numpy as np
import pytest

import scheduler_core as sc
from scheduler_core.base.errors import BuildError, DeviceRuntimeError, RuntimeArgumentError
from scheduler_core.driver.nvcc import nvcc_available, ptxas_info
from scheduler_core.runtime.cuda_module import CudaModule, run_host
from tests.scheduler_core.gpu import gpu_schedules as G

CASES = sorted(G.ALL_CASES)
NO_NVCC = nvcc_available()


@pytest.mark.parametrize("name", CASES)
def test_build_for_cuda_emulates_to_the_reference(name):
    case = G.ALL_CASES[name]()
    mod = sc.build(case.sch, case.args, target="cuda", name=case.name)
    assert isinstance(mod, CudaModule) and mod.imported_modules[0].type_key == "cuda"
    source = mod.imported_modules[0].get_source()
    assert "__global__" in source and f"{case.name}_kernel0" in source
    arrays = case.arrays()
    mod.emulate(*arrays)
    case.check(arrays)


@pytest.mark.skipif(NO_NVCC is not None, reason=f"nvcc: {NO_NVCC}")
@pytest.mark.parametrize("name", ["matmul_shared", "vector_add", "scan_cumsum"])
def test_cuda_module_saves_source_ptx_and_launch_description(name, tmp_path):
    case = G.ALL_CASES[name]()
    mod = sc.build(case.sch, case.args, target="cuda -arch=sm_80", name=case.name)
    written = mod.export_library(tmp_path / f"{name}.so")
    assert {p.rsplit(".", 1)[1] for p in written} >= {"cu", "ptx", "json"}
    launch = json.loads((tmp_path / f"{name}.json").read_text())
    assert launch["arch"] == "sm_80" and launch["kernels"]
    info = ptxas_info((tmp_path / f"{name}.ptx").read_bytes(), "sm_80")
    for k in launch["kernels"]:
        assert info[k["symbol"]]["registers"] > 0
        assert info[k["symbol"]]["shared_bytes"] == k["shared_bytes"]


def test_calling_a_cuda_module_on_host_arrays_says_to_use_a_gpu_array_or_emulate():
    case = G.vector_add()
    mod = sc.build(case.sch, case.args, target="cuda", name=case.name)
    with pytest.raises(RuntimeArgumentError, match="emulate"):
        mod(*case.arrays())
    with pytest.raises(DeviceRuntimeError, match="cannot be timed on cpu"):
        mod.time_evaluator(mod.entry_name, sc.cpu(0))
    with pytest.raises(BuildError, match="before the CPU passes"):
        sc.build(sc.lower(case.sch, case.args), target="cuda")


def test_cuda_arrays_need_a_gpu_here():
    if sc.cuda(0).exist:
        pytest.skip("a CUDA device is present")
    with pytest.raises(DeviceRuntimeError, match="cuda"):
        sc.nd.array(np.zeros(4, "float32"), sc.cuda(0))


def test_a_kernel_of_no_iterations_is_not_launched():
    # seed 004's vector add with n = 0: grid floordiv(0 + 63, 64) = 0 blocks; cuLaunchKernel
    # would answer "invalid argument", so the host code skips it (no kernels are even needed)
    case = G.vector_add()
    mod = sc.build(case.sch, case.args, target="cuda -arch=sm_80")
    buffers = {t.name: object() for t in case.args}
    run_host(mod.kernel_func, mod.launch["kernels"], {}, buffers, {"n": 0}, 0)
    with pytest.raises((KeyError, DeviceRuntimeError)):  # with n = 1 it launches (no pycuda, or no kernels)
        run_host(mod.kernel_func, mod.launch["kernels"], {}, buffers, {"n": 1}, 0)


def test_more_than_48_KiB_of_shared_memory_is_dynamic_shared_memory():
    # a 128x128 tile with a 64-deep reduction step: two 32 KiB shared tiles.  A block may
    # declare only 48 KiB statically (ptxas refuses more); above that the kernel carves its
    # buffers from one extern __shared__ array and the launch asks for the bytes (an sm_90
    # block may have 227 KiB with the opt-in the runtime sets)
    case = G.matmul_shared(M=128, N=128, K=128, tile=128, step=8, kt=64, fetch_threads=256)
    mod = sc.build(case.sch, case.args, target="cuda -arch=sm_90 -max_shared_memory_per_block=65536")
    source = mod.imported_modules[0].get_source()
    assert "extern __shared__ __align__(16) unsigned char" in source
    assert "__shared__ float" not in source
    (kernel,) = json.loads(mod.get_source())["kernels"]
    assert kernel["shared_bytes"] == kernel["dynamic_shared_bytes"] == 65536
    arrays = case.arrays()
    mod.emulate(*arrays)
    case.check(arrays)
    if NO_NVCC is None:
        info = ptxas_info(mod.imported_modules[0].get_source("ptx").encode(), "sm_90")
        assert info[kernel["symbol"]]["shared_bytes"] == 0  # nothing static left
    # a kernel within 48 KiB keeps its static arrays and asks for no dynamic memory
    small = G.matmul_shared()
    mod = sc.build(small.sch, small.args, target="cuda -arch=sm_90")
    assert "extern __shared__" not in mod.imported_modules[0].get_source()
    assert json.loads(mod.get_source())["kernels"][0]["dynamic_shared_bytes"] == 0


@pytest.mark.skipif(NO_NVCC is not None, reason=f"nvcc: {NO_NVCC}")
def test_an_arch_this_nvcc_dropped_is_named_with_the_ones_it_has():
    from scheduler_core.driver.nvcc import compile_cuda, nvcc_gpu_codes

    codes = nvcc_gpu_codes()
    assert "sm_80" in codes and codes == tuple(sorted(codes, key=lambda c: int(c[3:])))
    if "sm_70" in codes:
        pytest.skip("this nvcc still builds for sm_70")
    with pytest.raises(BuildError, match=r"(?s)Unsupported gpu architecture 'sm_70'.*compiles for sm_75"):
        compile_cuda('extern "C" __global__ void f(float* a) { a[0] = 1.f; }', arch="sm_70")
