"""Tuned programs beside numpy and PyTorch, in one process, on eight workloads.

W1 matmul+bias 1024^3 (layout-free B), W2 conv2d 1x64x56x56 3x3 pad 1 + bias + relu,
W3 row softmax 1024x1024, W4 RGB->YUV 1920x1080, W5 conv2d stride 2 (1x64x56x56 -> 128),
W6 depthwise conv2d 1x64x56x56 3x3, W7 layer norm 1024x1024, W8 batch matmul 16x128x128x128.

Each workload is tuned once up to the largest trial count; the best program within the
first N trials (N in --trials, e.g. 64 and 200) is built, checked against numpy and timed
(time_evaluator, 200 ms per repeat, median of 7) beside numpy and PyTorch (when installed,
torch.set_num_threads(2)) in this process.  With --busy, the same programs are timed again
while one busy single-thread process of another session runs (started with setsid: Linux
groups CPU shares per session).  The machine's FMA peak (benchmarks/fma_peak.py) is measured
first, so W1's GFLOP/s can be read as a share of it.

    python benchmarks/compare.py [--trials 64,200] [--workloads W1,W3] [--busy]

Writes benchmarks/results/compare.json and benchmarks/results/compare.md (a table of ratios).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from bench_util import cpu_model, median_time_s  # same folder

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import fma_peak  # noqa: E402  (same folder)
from tune import matmul_add  # noqa: E402  (same folder: W1 with B layout-free)

import scheduler_core as sc  # noqa: E402
from tests.workloads import (  # noqa: E402  (the test suite's DAG library)
    batch_matmul,
    conv2d_nchw,
    depthwise_conv2d,
    layer_norm,
    rgb_to_yuv,
    softmax,
)

try:
    import torch
    import torch.nn.functional as F
except ImportError:  # PyTorch is an optional baseline
    torch = None

YUV = np.array([[0.257, -0.148, 0.439], [0.504, -0.291, -0.368], [0.098, 0.439, -0.071]], np.float32)


# -- numpy / torch baselines (inputs in the DAG's argument order, output excluded) -------------

def _np_conv(data, kernel, stride):
    n, c, h, w = data.shape
    co, _, kh, kw = kernel.shape
    p = np.pad(data, ((0, 0), (0, 0), (1, 1), (1, 1)))
    oh, ow = (h + 2 - kh) // stride + 1, (w + 2 - kw) // stride + 1
    cols = np.lib.stride_tricks.sliding_window_view(p, (kh, kw), axis=(2, 3))[:, :, ::stride, ::stride]
    cols = cols[:, :, :oh, :ow].transpose(0, 2, 3, 1, 4, 5).reshape(n * oh * ow, c * kh * kw)
    return (cols @ kernel.reshape(co, -1).T).reshape(n, oh, ow, co).transpose(0, 3, 1, 2)


def _np_depthwise(data, kernel):
    p = np.pad(data, ((0, 0), (0, 0), (1, 1), (1, 1)))
    win = np.lib.stride_tricks.sliding_window_view(p, (3, 3), axis=(2, 3))
    return np.einsum("nchwyx,cyx->nchw", win, kernel, optimize=True)


def _np_softmax(a):
    e = np.exp(a - a.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def _np_layer_norm(a, g, b):
    mean = a.mean(axis=1, keepdims=True)
    var = ((a - mean) ** 2).mean(axis=1, keepdims=True)
    return (a - mean) / np.sqrt(var + 1e-5) * g + b


NUMPY = {
    "W1": lambda a, b, c: a @ b + c,
    "W2": lambda d, k, b: np.maximum(_np_conv(d, k, 1) + b[None, :, None, None], 0),
    "W3": _np_softmax,
    "W4": lambda img: img @ YUV,
    "W5": lambda d, k, b: np.maximum(_np_conv(d, k, 2) + b[None, :, None, None], 0),
    "W6": _np_depthwise,
    "W7": _np_layer_norm,
    "W8": np.matmul,
}

TORCH = {
    "W1": lambda a, b, c: torch.addmm(c, a, b),
    "W2": lambda d, k, b: F.relu(F.conv2d(d, k, b, padding=1)),
    "W3": lambda a: torch.softmax(a, dim=1),
    "W4": lambda img: img @ torch.from_numpy(YUV),
    "W5": lambda d, k, b: F.relu(F.conv2d(d, k, b, stride=2, padding=1)),
    "W6": lambda d, k: F.conv2d(d, k[:, None], padding=1, groups=k.shape[0]),
    "W7": lambda a, g, b: F.layer_norm(a, (a.shape[1],), g, b, eps=1e-5),
    "W8": torch.bmm,
}

WORKLOADS = {
    "W1": ("matmul+bias 1024^3", lambda: matmul_add(1024)),
    "W2": ("conv2d 1x64x56x56 3x3 +bias+relu", lambda: conv2d_nchw(1, 64, 56, 56, 64, 3, 3)),
    "W3": ("softmax 1024x1024", lambda: softmax(1024, 1024)),
    "W4": ("RGB->YUV 1920x1080", lambda: rgb_to_yuv(1920, 1080)),
    "W5": ("conv2d 1x64x56x56 -> 128 3x3 stride 2 +bias+relu", lambda: conv2d_nchw(1, 64, 56, 56, 128, 3, 3, 2)),
    "W6": ("depthwise conv2d 1x64x56x56 3x3", lambda: depthwise_conv2d(1, 64, 56, 56, 3, 3)),
    "W7": ("layer norm 1024x1024", lambda: layer_norm(1024, 1024)),
    "W8": ("batch matmul 16x128x128x128", lambda: batch_matmul(16, 128, 128, 128)),
}


def _best_within(log: Path, n: int, out: Path) -> Path:
    """A copy of ``log`` holding its DAG lines and its first ``n`` measurement records."""
    kept, seen = [], 0
    for line in log.read_text().splitlines():
        if '"r"' in line:
            if seen >= n:
                continue
            seen += 1
        kept.append(line)
    out.write_text("\n".join(kept) + "\n")
    return out


def tune(name: str, args: list, trials: int, seed: int, work: Path) -> tuple[sc.SearchTask, Path, float, float]:
    """Tune ``args``' DAG for ``trials``; returns (task, record file, wall s, search s).

    search s is the policy's own time (sketches, evolution, cost-model updates), the rest of
    the wall time is building and measuring."""
    task = sc.SearchTask(compute_dag=sc.ComputeDAG(args), target="llvm")
    log = work / f"{name}.json"
    opts = sc.TuningOptions(num_measure_trials=trials, num_measures_per_round=64, seed=seed, verbose=1,
                            measure_callbacks=[sc.RecordToFile(str(log))])
    policy = sc.SketchPolicy(task, sc.LGBMModel(seed=seed), seed=seed, verbose=1,
                             params=sc.SketchPolicyParams(population=opts.population, num_iters=opts.num_iters))
    t0 = time.perf_counter()
    task.tune(opts, search_policy=policy)
    return task, log, time.perf_counter() - t0, policy.time_search_s


def _busy_process() -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True)


def time_workload(name: str, task, log: Path, n: int, work: Path, inputs: list, expected: np.ndarray) -> dict:
    sch, targs = task.apply_best(str(_best_within(log, n, work / f"{name}_{n}.json")))
    f = sc.build(sch, targs, "llvm")
    out = np.zeros(expected.shape, expected.dtype)
    f(*inputs, out)
    np.testing.assert_allclose(out, expected, rtol=1e-3, atol=1e-4)
    row = {"ours_ms": median_time_s(lambda: f(*inputs, out)) * 1e3}
    row["numpy_ms"] = median_time_s(lambda: NUMPY[name](*inputs)) * 1e3
    if torch is not None:
        tin = [torch.from_numpy(x) for x in inputs]
        with torch.no_grad():
            row["torch_ms"] = median_time_s(lambda: TORCH[name](*tin)) * 1e3
    row["gflops"] = task.compute_dag.flop_ct / (row["ours_ms"] * 1e-3) / 1e9
    row["vs_numpy"] = row["numpy_ms"] / row["ours_ms"]
    row["vs_torch"] = row["torch_ms"] / row["ours_ms"] if "torch_ms" in row else None
    row["timer"] = f
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", default="64,200")
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--busy", action="store_true", help="time again beside one busy process of another session")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "compare.json"))
    opts = ap.parse_args()
    if torch is not None:
        torch.set_num_threads(2)
    out = Path(opts.out)
    if out.is_dir():  # --out a folder: write compare.json (and compare.md) inside it
        out = out / "compare.json"
    trials = sorted(int(t) for t in opts.trials.split(","))
    peak = fma_peak.measure()
    print(f"FMA peak: {peak['gflops_1_thread']:.1f} GFLOP/s on 1 thread, {peak['gflops_all_threads']:.1f} "
          f"on {peak['threads']}")
    rng = np.random.default_rng(0)
    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="compare_") as tmp:
        work = Path(tmp)
        for name in opts.workloads.split(","):
            desc, make = WORKLOADS[name]
            args = make()
            inputs = [rng.random(tuple(int(d) for d in t.shape), dtype=np.float32) for t in args[:-1]]
            expected = np.asarray(NUMPY[name](*inputs), np.float32)
            task, log, wall, search_s = tune(name, args, trials[-1], opts.seed, work)
            for n in trials:
                row = time_workload(name, task, log, n, work, inputs, expected)
                f = row.pop("timer")
                if opts.busy and n == trials[-1]:
                    busy = _busy_process()
                    try:
                        time.sleep(0.5)
                        out = np.zeros(expected.shape, np.float32)
                        row["busy_ours_ms"] = median_time_s(lambda f=f, out=out, xs=inputs: f(*xs, out)) * 1e3
                        if torch is not None:
                            tin = [torch.from_numpy(x) for x in inputs]
                            with torch.no_grad():
                                row["busy_torch_ms"] = median_time_s(
                                    lambda tin=tin, fn=TORCH[name]: fn(*tin)) * 1e3
                    finally:
                        busy.kill()
                        busy.wait()
                row.update({"workload": name, "desc": desc, "trials": n, "tune_wall_s": wall,
                            "search_s": search_s, "search_share": search_s / wall})
                rows.append(row)
                print(json.dumps(row))
    result = {"cpu_model": cpu_model(), "cpu_count": os.cpu_count(), "python": platform.python_version(),
              "torch": None if torch is None else torch.__version__, "numpy": np.__version__,
              "date": time.strftime("%Y-%m-%d %H:%M:%S"), "fma_peak": peak, "rows": rows}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    out.with_suffix(".md").write_text(markdown(result))
    print(markdown(result))


def markdown(result: dict) -> str:
    lines = [f"CPU: {result['cpu_model']} ({result['cpu_count']} cores); torch {result['torch']}; "
             f"FMA peak {result['fma_peak']['gflops_all_threads']:.1f} GFLOP/s", "",
             "| workload | trials | ours ms | numpy ms | torch ms | vs numpy | vs torch | GFLOP/s "
             "| busy: ours / torch ms | tuning wall s, all trials (search share) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in result["rows"]:
        torch_ms = f"{r['torch_ms']:.3f}" if r.get("torch_ms") else "-"
        vs_torch = f"{r['vs_torch']:.2f}x" if r.get("vs_torch") else "-"
        busy = (f"{r['busy_ours_ms']:.3f} / {r.get('busy_torch_ms', float('nan')):.3f}"
                if "busy_ours_ms" in r else "-")
        share = f" ({r['search_share']:.0%})" if "search_share" in r else ""
        lines.append(f"| {r['workload']} {r['desc']} | {r['trials']} | {r['ours_ms']:.3f} | {r['numpy_ms']:.3f} | "
                     f"{torch_ms} | {r['vs_numpy']:.2f}x | {vs_torch} | {r['gflops']:.1f} | {busy} | "
                     f"{r['tune_wall_s']:.0f}{share} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
