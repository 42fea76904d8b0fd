"""Best program so far against trials, for a search that starts from the pretrained cost model,
one that starts cold (Ansor's random warm-up, then its own LGBMModel) and one guided by
RandomModel: same workloads, seeds and search sizes, one after the other on this machine.

    python benchmarks/transfer_curves.py [--trials 64] [--workloads W1,W2,W5,W8] [--per-round 32]
        [--population 512] [--num-iters 2] [--seed 0]

Writes benchmarks/results/transfer_curves.json (every curve, in ms, and for each workload the
trials the pretrained search needed to reach the cold search's final best) and
benchmarks/results/transfer_curves.svg (one panel per workload, best-so-far GFLOP/s).
The pretrained model is cost_model/pretrained/llvm.json (benchmarks/pretrain_cost_model.py),
trained on none of W1-W8.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_util import cpu_model  # noqa: E402  (same folder)
from compare import WORKLOADS  # noqa: E402  (same folder: W1-W8)

import scheduler_core as sc  # noqa: E402
from cost_model import LGBMModel, RandomModel  # noqa: E402
from scheduler_core.base.llvm_cpu import host_cpu  # noqa: E402
from sketch_rules import SketchPolicyParams  # noqa: E402

MODELS = {
    "pretrained": lambda seed: LGBMModel(seed=seed),  # pretrained="auto": the shipped model
    "cold": lambda seed: LGBMModel(seed=seed, pretrained=None),
    "random": lambda seed: RandomModel(),
}
COLORS = {"pretrained": "#1f77b4", "cold": "#ff7f0e", "random": "#7f7f7f"}


def curve(name: str, model: str, opts, work: Path) -> dict:
    """Tune ``name`` with ``model``; the best-so-far latency (ms) after each trial."""
    task = sc.SearchTask(compute_dag=sc.ComputeDAG(WORKLOADS[name][1]()), target="llvm")
    log = work / f"{name}_{model}.json"
    policy = sc.SketchPolicy(task, MODELS[model](opts.seed), seed=opts.seed, verbose=0,
                             params=SketchPolicyParams(population=opts.population, num_iters=opts.num_iters))
    t0 = time.perf_counter()
    task.tune(sc.TuningOptions(num_measure_trials=opts.trials, num_measures_per_round=opts.per_round,
                               seed=opts.seed, verbose=0, measure_callbacks=[sc.RecordToFile(str(log))]),
              search_policy=policy)
    wall = time.perf_counter() - t0
    best, out = float("inf"), []
    for _, res in sc.load_records(str(log)):
        if res.error_no == 0 and res.costs:
            best = min(best, sum(res.costs) / len(res.costs))
        out.append(best * 1e3)
    print(f"{name} {model}: best {best * 1e3:.3f} ms after {len(out)} trials, {wall:.0f} s", flush=True)
    return {"best_ms": out, "wall_s": wall, "search_s": policy.time_search_s,
            "gflop": task.compute_dag.flop_ct / 1e9}


def trials_to_reach(curve_ms: list, target_ms: float) -> int | None:
    """The first trial (1-based) whose best so far is at most ``target_ms``; None if never."""
    return next((k + 1 for k, v in enumerate(curve_ms) if v <= target_ms), None)


def svg(result: dict) -> str:
    """One panel per workload: best-so-far GFLOP/s against trials, a polyline per model."""
    names = list(result["curves"])
    pw, ph, pad = 300, 220, 44
    width, height = pw * len(names) + 20, ph + 70
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'font-family="sans-serif" font-size="11">',
             f'<text x="10" y="16" font-size="13">Best so far (GFLOP/s) against trials, '
             f'{result["meta"]["cpu"]} ({result["meta"]["mcpu"]})</text>']
    for p, name in enumerate(names):
        x0, y0 = 10 + p * pw + pad, 40
        w, h = pw - pad - 10, ph - 40
        curves = result["curves"][name]
        gflop = next(iter(curves.values()))["gflop"]
        series = {m: [gflop / (v / 1e3) if v != float("inf") else 0.0 for v in c["best_ms"]]
                  for m, c in curves.items()}
        top = max(max(s) for s in series.values()) * 1.1 or 1.0
        n = max(len(s) for s in series.values())
        parts.append(f'<rect x="{x0}" y="{y0}" width="{w}" height="{h}" fill="none" stroke="#000"/>')
        parts.append(f'<text x="{x0}" y="{y0 - 6}">{name} {WORKLOADS[name][0]}</text>')
        parts.append(f'<text x="{x0 - 4}" y="{y0 + 10}" text-anchor="end">{top:.0f}</text>')
        parts.append(f'<text x="{x0 - 4}" y="{y0 + h}" text-anchor="end">0</text>')
        parts.append(f'<text x="{x0 + w}" y="{y0 + h + 14}" text-anchor="end">{n} trials</text>')
        for m, s in series.items():
            pts = " ".join(f"{x0 + w * k / max(n - 1, 1):.1f},{y0 + h - h * v / top:.1f}" for k, v in enumerate(s))
            parts.append(f'<polyline points="{pts}" fill="none" stroke="{COLORS[m]}" stroke-width="1.5"/>')
    for k, m in enumerate(MODELS):
        x = 10 + pad + k * 140
        parts.append(f'<line x1="{x}" y1="{height - 14}" x2="{x + 20}" y2="{height - 14}" '
                     f'stroke="{COLORS[m]}" stroke-width="2"/>')
        parts.append(f'<text x="{x + 24}" y="{height - 10}">{m}</text>')
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=64)
    ap.add_argument("--workloads", default="W1,W2,W5,W8")
    ap.add_argument("--per-round", type=int, default=32)
    ap.add_argument("--population", type=int, default=512)
    ap.add_argument("--num-iters", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=str(ROOT / "benchmarks/results/transfer_curves.json"))
    opts = ap.parse_args()
    result: dict = {"meta": {"cpu": cpu_model(), "mcpu": host_cpu(), "args": vars(opts),
                             "when": time.strftime("%Y-%m-%d %H:%M:%S")},
                    "curves": {}, "summary": {}}
    with tempfile.TemporaryDirectory(prefix="transfer_") as tmp:
        for name in opts.workloads.split(","):
            result["curves"][name] = {m: curve(name, m, opts, Path(tmp)) for m in MODELS}
            c = result["curves"][name]
            cold_best = c["cold"]["best_ms"][-1]
            result["summary"][name] = {
                **{f"{m}_best_ms": c[m]["best_ms"][-1] for m in MODELS},
                "pretrained_trials_to_cold_best": trials_to_reach(c["pretrained"]["best_ms"], cold_best),
                "cold_trials": len(c["cold"]["best_ms"]),
            }
            print(json.dumps({name: result["summary"][name]}), flush=True)
    out = Path(opts.out)
    out.write_text(json.dumps(result, indent=1))
    out.with_suffix(".svg").write_text(svg(result))
    print(f"wrote {out} and {out.with_suffix('.svg')}")


if __name__ == "__main__":
    main()
