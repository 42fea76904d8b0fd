"""The CPU passes, run once per program: ``run_passes`` (loop partition, unroll, then vectorize).

Shared by ``build_module`` (CPU builds, ``lower``) and ``cuda_build`` (the CPU emulation of a
kernel-form program); ``PrimFunc.attrs[PASSES_DONE]`` marks a program they already ran on.
"""

from __future__ import annotations

from dataclasses import replace

from scheduler_core.ir import tir as T
from scheduler_core.passes import SMALL_LOOP_STEPS, partition_loops, unroll_loops, vectorize_loops

PASSES_DONE = "passes_done"  # PrimFunc.attrs key set once the passes have run


def run_passes(func: T.PrimFunc) -> T.PrimFunc:
    """Partition the loops of ``func`` at the end of their guard-free prefixes (non-divisible
    splits), then unroll and vectorize the annotated loops (a no-op when already done);
    small constant loops are unrolled too (``SMALL_LOOP_STEPS``: LLVM's unroller is off)."""
    if func.attrs.get(PASSES_DONE):
        return func
    body = partition_loops(func.body)
    body = vectorize_loops(unroll_loops(body, small_loop_steps=SMALL_LOOP_STEPS))
    return replace(func, body=body, attrs={**func.attrs, PASSES_DONE: True})
