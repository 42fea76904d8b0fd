"""Tuner callbacks (TVM's ``autotvm/tuner/callback.py``): ``callback(tuner, inputs, results)`` after each batch.

    tuner.tune(n_trial=32, measure_option=opt,
               callbacks=[autotvm.callback.log_to_file("rgb2yuv.log"), autotvm.callback.progress_bar(32)])
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

from scheduler_core.measure.data import MeasureErrorNo

from .record import append_records


def log_to_file(file_out: str | os.PathLike, protocol: str = "json"):
    """A callback appending every measured config to ``file_out`` as template records
    (:mod:`scheduler_core.autotvm.record`); ``protocol`` must be "json" (TVM's default)."""
    if protocol != "json":
        raise ValueError(f"log_to_file: only protocol='json' is written, got {protocol!r}")
    path = str(file_out)

    def _callback(tuner: Any, inputs: list, results: list) -> None:
        append_records(path, inputs, results)

    _callback.filename = path  # type: ignore[attr-defined]
    return _callback


def progress_bar(total: int, prefix: str = "", si_prefix: str = "G", stream: Any = None):
    """A callback printing ``prefix Current/Best: x/y GFLOPS | Progress: (i/total) | t s`` on one line."""
    scale = {"": 1.0, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}.get(si_prefix)
    if scale is None:
        raise ValueError(f"progress_bar: si_prefix must be one of '', K, M, G, T; got {si_prefix!r}")
    state = {"ct": 0, "best": 0.0, "cur": 0.0, "start": time.time()}
    out = stream or sys.stdout

    def _callback(tuner: Any, inputs: list, results: list) -> None:
        flop = tuner.task.flop
        for res in results:
            state["ct"] += 1
            ok = res.error_no == MeasureErrorNo.NO_ERROR and res.cost
            state["cur"] = flop / res.cost if ok else 0.0
            state["best"] = max(state["best"], state["cur"])
        out.write(f"\r{prefix} Current/Best: {state['cur'] / scale:7.2f}/{state['best'] / scale:7.2f} "
                  f"{si_prefix}FLOPS | Progress: ({state['ct']}/{total}) | {time.time() - state['start']:.2f} s")
        if state["ct"] >= total or not tuner.has_next():
            out.write(" Done.\n")
        out.flush()

    return _callback


__all__ = ["log_to_file", "progress_bar"]
