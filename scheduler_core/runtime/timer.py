"""Timing compiled functions with TVM's ``time_evaluator`` semantics.

    (raw ctypes function, validated call arguments) --time_calls--> ProfileResult(mean, results)

One warm-up call, then ``repeat`` measurements; each runs the function
``number`` times back to back and records the mean seconds per call.  With
``min_repeat_ms > 0`` the ``number`` grows (by at least the golden ratio, or to
the count the last measurement predicts) until one measurement lasts at least
``min_repeat_ms``; the grown ``number`` carries over to later repeats, as in
TVM's ``WrapTimeEvaluator``.  The timed loop only calls the ctypes function and
ORs its return codes: arguments are checked and converted before timing.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from scheduler_core.base.errors import check_return_code

CACHE_FLUSH_BYTES = 64 * 1024 * 1024  # larger than the last-level cache of the machines we target
_GOLDEN_RATIO = 1.618
_MAX_ZERO_TIME_MEASUREMENTS = 100


class ProfileResult(NamedTuple):
    """TVM's ``ProfileResult``: ``mean`` seconds per call and the per-repeat means (seconds)."""

    mean: float
    results: tuple

    @property
    def median(self) -> float:
        """Median of ``results`` in seconds."""
        return float(np.median(self.results))


class CacheFlusher:
    """Writes a 64 MB scratch array to push the kernel's data out of the CPU caches.

    TVM's ``cache_flush_cpu_non_first_arg`` in spirit: called before each repeat
    so that every measurement starts from cold caches.
    """

    def __init__(self, nbytes: int = CACHE_FLUSH_BYTES):
        self._scratch = np.zeros(nbytes // 8, dtype=np.float64)
        self._step = 0.0

    def __call__(self) -> None:
        self._step += 1.0
        self._scratch.fill(self._step)


def check_timing_args(number: int, repeat: int, min_repeat_ms: float) -> None:
    """Raise ``ValueError`` unless ``number >= 1``, ``repeat >= 1`` and ``min_repeat_ms >= 0``."""
    if int(number) < 1 or int(repeat) < 1:
        raise ValueError(f"number and repeat must be >= 1, got number={number}, repeat={repeat}")
    if min_repeat_ms < 0:
        raise ValueError(f"min_repeat_ms must be >= 0, got {min_repeat_ms}")


def time_calls(fn: Callable, call_args: tuple, number: int = 10, repeat: int = 1,
               min_repeat_ms: float = 0.0, flush: Callable[[], None] | None = None) -> ProfileResult:
    """Time ``fn(*call_args)`` (a ctypes function returning int32, 0 = success).

    number: calls per measurement (may grow, see the module docstring).
    repeat: measurements recorded.  min_repeat_ms: milliseconds one measurement
    must at least last (0: no minimum).  flush: called before each measurement
    (outside the timed region), e.g. a :class:`CacheFlusher`.
    Returns a ProfileResult in seconds.  Raises ``DeviceRuntimeError`` when a call
    returns nonzero.
    """
    check_timing_args(number, repeat, min_repeat_ms)
    _raise_on_failure(fn(*call_args))  # warm-up: page faults, lazy symbol binding, thread pool start
    number, results = int(number), []
    for _ in range(int(repeat)):
        if flush is not None:
            flush()
        duration_s, zero_times = 0.0, 0
        while True:
            if duration_s > 0.0:
                per_call_ms = duration_s * 1e3 / number
                number = int(max(min_repeat_ms / per_call_ms + 1, number * _GOLDEN_RATIO))
            duration_s = _timed_loop(fn, call_args, number)
            zero_times += duration_s == 0.0
            if duration_s * 1e3 >= min_repeat_ms or zero_times >= _MAX_ZERO_TIME_MEASUREMENTS:
                break
        results.append(duration_s / number)
    return ProfileResult(float(np.mean(results)), tuple(results))


def _timed_loop(fn: Callable, call_args: tuple, number: int) -> float:
    """Seconds taken by ``number`` back-to-back calls; raises if any call failed."""
    failed = 0
    start = time.perf_counter()
    for _ in range(number):
        failed |= fn(*call_args)
    elapsed = time.perf_counter() - start
    _raise_on_failure(failed)
    return elapsed


def _raise_on_failure(code: int) -> None:
    if code != 0:
        check_return_code("the compiled function (being timed)", code)
