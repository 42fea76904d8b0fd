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

With --with-metaschedule (issue 22 item 5), W1-W3 are also tuned by TVM MetaSchedule, as a
baseline only: benchmarks/metaschedule_baseline.py runs in a separate virtual environment
(--ms-venv, default benchmarks/.ms-venv, created here with MS_PACKAGES when missing; the package
itself never imports TVM) after all of our tuning, up to the same largest trial count, and its
JSON is merged in.  Since the two sides run in two processes, each side's best program is put
beside numpy timed in its own process (the same numpy version and expressions), and our
time to reach MetaSchedule's best is taken on our best-so-far curve (each record's timestamp
minus the time tuning started, best median cost so far) against MetaSchedule's best converted
to our process by that common reference: ms_best_ms * our numpy_ms / its numpy_ms.  That time
is reported over MetaSchedule's tuning wall time to the same trial count.  MetaSchedule runs
with its defaults but one change this machine needs (its build workers skip importing every
tensorization intrinsic, 65-80 s here, longer than its 30 s build timeout), and its clock
starts after that import in its main process; metaschedule_baseline.py's docstring says how.

    python benchmarks/compare.py [--trials 64,200] [--workloads W1,W3] [--busy]
        [--with-metaschedule [--ms-venv PATH] [--ms-max-wall-s 2400]] [--note TEXT] [--out FILE]

Writes benchmarks/results/compare.json and benchmarks/results/compare.md (a table of ratios;
with --with-metaschedule a second table, and MetaSchedule's own output in <out>.metaschedule.log).
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


def tune(name: str, args: list, trials: int, seed: int, work: Path
         ) -> tuple[sc.SearchTask, Path, float, float, float]:
    """Tune ``args``' DAG for ``trials``; returns (task, record file, wall s, search s, start).

    search s is the policy's own time (sketches, evolution, cost-model updates), the rest of
    the wall time is building and measuring.  start: ``time.time()`` when tuning began, the
    zero of :func:`our_curve` (records carry ``time.time()`` stamps)."""
    task = sc.SearchTask(compute_dag=sc.ComputeDAG(args), target="llvm")
    log = work / f"{name}.json"
    opts = sc.TuningOptions(num_measure_trials=trials, num_measures_per_round=64, seed=seed, verbose=1,
                            measure_callbacks=[sc.RecordToFile(str(log))])
    policy = sc.SketchPolicy(task, sc.LGBMModel(seed=seed), seed=seed, verbose=1,
                             params=sc.SketchPolicyParams(population=opts.population, num_iters=opts.num_iters))
    start, t0 = time.time(), time.perf_counter()
    task.tune(opts, search_policy=policy)
    return task, log, time.perf_counter() - t0, policy.time_search_s, start


def our_curve(log: Path, start: float) -> list[list[float]]:
    """``[[elapsed_s, best_ms], ...]``, one point per record of ``log`` in file order: seconds
    from ``start`` to the record's MeasureResult timestamp (``time.time()`` when its measurement
    finished), and the best median cost so far in ms (None until one succeeds).

    On CPU, scheduler_core's LocalRunner stamps a batch's results together once the whole batch
    has run (it replaces each worker's own stamp with the parent's clock after ``pool.map``), so
    the curve moves in steps of one measured batch (64 here) and a time to reach read from it is
    the end of the batch that held the program, an upper bound on when it was measured."""
    best, out = float("inf"), []
    for _, res in sc.load_records(str(log)):
        if res.cost is not None:
            best = min(best, res.cost * 1e3)
        out.append([round(res.timestamp - start, 3), best if best < float("inf") else None])
    return out


# -- TVM MetaSchedule, the --with-metaschedule baseline (in its own virtual environment) --------

MS_WORKLOADS = ("W1", "W2", "W3")
# apache-tvm 0.27 and what it needs (issue 22), pinned to the versions this was run with; numpy
# pinned to this process's so both sides time the same numpy reference.
MS_PACKAGES = ["apache-tvm==0.27.0.post1", "apache-tvm-ffi==0.1.14.post1", "cloudpickle==3.1.3",
               "psutil==7.2.2", "xgboost==3.2.0", f"numpy=={np.__version__}"]


def ms_python(venv: Path) -> Path:
    """The python of the MetaSchedule environment ``venv``, created with MS_PACKAGES if missing."""
    py = venv / "bin" / "python"
    if not py.exists():
        print(f"creating {venv} (python -m venv) and installing: {' '.join(MS_PACKAGES)}", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(py), "-m", "pip", "install", *MS_PACKAGES], check=True)
    return py


