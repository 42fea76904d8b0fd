"""TVM MetaSchedule on W1-W3, the baseline of ``compare.py --with-metaschedule`` (issue 22 item 5).

Runs with the python of a separate virtual environment that holds ``apache-tvm`` 0.27 (PyPI),
never with the package's own: it imports neither scheduler_core nor anything that does, and
the package never imports TVM.  compare.py creates that environment (benchmarks/.ms-venv)
and runs this script as a subprocess.

The three workloads are the DAGs of compare.py written in TVM's TE (``te.compute``, then
``te.create_prim_func``): W1 matmul+bias 1024^3 with B layout-free (the compute's
``layout_free_placeholders`` attribute, which MetaSchedule's RewriteLayout postproc honours),
W2 conv2d 1x64x56x56, 64 filters 3x3 pad 1, + bias + relu (padding as its own stage, as TOPI
and tests/workloads.py write it), W3 row softmax 1024x1024 (max, exp, sum, divide); float32.

Each is tuned with ``tvm.s_tir.meta_schedule.tune_tir`` (0.27's module path; it was
``tvm.meta_schedule`` before) for the target ``{"kind": "llvm", "mcpu": <host>, "num-cores": 2}``,
where <host> is ``tvm.target.codegen.llvm_get_system_cpu()``, the CPU name TVM's own LLVM
detects on this host (0.27 refuses the old ``"llvm -mcpu=..."`` string form).  Everything else
is MetaSchedule's default: evolutionary search, XGBoost cost model, LocalBuilder, LocalRunner
(EvaluatorConfig number=3, repeat=1, min_repeat_ms=100), ``num_trials_per_iter`` 64,
``max_trials_global`` the largest count in --trials.

The one addition is a runner wrapper (:class:`TimedRunner`) that hands MetaSchedule's
LocalRunner one candidate at a time, which is what LocalRunner.run does inside anyway (it
waits for each candidate before it submits the next), and records for each candidate the wall
seconds since tune_tir was called and its run_secs; the best-so-far curve is made of those.
It also keeps a copy of each new best candidate's built artifact, so the best program within
the first N trials is the very module MetaSchedule measured.  After --max-wall-s seconds on
one workload it raises, which ends tune_tir; what was measured until then is kept and the
workload is marked ``stopped_early``.

The best module within the first N trials (N in --trials) is then loaded in this process,
checked against numpy (rtol 1e-3, atol 1e-4) and timed with TVM's ``time_evaluator``
(min_repeat_ms 200, repeat 7, median of the repeats, as bench_util.median_time_s times
compare.py's programs), beside numpy's reference in this same process (the same numpy
expressions as compare.py's NUMPY, timed with bench_util.median_time_s), so that the two
processes can be compared through a common reference.

    <ms-venv>/bin/python benchmarks/metaschedule_baseline.py [--trials 64] [--workloads W1,W2,W3]
        [--out FILE.json] [--max-wall-s 2400] [--seed 0]

Prints one JSON line per workload and writes the whole result to --out: per workload
{trials, tune_wall_s, best_ms, numpy_ms, vs_numpy, correct, curve: [[elapsed_s, best_ms], ...]
(one point per measured candidate, run_secs mean in ms, null until one succeeds), at_trials:
{N: {...}}}.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import sys
import tempfile
import time
import traceback
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import tvm  # noqa: E402
from bench_util import cpu_model, median_time_s  # noqa: E402  (same folder; numpy and stdlib only)
from tvm import te  # noqa: E402
from tvm.ir.utils import derived_object  # noqa: E402
from tvm.s_tir import meta_schedule as ms  # noqa: E402
from tvm.s_tir.meta_schedule.builder import LocalBuilder, PyBuilder  # noqa: E402
from tvm.s_tir.meta_schedule.runner import LocalRunner, PyRunner  # noqa: E402
from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock  # noqa: E402

# -- the workloads, in TE (the same DAGs as benchmarks/tune.py's matmul_add and tests/workloads.py) --

def matmul_add(n: int = 1024) -> list:
    """W1: out = A @ B + C, (n, n) each; B is layout-free."""
    A = te.placeholder((n, n), name="A")
    B = te.placeholder((n, n), name="B")
    C = te.placeholder((n, n), name="C")
    k = te.reduce_axis((0, n), name="k")
    mm = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="matmul",
                    attrs={"layout_free_placeholders": [B]})
    out = te.compute((n, n), lambda i, j: mm[i, j] + C[i, j], name="out")
    return [A, B, C, out]


def conv2d_nchw(n=1, ci=64, h=56, w=56, co=64, kh=3, kw=3, stride=1, pad=1, dtype="float32") -> list:
    """W2: conv2d NCHW + bias + ReLU, padding as its own if_then_else stage."""
    data = te.placeholder((n, ci, h, w), dtype, name="data")
    kernel = te.placeholder((co, ci, kh, kw), dtype, name="kernel")
    bias = te.placeholder((co,), dtype, name="bias")
    ph, pw = h + 2 * pad, w + 2 * pad
    padded = te.compute(
        (n, ci, ph, pw),
        lambda b, c, y, x: te.if_then_else(
            te.all(y >= pad, y < h + pad, x >= pad, x < w + pad),
            data[b, c, y - pad, x - pad], te.const(0, dtype)),
        name="pad")
    oh, ow = (ph - kh) // stride + 1, (pw - kw) // stride + 1
    rc = te.reduce_axis((0, ci), name="rc")
    ry = te.reduce_axis((0, kh), name="ry")
    rx = te.reduce_axis((0, kw), name="rx")
    conv = te.compute(
        (n, co, oh, ow),
        lambda b, f, y, x: te.sum(padded[b, rc, y * stride + ry, x * stride + rx] * kernel[f, rc, ry, rx],
                                  axis=[rc, ry, rx]),
        name="conv2d")
    out = te.compute((n, co, oh, ow), lambda b, f, y, x: te.max(conv[b, f, y, x] + bias[f], te.const(0, dtype)),
                     name="bias_relu")
    return [data, kernel, bias, out]


def softmax(n: int = 1024, m: int = 1024, dtype="float32") -> list:
    """W3: row softmax of A (n, m): max reduce, exp, sum reduce, divide."""
    A = te.placeholder((n, m), dtype, name="A")
    k1 = te.reduce_axis((0, m), name="k1")
    mx = te.compute((n,), lambda i: te.max(A[i, k1], axis=k1), name="row_max")
    e = te.compute((n, m), lambda i, j: te.exp(A[i, j] - mx[i]), name="exp")
    k2 = te.reduce_axis((0, m), name="k2")
    s = te.compute((n,), lambda i: te.sum(e[i, k2], axis=k2), name="row_sum")
    out = te.compute((n, m), lambda i, j: e[i, j] / s[i], name="softmax")
    return [A, out]


# -- numpy references: the same expressions as compare.py's NUMPY (copied: compare.py imports the package) --

def _np_conv(data, kernel, stride):
    n, c, h, w = data.shape
    co, _, kh, kw = kernel.shape
    p = np.pad(data, ((0, 0), (0, 0), (1, 1), (1, 1)))
    oh, ow = (h + 2 - kh) // stride + 1, (w + 2 - kw) // stride + 1
    cols = np.lib.stride_tricks.sliding_window_view(p, (kh, kw), axis=(2, 3))[:, :, ::stride, ::stride]
    cols = cols[:, :, :oh, :ow].transpose(0, 2, 3, 1, 4, 5).reshape(n * oh * ow, c * kh * kw)
    return (cols @ kernel.reshape(co, -1).T).reshape(n, oh, ow, co).transpose(0, 3, 1, 2)


def _np_softmax(a):
    e = np.exp(a - a.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


NUMPY = {
    "W1": lambda a, b, c: a @ b + c,
    "W2": lambda d, k, b: np.maximum(_np_conv(d, k, 1) + b[None, :, None, None], 0),
    "W3": _np_softmax,
}

WORKLOADS = {
    "W1": ("matmul+bias 1024^3", matmul_add),
    "W2": ("conv2d 1x64x56x56 3x3 +bias+relu", conv2d_nchw),
    "W3": ("softmax 1024x1024", softmax),
}


class StopTuning(RuntimeError):
    """Raised by TimedRunner once a workload's wall-time budget is spent; it ends tune_tir."""


