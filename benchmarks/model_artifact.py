"""A model run standalone from its artifact, beside the in-process executor and torch eager.

For each model of ``examples/torch_models.py`` at its full size: import with ``from_pytorch``,
``build_graph`` (untuned: every function gets ``default_state``; ``--log FILE`` applies a record
file's best instead), ``export_library`` (seconds, bytes), ``sc.runtime.load_model``; then, in
this process at the tuned programs' thread count, alternating rounds (median of 7, each the
median of a timed loop of at least 0.2 s) of:

    graph     GraphModule.__call__        (Python steps over prebound ctypes calls)
    artifact  LoadedModel.__call__        (one ctypes call into model_run)
    torch     module(x) under no_grad     (torch.set_num_threads: same thread count)

and the largest difference between the artifact's outputs and torch's.  The point is that the
standalone artifact costs no more than the executor it was exported from (the tuned-vs-torch
comparison is examples/torch_models.py's).

Usage:  python benchmarks/model_artifact.py [--models mlp resnet_block transformer]
                                            [--out benchmarks/results/model_artifact.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from bench_util import cpu_isa, cpu_model, median_time_s  # same folder

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "examples"))

import torch  # noqa: E402
import torch_models as tm  # noqa: E402

import scheduler_core as sc  # noqa: E402
from scheduler_core.codegen.parallel import default_num_threads  # noqa: E402


def bench(name: str, log: str | None) -> dict:
    module, xs, graph = tm.load(name)
    x_np = [x.numpy() for x in xs]
    with torch.no_grad():
        want = module(*xs).numpy()
    if log:
        with sc.ApplyHistoryBest(log):
            lib = sc.build_graph(graph)
    else:
        lib = sc.build_graph(graph)
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "model.tar.gz"
        t0 = time.perf_counter()
        data = lib.export_library(path)
        export_s = time.perf_counter() - t0
        model = sc.runtime.load_model(path)
    got = model(*x_np)
    times: dict = {"graph": [], "artifact": [], "torch": []}
    with torch.no_grad():
        calls = {"graph": lambda: lib(*x_np), "artifact": lambda: model(*x_np), "torch": lambda: module(*xs)}
        for _ in range(7):
            for k, fn in calls.items():
                times[k].append(median_time_s(fn, min_s=0.2, repeat=1))
    med = {k: float(np.median(v)) for k, v in times.items()}
    return {"model": name, "schedules": sorted(set(lib.schedule_sources.values())), "export_s": export_s,
            "artifact_bytes": len(data), "weight_bytes": int(sum(a.nbytes for a in graph.bound.values())),
            "max_abs_err_vs_torch": float(np.abs(got - want).max()),
            "graph_ms": med["graph"] * 1e3, "artifact_ms": med["artifact"] * 1e3, "torch_ms": med["torch"] * 1e3,
            "artifact_over_graph": med["artifact"] / med["graph"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="*", default=["mlp", "resnet_block", "transformer"])
    ap.add_argument("--log", default=None, help="a record file whose best schedules to apply")
    ap.add_argument("--out", default=str(ROOT / "benchmarks/results/model_artifact.json"))
    args = ap.parse_args()
    threads = default_num_threads()
    torch.set_num_threads(threads)
    rows = [bench(n, args.log) for n in args.models]
    result = {"cpu": cpu_model(), "isa": cpu_isa(), "threads": threads, "rows": rows}
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(f"{result['cpu']} ({result['isa']}), {threads} threads")
    for r in rows:
        print(f"{r['model']:13s} export {r['export_s']:.2f} s, {r['artifact_bytes'] / 1e6:.1f} MB "
              f"(weights {r['weight_bytes'] / 1e6:.1f} MB); graph {r['graph_ms']:.3f} ms, artifact "
              f"{r['artifact_ms']:.3f} ms ({r['artifact_over_graph']:.2f}x), torch {r['torch_ms']:.3f} ms; "
              f"max |err| vs torch {r['max_abs_err_vs_torch']:.1e}")


if __name__ == "__main__":
    main()