def run_metaschedule(py: Path, names: list[str], trials: list[int], seed: int, max_wall_s: float,
                     log: Path, work: Path) -> dict:
    """Run benchmarks/metaschedule_baseline.py with ``py``; its JSON (``{"error": ...}`` added when
    it failed; workloads it finished before failing are kept).  Its output goes to ``log``."""
    out = work / "metaschedule.json"
    cmd = [str(py), str(ROOT / "benchmarks" / "metaschedule_baseline.py"), "--trials", ",".join(map(str, trials)),
           "--workloads", ",".join(names), "--seed", str(seed), "--max-wall-s", str(max_wall_s), "--out", str(out)]
    print("running:", " ".join(cmd), f"(output in {log})", flush=True)
    with open(log, "w") as fh:
        proc = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, cwd=ROOT)
    text = log.read_text()
    for line in text.splitlines():
        if line.startswith("{"):
            print(line)
    result = json.loads(out.read_text()) if out.exists() else {"workloads": {}}
    if proc.returncode != 0:
        print(text[-3000:])
        result["error"] = f"metaschedule_baseline.py exited with {proc.returncode}; see {log.name}"
    return result


def first_reach_s(curve: list, target_ms: float) -> float | None:
    """Seconds at which ``curve``'s best-so-far first reached ``target_ms`` (None if never)."""
    return next((t for t, best in curve if best is not None and best <= target_ms), None)


def merge_metaschedule(row: dict, curve: list, ms_row: dict | None) -> None:
    """Put MetaSchedule's figures for ``row``'s trial count beside ours (ms_* keys, in place).

    ms_best_ms / ms_numpy_ms: its best program within the first ``row["trials"]`` trials and
    numpy, both timed in its process; ms_tune_wall_s: its wall seconds to that many trials.
    ours_reach_s: first point of our curve at or below ms_best_ms * numpy_ms / ms_numpy_ms (its
    best in our process's terms); reach_ratio = ours_reach_s / ms_tune_wall_s.
    ours_reach_s_tuning_times: the same against its own tuning-time best (run_secs) in plain ms.
    """
    at = (ms_row or {}).get("at_trials", {}).get(str(row["trials"]))
    if not at or "error" in at:
        row["ms_error"] = ((at or {}).get("error") or (ms_row or {}).get("error")
                           or "no MetaSchedule program within these trials")
        return
    target = at["best_ms"] * row["numpy_ms"] / ms_row["numpy_ms"]
    reach = first_reach_s(curve, target)
    row.update({"ms_best_ms": at["best_ms"], "ms_numpy_ms": ms_row["numpy_ms"], "ms_vs_numpy": at["vs_numpy"],
                "ms_correct": at["correct"], "ms_as_tuned_ms": at.get("as_tuned_ms"),
                "ms_tuning_best_ms": at["tuning_best_ms"], "ms_tune_wall_s": at["wall_s"],
                "ms_trials": min(row["trials"], ms_row["trials"]), "ms_failed_trials": ms_row["failed_trials"],
                "ms_stopped_early": ms_row["stopped_early"], "ms_target_in_our_ms": target,
                "ours_tuning_best_ms": curve[min(row["trials"], len(curve)) - 1][1] if curve else None,
                "ours_reach_s": reach, "reach_ratio": None if reach is None else reach / at["wall_s"],
                "ours_reach_s_tuning_times": first_reach_s(curve, at["tuning_best_ms"])})


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
    ap.add_argument("--with-metaschedule", action="store_true",
                    help="also tune W1-W3 with TVM MetaSchedule (benchmarks/metaschedule_baseline.py)")
    ap.add_argument("--ms-venv", default=str(ROOT / "benchmarks" / ".ms-venv"),
                    help="virtual environment with apache-tvm (created when missing)")
    ap.add_argument("--ms-max-wall-s", type=float, default=2400.0,
                    help="seconds MetaSchedule may tune one workload; then it keeps what it measured")
    ap.add_argument("--note", default="", help="a line stored in the JSON (e.g. that the machine was shared)")
    opts = ap.parse_args()
    if torch is not None:
        torch.set_num_threads(2)
    out = Path(opts.out)
    if out.is_dir():  # --out a folder: write compare.json (and compare.md) inside it
        out = out / "compare.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    trials = sorted(int(t) for t in opts.trials.split(","))
    peak = fma_peak.measure()
    print(f"FMA peak: {peak['gflops_1_thread']:.1f} GFLOP/s on 1 thread, {peak['gflops_all_threads']:.1f} "
          f"on {peak['threads']}")
    ms_names = [n for n in opts.workloads.split(",") if n in MS_WORKLOADS] if opts.with_metaschedule else []
    py = ms_python(Path(opts.ms_venv)) if ms_names else None  # before tuning: a failed install stops here
    rng = np.random.default_rng(0)
    rows: list[dict] = []
    curves: dict[str, list] = {}
    ms: dict | None = None
    with tempfile.TemporaryDirectory(prefix="compare_") as tmp:
        work = Path(tmp)
        for name in opts.workloads.split(","):
            desc, make = WORKLOADS[name]
            args = make()
            inputs = [rng.random(tuple(int(d) for d in t.shape), dtype=np.float32) for t in args[:-1]]
            expected = np.asarray(NUMPY[name](*inputs), np.float32)
            load_before = os.getloadavg()
            task, log, wall, search_s, start = tune(name, args, trials[-1], opts.seed, work)
            load_after = os.getloadavg()
            curves[name] = our_curve(log, start)
            for n in trials:
                row = time_workload(name, task, log, n, work, inputs, expected)
                f = row.pop("timer")
                if opts.busy and n == trials[-1]:
                    busy = _busy_process()
                    try:
                        time.sleep(0.5)
                        buf = np.zeros(expected.shape, np.float32)
                        row["busy_ours_ms"] = median_time_s(lambda f=f, buf=buf, xs=inputs: f(*xs, buf)) * 1e3
                        if torch is not None:
                            tin = [torch.from_numpy(x) for x in inputs]
                            with torch.no_grad():
                                row["busy_torch_ms"] = median_time_s(
                                    lambda tin=tin, fn=TORCH[name]: fn(*tin)) * 1e3
                    finally:
                        busy.kill()
                        busy.wait()
                row.update({"workload": name, "desc": desc, "trials": n, "tune_wall_s": wall,
                            "search_s": search_s, "search_share": search_s / wall,
                            "loadavg_before_after": [load_before, load_after]})
                rows.append(row)
                print(json.dumps(row))
        if ms_names:  # after all of our tuning, so the two searches never share the CPUs
            ms = run_metaschedule(py, ms_names, trials, opts.seed, opts.ms_max_wall_s,
                                  out.with_suffix(".metaschedule.log"), work)
            for row in rows:
                if row["workload"] in ms_names:
                    merge_metaschedule(row, curves[row["workload"]], ms["workloads"].get(row["workload"]))
                    print(json.dumps({k: v for k, v in row.items() if k.startswith(("ms_", "ours_", "reach"))}))
    result = {"cpu_model": cpu_model(), "cpu_count": os.cpu_count(), "python": platform.python_version(),
              "torch": None if torch is None else torch.__version__, "numpy": np.__version__,
              "date": time.strftime("%Y-%m-%d %H:%M:%S"), "note": opts.note, "fma_peak": peak, "rows": rows,
              "our_curves": curves}
    if ms is not None:
        result["metaschedule"] = ms
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
    if "metaschedule" in result:
        lines += ["", *markdown_metaschedule(result)]
    return "\n".join(lines) + "\n"