def build_without_intrinsics(mod, target, _params):
    """MetaSchedule's default_build (builder/local_builder.py) minus its first line,
    ``import tvm.s_tir.tensor_intrin``.

    That import parses every tensorization intrinsic TVM ships (CUDA, ROCm, Hexagon, ARM, x86)
    and takes 65-80 s on this 2-core machine (``python -X importtime``: 44 s of it CUDA's),
    in every builder worker, and LocalBuilder restarts its workers for every batch; its 30 s
    timeout then kills every build, so MetaSchedule as shipped measures nothing here.  No
    schedule rule for this llvm target tensorizes, so the build itself is the same.
    """
    from tvm.driver import build as tvm_build
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

    return tvm_build(RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod), target=target)


@derived_object
class TimedBuilder(PyBuilder):
    """MetaSchedule's LocalBuilder (2 workers, timeout 30 s) with :func:`build_without_intrinsics`;
    ``mods`` maps each artifact it built to the scheduled IRModule it came from."""

    def __init__(self) -> None:
        super().__init__()
        self.inner = LocalBuilder(f_build=build_without_intrinsics)
        self.mods: dict = {}

    def build(self, build_inputs):
        results = self.inner.build(build_inputs)
        self.mods = {str(r.artifact_path): inp.mod for inp, r in zip(build_inputs, results)
                     if r.error_msg is None}
        return results


