"""The one table of GPU thread tags and CUDA launch limits.

    BLOCK_TAGS, THREAD_TAGS, GPU_TAGS    the loop kinds bound to CUDA's grid and block axes
    VTHREAD, GPU_LOOP_KINDS              the virtual thread, and every GPU-bound loop kind
    MAX_LAUNCH_DIM                       tag -> CUDA's largest launch dimension of that tag
    CUDA_MAX_THREADS_PER_BLOCK, CUDA_MAX_SHARED_MEMORY_PER_BLOCK, CUDA_MAX_VECTOR_BYTES
                                         limits every arch shares
    CUDA_DEFAULT_ARCH                    the arch of a cuda target with no ``-arch``

The tags are TVM's thread axes (``te.thread_axis("threadIdx.x")``, the ``thread_tag`` of an
``IterVar``); ``vthread`` is TVM's virtual thread (a serial loop interleaved per thread).
The limits are NVIDIA's, from the CUDA C Programming Guide, "Technical Specifications per
Compute Capability" (the same for every arch from sm_50 to sm_90); the per-arch table of
``scheduler_core.base.target`` (``CUDA_ARCHS``) holds what differs between archs.
"""

from __future__ import annotations

__all__ = ["BLOCK_TAGS", "THREAD_TAGS", "GPU_TAGS", "VTHREAD", "GPU_LOOP_KINDS", "MAX_LAUNCH_DIM",
           "CUDA_MAX_THREADS_PER_BLOCK", "CUDA_MAX_SHARED_MEMORY_PER_BLOCK", "CUDA_MAX_VECTOR_BYTES",
           "CUDA_MAX_LOCAL_MEMORY_PER_THREAD",
           "CUDA_DEFAULT_ARCH",
           "BLOCK_DIM_MAX", "GRID_DIM_MAX"]

BLOCK_TAGS = ("blockIdx.x", "blockIdx.y", "blockIdx.z")
THREAD_TAGS = ("threadIdx.x", "threadIdx.y", "threadIdx.z")
GPU_TAGS = BLOCK_TAGS + THREAD_TAGS
VTHREAD = "vthread"
GPU_LOOP_KINDS = GPU_TAGS + (VTHREAD,)

# The largest launch dimension of each tag: a grid is at most (2^31 - 1, 65535, 65535)
# blocks, a block at most (1024, 1024, 64) threads.
MAX_LAUNCH_DIM = {"blockIdx.x": 2 ** 31 - 1, "blockIdx.y": 65535, "blockIdx.z": 65535,
                  "threadIdx.x": 1024, "threadIdx.y": 1024, "threadIdx.z": 64}
GRID_DIM_MAX = tuple(MAX_LAUNCH_DIM[t] for t in BLOCK_TAGS)  # blockIdx.x, .y, .z
BLOCK_DIM_MAX = tuple(MAX_LAUNCH_DIM[t] for t in THREAD_TAGS)  # threadIdx.x, .y, .z

CUDA_MAX_THREADS_PER_BLOCK = 1024  # threads in one block (the product of its dimensions)
CUDA_MAX_SHARED_MEMORY_PER_BLOCK = 48 * 1024  # bytes of static shared memory per block
CUDA_MAX_VECTOR_BYTES = 16  # float4 / int4: CUDA's widest single load or store
CUDA_MAX_LOCAL_MEMORY_PER_THREAD = 512 * 1024  # bytes of local memory one thread may use (every arch since sm_20)
CUDA_DEFAULT_ARCH = "sm_80"  # an A100