def _fmt(value, spec: str, none: str = "-") -> str:
    return none if value is None else format(value, spec)


def markdown_metaschedule(result: dict) -> list[str]:
    """The --with-metaschedule table: each side's best beside numpy in its own process, both
    tuning wall times, and our time to reach MetaSchedule's best over its wall time."""
    ms = result["metaschedule"]
    lines = [f"TVM MetaSchedule {ms.get('tvm', '?')} (target llvm -mcpu={ms.get('llvm_cpu', '?')}, "
             f"{ms.get('cpu_count', '?')} cores), run after our tuning in its own process; "
             "vs numpy: numpy ms / program ms, numpy timed in the same process as the program.",
             "", "| workload | trials | ours ms | MetaSchedule ms | ours vs numpy | MetaSchedule vs numpy "
             "| our tuning wall s | MetaSchedule tuning wall s | our time to reach its best s | / its wall |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in result["rows"]:
        if "ms_best_ms" not in r and "ms_error" not in r:
            continue
        if "ms_best_ms" not in r:
            lines.append(f"| {r['workload']} | {r['trials']} | {r['ours_ms']:.3f} | failed: {r['ms_error']} "
                         f"| {r['vs_numpy']:.2f}x | - | {r['tune_wall_s']:.0f} | - | - | - |")
            continue
        stopped = f" (stopped after {r['ms_trials']})" if r.get("ms_stopped_early") else ""
        wrong = "" if r.get("ms_correct") else " (WRONG)"
        lines.append(f"| {r['workload']} | {r['trials']} | {r['ours_ms']:.3f} | {r['ms_best_ms']:.3f}{wrong} | "
                     f"{r['vs_numpy']:.2f}x | {r['ms_vs_numpy']:.2f}x | {r['tune_wall_s']:.0f} | "
                     f"{r['ms_tune_wall_s']:.0f}{stopped} | {_fmt(r['ours_reach_s'], '.0f', 'not reached')} | "
                     f"{_fmt(r['reach_ratio'], '.2f')} |")
    lines += ["", "Our time to reach: the first of our records (tuning-time measurements, median of repeats) "
              "at or below MetaSchedule's best in our process's terms (its ms x our numpy ms / its numpy ms), "
              "in seconds since our tuning started; our records are stamped per measured batch (64), so this "
              "is the end of that batch.  / its wall: that time over MetaSchedule's tuning wall time to the "
              "same trial count (its clock starts after its one-off tensor-intrinsic import)."]
    if result.get("note"):
        lines += ["", f"Note: {result['note']}"]
    return lines


if __name__ == "__main__":
    main()