@derived_object
class TimedRunner(PyRunner):
    """MetaSchedule's LocalRunner, handed one candidate at a time, with a wall clock.

    log: one ``(elapsed_s, mean run_secs in s or None)`` per measured candidate, elapsed since
    ``t0`` (time.perf_counter()).  best_mods: candidate index -> its scheduled IRModule, for
    each candidate that beat the best so far (the builder's ``mods``).
    """

    def __init__(self, t0: float, builder, max_wall_s: float) -> None:
        super().__init__()
        self.inner = LocalRunner()  # MetaSchedule's defaults: timeout 30 s, number 3, repeat 1, 100 ms
        self.t0 = t0
        self.builder = builder
        self.max_wall_s = max_wall_s
        self.log: list = []
        self.best_mods: dict = {}
        self.best_s = float("inf")
        self.stopped = False

    def run(self, runner_inputs):
        futures = []
        for inp in runner_inputs:
            if time.perf_counter() - self.t0 > self.max_wall_s:
                self.stopped = True
                raise StopTuning(f"wall-time budget of {self.max_wall_s:g} s spent after {len(self.log)} trials")
            (fut,) = self.inner.run([inp])
            res = fut.result()
            secs = None
            if res.error_msg is None and res.run_secs:
                secs = float(np.mean([float(s) for s in res.run_secs]))
            if secs is not None and secs < self.best_s:
                self.best_s = secs
                self.best_mods[len(self.log)] = self.builder.mods[str(inp.artifact_path)]
            self.log.append((time.perf_counter() - self.t0, secs))
            futures.append(fut)
        return futures


def host_target() -> tvm.target.Target:
    """llvm for this host's CPU as TVM's LLVM names it, on 2 cores (the machine's count)."""
    cpu = tvm.target.codegen.llvm_get_system_cpu()
    return tvm.target.Target({"kind": "llvm", "mcpu": cpu, "num-cores": os.cpu_count() or 1})


def _timed(rt_mod, arrays: list) -> tuple[float, np.ndarray]:
    """Median ms of ``rt_mod.main(*arrays)`` (time_evaluator: min_repeat_ms 200, repeat 7) and
    its last argument (the output) after the first call."""
    dev = tvm.cpu(0)
    args = [tvm.runtime.tensor(x, dev) for x in arrays]
    rt_mod["main"](*args)
    got = args[-1].numpy()
    res = rt_mod.time_evaluator("main", dev, number=1, repeat=7, min_repeat_ms=200)(*args)
    return float(np.median(res.results)) * 1e3, got


def time_program(mod, target, inputs: list, expected: np.ndarray) -> dict:
    """Build a tuned IRModule in this process, check it against numpy and time it (ms).

    best_ms: the module as ``tvm.compile`` builds it, which keeps MetaSchedule's layout-rewrite
    block (W1's B): it takes B as numpy holds it and transforms it on every call, as our
    tuner's programs do with their layout stage.  as_tuned_ms: the module MetaSchedule's builder
    measured while tuning (RemoveWeightLayoutRewriteBlock: B is a parameter already in the new
    layout, here random data of its shape, so not checked); only where the two differ.
    """
    full, got = _timed(tvm.compile(mod, target).mod, [*inputs, np.zeros_like(expected)])
    row = {"best_ms": full, "max_abs_err": float(np.max(np.abs(got - expected)))}
    try:
        np.testing.assert_allclose(got, expected, rtol=1e-3, atol=1e-4)
        row["correct"] = True
    except AssertionError:
        row["correct"] = False
    tuned = RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod)
    if tuned.script() != mod.script():
        func = tuned["main"]
        shapes = [tuple(int(d) for d in p.shape) for p in func.params]  # 0.27: params are buffers
        rng = np.random.default_rng(0)
        row["as_tuned_ms"] = _timed(tvm.compile(tuned, target).mod,
                                    [rng.random(shape, dtype=np.float32) for shape in shapes])[0]
    return row


