"""What every benchmark here shares: the CPU model to record beside the figures, and the
timing loops (medians of repeated back-to-back calls, in seconds)."""

from __future__ import annotations

import platform
import time
from pathlib import Path

import numpy as np


def cpu_model() -> str:
    """The ``model name`` line of /proc/cpuinfo (``platform.processor()`` where there is none)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def cpu_isa() -> str:
    """The widest x86 vector ISA of this host: "avx512f", "avx2", "sse4_2" or "" (from /proc/cpuinfo)."""
    try:
        flags = next((line.split(":", 1)[1].split() for line in open("/proc/cpuinfo") if line.startswith("flags")), [])
    except OSError:
        return ""
    return next((isa for isa in ("avx512f", "avx2", "sse4_2") if isa in flags), "")


def best_of(fn, repeat: int = 7, number: int = 3) -> float:
    """Median over ``repeat`` runs of the mean time of ``number`` calls, in seconds."""
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        times.append((time.perf_counter() - t0) / number)
    return float(np.median(times))


def median_time_s(fn, min_s: float = 0.2, repeat: int = 7) -> float:
    """Median over ``repeat`` of the mean seconds per call of a loop lasting >= ``min_s``
    (one warm-up call first; the loop's call count grows until it lasts ``min_s``)."""
    fn()
    number = 1
    while True:
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        t = time.perf_counter() - t0
        if t >= min_s:
            break
        number = max(number * 2, int(number * min_s / max(t, 1e-9)))
    return best_of(fn, repeat, number)
