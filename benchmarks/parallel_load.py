"""Parallel loops on a shared machine: time under 0, 1 and 2 busy processes of other sessions.

Three hand-scheduled parallel programs (float32):

P1: matmul + bias 512^3 (B packed into 16-wide panels by a parallel layout stage,
    4x16 register tiles, 32-row panels per parallel iteration: 16 iterations).
P2: conv2d NCHW 1x64x56x56, 64 filters 3x3, pad 1, + bias + ReLU (padding stage
    parallel over channels; output tiles of 4 channels x 8 columns, one parallel
    iteration per (channel block, row): 896 iterations).
P3: out = a * 2 + b over 65536 floats in 16 parallel blocks: a loop of tens of
    microseconds, where starting and joining the threads is most of the time.

Each configuration of the parallel runtime (see scheduler_core.codegen.parallel) runs
in a worker process of its own that builds both programs once:

    pool          dynamic chunks on this package's thread pool (codegen.thread_pool): the
                  caller returns when every chunk has completed, not every thread
    pool_static   static chunks (one per thread) on the thread pool
    new           dynamic chunks on libgomp, this package's GOMP_SPINCOUNT
                  (AUTOSCHED_PARALLEL_RUNTIME=gomp)
    spin_only     static chunks on libgomp, this package's GOMP_SPINCOUNT
    dynamic_only  dynamic chunks on libgomp, GOMP_SPINCOUNT=300000
    old           static chunks on libgomp (one per thread), GOMP_SPINCOUNT=300000 (libgomp's default)

Every load level (quiet, then one, then two busy single-thread processes started in
a new session with ``setsid``: Linux shares CPU time between sessions (autogroups),
so busy children in the benchmark's own session would hide the problem) is timed in
rounds over the workers in turn, so that the configurations see the same load.
Figures are medians of the mean time of a few calls, reported per configuration as
ratios to its own quiet time (one process each).  At each load level the benchmark also
measures how many CPUs as many spinning processes of its own session as the programs'
threads get (``cpus_for_threads``): since autogroups share the CPUs between sessions,
``threads / cpus`` is the best ratio any runtime can reach (about 1.9x with one busy
process and 3x with two on a 2-core machine).

Usage:  python benchmarks/parallel_load.py [--out benchmarks/results/parallel_load.json]
            [--configs old,new] [--autogroup-nice -20]
Writes the figures, the CPU model and os.cpu_count() to the JSON file and prints a
table.  About 30 s on a quiet 2-core machine.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from bench_util import cpu_model  # same folder
from compiler_core import schedule_w1  # same folder

import scheduler_core as sc
from scheduler_core import te
from scheduler_core.codegen import compile_primfunc, parallel, thread_pool_ir

# -- workloads ------------------------------------------------------------------------

def matmul_bias(n: int = 512, bn: int = 16, rows: int = 32, ti: int = 4):
    """P1: ``out = A @ B + C``, all (n, n) float32, with compiler_core's hand schedule of W1
    (B packed into panels, a ti x bn register tile, row blocks of ``rows`` in parallel)."""
    s, args = schedule_w1(n, ti=ti, bn=bn, rows=rows)
    rng = np.random.default_rng(0)
    a, b, c = (rng.random((n, n), dtype=np.float32) for _ in range(3))
    return s, args, [a, b, c], a @ b + c


def conv2d_bias_relu(ci: int = 64, hw: int = 56, co: int = 64, fb: int = 4, xb: int = 8):
    """P2: conv2d NCHW (1, ci, hw, hw) * (co, ci, 3, 3), pad 1, + bias (co,), ReLU -> (1, co, hw, hw)."""
    data = te.placeholder((1, ci, hw, hw), name="data")
    kernel = te.placeholder((co, ci, 3, 3), name="kernel")
    bias = te.placeholder((co,), name="bias")
    padded = te.compute((1, ci, hw + 2, hw + 2), lambda b, c, y, x: te.if_then_else(
        te.all(y >= 1, y < hw + 1, x >= 1, x < hw + 1), data[b, c, y - 1, x - 1], te.const(0.0)),
        name="pad")
    rc = te.reduce_axis((0, ci), name="rc")
    ry = te.reduce_axis((0, 3), name="ry")
    rx = te.reduce_axis((0, 3), name="rx")
    conv = te.compute((1, co, hw, hw), lambda b, f, y, x: te.sum(
        padded[b, rc, y + ry, x + rx] * kernel[f, rc, ry, rx], axis=[rc, ry, rx]), name="conv2d")
    out = te.compute((1, co, hw, hw), lambda b, f, y, x: te.max(conv[b, f, y, x] + bias[f], te.const(0.0)),
                     name="bias_relu")
    s = te.create_schedule(out.op)
    pb, pc, _, _ = s[padded].op.axis
    s[padded].parallel(s[padded].fuse(pb, pc))
    b, f, y, x = s[out].op.axis
    fo, fi = s[out].split(f, factor=fb)
    xo, xi = s[out].split(x, factor=xb)
    s[out].reorder(b, fo, y, xo, fi, xi)
    s[out].parallel(s[out].fuse(b, fo, y))
    s[out].vectorize(xi)
    s[conv].compute_at(s[out], xo)
    _, cf, _, cx = s[conv].op.axis
    crc, cry, crx = s[conv].op.reduce_axis
    s[conv].reorder(crc, cry, crx, cf, cx)
    s[conv].unroll(cf)
    s[conv].vectorize(cx)
    rng = np.random.default_rng(1)
    d = rng.random((1, ci, hw, hw), dtype=np.float32) - 0.5
    w = rng.random((co, ci, 3, 3), dtype=np.float32) - 0.5
    bb = rng.random(co, dtype=np.float32) - 0.5
    dp = np.pad(d[0], ((0, 0), (1, 1), (1, 1)))
    win = np.lib.stride_tricks.sliding_window_view(dp, (3, 3), axis=(1, 2))  # (ci, hw, hw, 3, 3)
    ref = np.maximum(np.einsum("cyxij,fcij->fyx", win, w) + bb[:, None, None], 0)[None]
    return s, [data, kernel, bias, out], [d, w, bb], ref.astype(np.float32)


def scale_add_64k(n: int = 65536, block: int = 4096):
    """P3: ``out = a * 2 + b`` over n float32, 16 parallel blocks of 4096 (vectorized): a short
    parallel loop (tens of microseconds), where the launch and the join dominate."""
    a_t = te.placeholder((n,), name="a")
    b_t = te.placeholder((n,), name="b")
    out = te.compute((n,), lambda i: a_t[i] * 2.0 + b_t[i], name="out")
    s = te.create_schedule(out.op)
    outer, inner = s[out].split(out.op.axis[0], factor=block)
    s[out].parallel(outer)
    vo, vi = s[out].split(inner, factor=16)
    s[out].vectorize(vi)
    rng = np.random.default_rng(2)
    a, b = rng.random(n, dtype=np.float32), rng.random(n, dtype=np.float32)
    return s, [a_t, b_t, out], [a, b], a * 2 + b


WORKLOADS = {"matmul_bias_512": matmul_bias, "conv2d_1x64x56x56_3x3_bias_relu": conv2d_bias_relu,
             "scale_add_64k": scale_add_64k}


# -- timing ---------------------------------------------------------------------------

def build(workload, scheme: str):
    """A ctypes callable with its arguments bound, checked against numpy (built with ``scheme``)."""
    s, args, inputs, ref = workload()
    f = compile_primfunc(sc.lower(s, args, name=f"{workload.__name__}_{scheme}"), "llvm",
                         sc.BuildConfig(parallel_schedule=scheme))
    out = np.zeros(ref.shape, np.float32)
    arrays = [*inputs, out]
    fn = f.ctypes_function
    ptrs = [a.ctypes.data for a in arrays]
    assert fn(*ptrs) == 0
    np.testing.assert_allclose(out, ref, rtol=1e-3, atol=1e-3)

    def run(arrays=arrays):  # the default argument keeps the arrays alive
        return fn(*ptrs)
    return run, f


def calls_for(run, target_s: float = 0.01) -> int:
    """Calls per measurement so that one lasts about ``target_s`` seconds on this machine now."""
    t0 = time.perf_counter()
    run()
    one = time.perf_counter() - t0
    return max(1, int(target_s / max(one, 1e-6)))


def measure(run, number: int, repeat: int) -> float:
    """Median over ``repeat`` measurements of the mean seconds per call of ``number`` calls."""
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(number):
            run()
        times.append((time.perf_counter() - t0) / number)
    return float(np.median(times))


def start_busy(k: int, autogroup_nice: int | None) -> list:
    """``k`` busy single-thread Python processes, each in a new session (its own autogroup)."""
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True)
             for _ in range(k)]
    if autogroup_nice is not None:
        for p in procs:
            set_autogroup_nice(p.pid, autogroup_nice)
    return procs


SPINNER = "import time\nt = time.time()\nwhile time.time() - t < {s}: pass\n"


def cpus_for_threads(threads: int, seconds: float = 1.0) -> float:
    """CPUs that ``threads`` CPU-bound processes of this session get now (CPU time / wall time).

    With busy processes in other sessions, Linux's autogroups share the CPUs between
    sessions, not threads: this bounds what any parallel runtime can reach here (a
    program using ``threads`` CPUs when quiet runs at best ``threads / cpus`` times slower).
    """
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    kids = [subprocess.Popen([sys.executable, "-c", SPINNER.format(s=seconds)]) for _ in range(threads)]
    for k in kids:
        k.wait()
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime) / wall


def stop_busy(procs: list) -> None:
    for p in procs:
        p.kill()
    for p in procs:
        p.wait()


def set_autogroup_nice(pid: int | str, nice: int) -> None:
    """Give the autogroup (session) of ``pid`` the nice value ``nice`` (negative: root only)."""
    Path(f"/proc/{pid}/autogroup").write_text(str(nice))


# -- one configuration per worker process ---------------------------------------------

def worker() -> None:
    """Child: build every workload with this process's configuration, then answer
    ``measure <repeat>`` lines on stdin with one JSON line ``{workload: seconds}``."""
    runs = {name: build(wl, sc.BuildConfig().parallel_schedule)[0] for name, wl in WORKLOADS.items()}
    for run in runs.values():  # warm up (threads, caches)
        for _ in range(5):
            run()
    numbers = {name: calls_for(run) for name, run in runs.items()}
    print(json.dumps({"ready": True, "calls": numbers}), flush=True)
    for line in sys.stdin:
        words = line.split()
        if not words or words[0] != "measure":
            break
        repeat = int(words[1])
        print(json.dumps({name: measure(run, numbers[name], repeat) for name, run in runs.items()}),
              flush=True)


def config_env(schedule: str, spin: str | None, runtime: str = "gomp") -> dict:
    """The environment of a worker: chunking ``schedule`` on ``runtime`` ("pool" or "gomp");
    ``spin``: GOMP_SPINCOUNT, or None for this package's default (the user's
    OMP_WAIT_POLICY / GOMP_SPINCOUNT are dropped)."""
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    env["AUTOSCHED_PARALLEL_SCHEDULE"] = schedule
    env["AUTOSCHED_PARALLEL_RUNTIME"] = runtime
    if spin is not None:
        env["GOMP_SPINCOUNT"] = spin
    return env


# name -> (chunking, GOMP_SPINCOUNT, runtime); 300000 is libgomp's default when OMP_WAIT_POLICY
# is unset (the spin count means nothing to the pool)
CONFIGS = {
    "pool": ("dynamic", None, "pool"),
    "pool_static": ("static", None, "pool"),
    "new": ("dynamic", None, "gomp"),
    "spin_only": ("static", None, "gomp"),
    "dynamic_only": ("dynamic", "300000", "gomp"),
    "old": ("static", "300000", "gomp"),  # before issue 11: static chunks, libgomp's default spin
}


class Worker:
    """A worker process running one configuration (in this benchmark's own session)."""

    def __init__(self, name: str):
        schedule, spin, runtime = CONFIGS[name]
        self.name = name
        self.proc = subprocess.Popen([sys.executable, __file__, "--worker"],
                                     env=config_env(schedule, spin, runtime),
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.calls = self._read()["calls"]

    def _read(self) -> dict:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"worker {self.name} exited with {self.proc.wait()}")
        return json.loads(line)

    def measure(self, repeat: int) -> dict:
        assert self.proc.stdin is not None
        self.proc.stdin.write(f"measure {repeat}\n")
        self.proc.stdin.flush()
        return self._read()

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(timeout=30)


def run_benchmark(configs, repeat: int, rounds: int, autogroup_nice: int | None,
                  shares: dict | None = None) -> dict:
    """``{workload: {config: {"quiet_ms", "busy1_ms", "busy2_ms", "busy1_ratio", "busy2_ratio"}}}``.

    Each load level is timed in ``rounds`` rounds over all configurations in turn, so that
    they see the same load; each round measures ``repeat`` times per workload.  ``shares``
    (if given) receives ``{busy: CPUs that default_num_threads() spinning processes of this
    session got}`` per load level (see :func:`cpus_for_threads`).
    """
    if autogroup_nice is not None:
        set_autogroup_nice("self", autogroup_nice)
    workers: list = []
    samples: dict = {}
    try:
        for name in configs:
            workers.append(Worker(name))
        for busy in (0, 1, 2):
            procs = start_busy(busy, autogroup_nice)
            try:
                time.sleep(0.5)
                if shares is not None:
                    shares[busy] = cpus_for_threads(parallel.default_num_threads())
                for _ in range(rounds):
                    for w in workers:
                        for wl, sec in w.measure(repeat).items():
                            samples.setdefault((wl, w.name), {}).setdefault(busy, []).append(sec)
                        time.sleep(0.1)  # let this worker's threads stop spinning (300000 spins: 10-30 ms)
            finally:
                stop_busy(procs)
    finally:
        for w in workers:
            w.close()
    results: dict = {}
    for (wl, name), per_load in samples.items():
        med = {b: float(np.median(v)) * 1e3 for b, v in per_load.items()}
        results.setdefault(wl, {})[name] = {
            "quiet_ms": med[0], "busy1_ms": med[1], "busy2_ms": med[2],
            "busy1_ratio": med[1] / med[0], "busy2_ratio": med[2] / med[0]}
    return results


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="benchmarks/results/parallel_load.json")
    ap.add_argument("--configs", default=",".join(CONFIGS), help="comma-separated, from " + ", ".join(CONFIGS))
    ap.add_argument("--repeat", type=int, default=5, help="measurements per round")
    ap.add_argument("--rounds", type=int, default=4, help="rounds per load level")
    ap.add_argument("--autogroup-nice", type=int, default=None,
                    help="nice value for the autogroups of this benchmark and its busy processes "
                         "(e.g. -10, root only): measures on a machine shared with other work")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    opts = ap.parse_args()
    if opts.worker:
        worker()
        return
    configs = [x for x in opts.configs.split(",") if x]
    unknown = set(configs) - set(CONFIGS)
    if unknown:
        ap.error(f"unknown configurations {sorted(unknown)}")
    t0 = time.perf_counter()
    loadavg_before = os.getloadavg()
    shares: dict = {}
    results = run_benchmark(configs, opts.repeat, opts.rounds, opts.autogroup_nice, shares)
    print(f"{'workload':34s} {'config':13s} {'quiet ms':>9s} {'1 busy':>7s} {'2 busy':>7s} {'quiet vs old':>12s}")
    for wl, per_config in results.items():
        for name, r in per_config.items():
            old = per_config.get("old")
            vs_old = f"{r['quiet_ms'] / old['quiet_ms']:11.2f}x" if old else ""
            print(f"{wl:34s} {name:13s} {r['quiet_ms']:9.3f} {r['busy1_ratio']:6.2f}x "
                  f"{r['busy2_ratio']:6.2f}x {vs_old}")
    threads = parallel.default_num_threads()
    floor = {f"busy{b}": threads / max(c, 1e-9) for b, c in shares.items() if b}
    print(f"fair-share floor (CPUs {threads} spinning processes of this session got: "
          f"{', '.join(f'{b} busy {c:.2f}' for b, c in shares.items())}): "
          f"{', '.join(f'{k} {v:.2f}x' for k, v in floor.items())}")
    meta = {"cpu_model": cpu_model(), "cpu_count": os.cpu_count(),
            "affinity": len(os.sched_getaffinity(0)), "threads": parallel.default_num_threads(),
            "configs": {k: {"schedule": CONFIGS[k][0], "runtime": CONFIGS[k][2],
                            "GOMP_SPINCOUNT": CONFIGS[k][1] or str(parallel.SPIN_COUNT),
                            "pool_spin_ns": {"worker": thread_pool_ir.WORKER_SPIN_NS,
                                             "master": thread_pool_ir.MASTER_SPIN_NS}}
                        for k in configs},
            "loadavg_before": loadavg_before,
            "cpus_for_threads": {f"busy{b}": c for b, c in shares.items()},
            "fair_share_floor_ratio": {f"busy{b}": parallel.default_num_threads() / max(c, 1e-9)
                                       for b, c in shares.items() if b},
            "env_after_import": {k: os.environ.get(k) for k in parallel.ENV_VARS},  # ours or the user's
            "autogroup_nice": opts.autogroup_nice, "loadavg_after": os.getloadavg(),
            "repeat": opts.repeat, "rounds": opts.rounds, "seconds": time.perf_counter() - t0,
            "when": time.strftime("%Y-%m-%d %H:%M:%S")}
    Path(opts.out).parent.mkdir(parents=True, exist_ok=True)
    Path(opts.out).write_text(json.dumps({"meta": meta, "results": results}, indent=2))
    print(f"{meta['cpu_model']}, os.cpu_count()={meta['cpu_count']}, {time.perf_counter() - t0:.0f} s; "
          f"wrote {opts.out}")


if __name__ == "__main__":
    main()