def tune_workload(name: str, trials: list[int], seed: int, max_wall_s: float, work: Path) -> dict:
    """Tune one workload up to max(trials); time the best program within each count of trials."""
    desc, make = WORKLOADS[name]
    args = make()
    func = te.create_prim_func(args)
    target = host_target()
    rng = np.random.default_rng(0)
    inputs = [rng.random(tuple(int(d) for d in t.shape), dtype=np.float32) for t in args[:-1]]
    expected = np.asarray(NUMPY[name](*inputs), np.float32)
    builder = TimedBuilder()
    load_before = os.getloadavg()
    t0 = time.perf_counter()
    runner = TimedRunner(t0, builder, max_wall_s)
    error = None
    try:
        ms.tune_tir(func, target, str(work / name), max_trials_global=trials[-1], num_trials_per_iter=64,
                    builder=builder, runner=runner, num_tuning_cores=os.cpu_count() or 1, seed=seed)
    except Exception as exc:  # noqa: BLE001  (StopTuning comes back through TVM's FFI as its own error type)
        if not runner.stopped:
            traceback.print_exc()
            error = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    wall = time.perf_counter() - t0
    load_after = os.getloadavg()
    curve, best = [], float("inf")
    for elapsed, secs in runner.log:
        if secs is not None:
            best = min(best, secs * 1e3)
        curve.append([round(elapsed, 3), best if best < float("inf") else None])
    numpy_ms = median_time_s(lambda: NUMPY[name](*inputs)) * 1e3
    row = {"workload": name, "desc": desc, "target": str(target), "trials": len(runner.log),
           "failed_trials": sum(1 for _, s in runner.log if s is None), "tune_wall_s": wall,
           "stopped_early": runner.stopped, "error": error, "loadavg_before_after": [load_before, load_after],
           "numpy_ms": numpy_ms, "curve": curve, "at_trials": {}}
    for n in trials:
        idx = [i for i in runner.best_mods if i < n]
        if not idx:
            continue
        i = max(idx)  # the last new best within the first n candidates is the best of them
        try:
            timed = time_program(runner.best_mods[i], target, inputs, expected)
        except Exception as exc:  # noqa: BLE001  (keep the other counts and workloads)
            traceback.print_exc()
            row["at_trials"][str(n)] = {"error": f"{type(exc).__name__}: {exc}"[:500]}
            continue
        timed.update({"index": i, "tuning_best_ms": curve[min(n, len(curve)) - 1][1],
                      "wall_s": wall if n >= len(curve) else curve[n - 1][0],
                      "vs_numpy": numpy_ms / timed["best_ms"]})
        row["at_trials"][str(n)] = timed
    timed = [k for k, v in row["at_trials"].items() if "error" not in v]
    if timed:
        last = row["at_trials"][max(timed, key=int)]
        row.update({k: last[k] for k in ("best_ms", "correct", "max_abs_err", "vs_numpy")})
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", default="64", help="comma-separated trial counts; tunes up to the largest")
    ap.add_argument("--workloads", default="W1,W2,W3")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-wall-s", type=float, default=2400.0,
                    help="seconds per workload; then stop and keep what was measured")
    ap.add_argument("--out", default="metaschedule_baseline.json")
    ap.add_argument("--work-dir", default=None,
                    help="MetaSchedule's work dirs (logs, database) go here and are kept; default a temporary one")
    opts = ap.parse_args()
    trials = sorted(int(t) for t in opts.trials.split(","))
    result = {"tvm": tvm.__version__, "numpy": np.__version__, "python": platform.python_version(),
              "cpu_model": cpu_model(), "cpu_count": os.cpu_count(),
              "llvm_cpu": tvm.target.codegen.llvm_get_system_cpu(),
              "llvm_version": tvm.target.codegen.llvm_version_major(),
              "date": time.strftime("%Y-%m-%d %H:%M:%S"), "max_wall_s": opts.max_wall_s, "workloads": {}}
    t0 = time.perf_counter()
    importlib.import_module("tvm.s_tir.tensor_intrin")  # tune_tir's TuneContext imports it; 65-80 s here
    result["tensor_intrin_import_s"] = time.perf_counter() - t0
    out = Path(opts.out)
    with tempfile.TemporaryDirectory(prefix="ms_baseline_") as tmp:
        if opts.work_dir:
            tmp = opts.work_dir
            Path(tmp).mkdir(parents=True, exist_ok=True)
        for name in opts.workloads.split(","):
            row = tune_workload(name, trials, opts.seed, opts.max_wall_s, Path(tmp))
            result["workloads"][name] = row
            print(json.dumps({k: v for k, v in row.items() if k != "curve"}), flush=True)
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(json.dumps(result, indent=1) + "\n")  # after each workload: a partial result survives


if __name__ == "__main__":
    main()
