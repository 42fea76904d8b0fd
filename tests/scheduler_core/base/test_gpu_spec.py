"""The one table of GPU tags and CUDA limits (scheduler_core.base.gpu_spec) against its users."""

from __future__ import annotations

from scheduler_core.base import gpu_spec as G
from scheduler_core.base.target import CUDA_ARCHS, Target
from scheduler_core.ir import tir as T


def test_tags_and_loop_kinds():
    assert G.GPU_TAGS == G.BLOCK_TAGS + G.THREAD_TAGS and len(set(G.GPU_TAGS)) == 6
    assert all(t.startswith("blockIdx.") for t in G.BLOCK_TAGS)
    assert all(t.startswith("threadIdx.") for t in G.THREAD_TAGS)
    assert set(G.GPU_LOOP_KINDS) <= set(T.LOOP_KINDS)
    assert set(G.MAX_LAUNCH_DIM) == set(G.GPU_TAGS)
    assert G.BLOCK_DIM_MAX == (1024, 1024, 64) and G.GRID_DIM_MAX == (2 ** 31 - 1, 65535, 65535)


def test_limits_agree_with_every_arch():
    """Every arch of the per-arch table has the shared limits: 1024 threads, 48 KiB static."""
    for arch, (threads, static_shared, *_rest) in CUDA_ARCHS.items():
        assert threads == G.CUDA_MAX_THREADS_PER_BLOCK, arch
        assert static_shared == G.CUDA_MAX_SHARED_MEMORY_PER_BLOCK, arch
        assert G.MAX_LAUNCH_DIM["threadIdx.x"] <= threads
    assert G.CUDA_DEFAULT_ARCH in CUDA_ARCHS
    assert Target.parse("cuda").arch == G.CUDA_DEFAULT_ARCH


def test_blackwell_archs_are_known():
    from scheduler_core.base.target import arch_of_compute_capability

    for arch, optin_kib in (("sm_100", 227), ("sm_103", 227), ("sm_110", 227), ("sm_120", 99), ("sm_121", 99)):
        lim = Target.parse(f"cuda -arch={arch}").cuda_limits()
        assert lim["max_dynamic_shared_memory_per_block"] == optin_kib * 1024
        assert lim["max_shared_memory_per_block"] == 48 * 1024
    assert arch_of_compute_capability("12.0") == "sm_120"
    assert arch_of_compute_capability("10.3") == "sm_103"
