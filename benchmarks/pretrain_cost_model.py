"""Pretrain the CPU cost model shipped with the package (transfer learning, as TenSet and TLP
do for TVM): tune a set of workloads that are *not* W1-W8 on this machine, keep every
record, train one LGBMModel on all of them and write it as package data.

    python benchmarks/pretrain_cost_model.py [--trials 96] [--records-dir benchmarks/results/pretrain_records]
        [--out cost_model/pretrained/llvm.json]

For each workload, two searches of ``--trials`` trials each: one guided by RandomModel (a
spread of good and bad programs) and one by a fresh LGBMModel (more of the good region, as
the search will visit).  Records go to ``<records-dir>/<name>_<model>.json``; an existing
file is reused, so a stopped run resumes where it was.  The model is LGBMModel's default
(pack-rank, 177 feature columns), trained once on every successful and failed measurement
of every file; the file records the CPU model, the ISA, the workloads and the record count.
Measuring is what costs: about 1-3 s per trial on a 2-core Zen 3.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_util import cpu_model  # noqa: E402  (same folder)

import scheduler_core as sc  # noqa: E402
from cost_model import LGBMModel, RandomModel  # noqa: E402
from scheduler_core.base.llvm_cpu import host_cpu  # noqa: E402
from sketch_rules import SketchPolicyParams  # noqa: E402
from tests.workloads import (  # noqa: E402  (the test suite's DAG library)
    batch_matmul,
    conv2d_nchw,
    depthwise_conv2d,
    layer_norm,
    matmul,
    matmul_add,
    matmul_bias_relu,
    softmax,
    transpose,
)

# Shapes of the kinds of operators a network has, none of them one of compare.py's W1-W8.
WORKLOADS = {
    "matmul_512": lambda: matmul_add(512, 512, 512),
    "dense_128x768x3072": lambda: matmul_bias_relu(128, 3072, 768),
    "matmul_256x1024x256": lambda: matmul(256, 256, 1024),
    "conv2d_1x32x28x28_64": lambda: conv2d_nchw(1, 32, 28, 28, 64, 3, 3),
    "conv2d_1x128x14x14_128_s2": lambda: conv2d_nchw(1, 128, 14, 14, 128, 3, 3, 2),
    "conv2d_1x16x112x112_32_1x1": lambda: conv2d_nchw(1, 16, 112, 112, 32, 1, 1, 1, 0),
    "depthwise_1x128x28x28": lambda: depthwise_conv2d(1, 128, 28, 28, 3, 3),
    "batch_matmul_12x128x64x128": lambda: batch_matmul(12, 128, 128, 64),
    "softmax_512x2048": lambda: softmax(512, 2048),
    "layer_norm_2048x768": lambda: layer_norm(2048, 768),
    "transpose_1024x2048": lambda: transpose(1024, 2048),
}


def tune_records(name: str, model_kind: str, trials: int, records_dir: Path, seed: int) -> Path:
    """``<records_dir>/<name>_<model_kind>.json``, tuned now unless it already holds ``trials`` records."""
    log = records_dir / f"{name}_{model_kind}.json"
    have = len(sc.load_records(str(log))) if log.exists() else 0
    if have >= trials:
        return log
    task = sc.SearchTask(compute_dag=sc.ComputeDAG(WORKLOADS[name]()), target="llvm")
    model = RandomModel() if model_kind == "random" else LGBMModel(seed=seed)
    policy = sc.SketchPolicy(task, model, params=SketchPolicyParams(population=512, num_iters=2), seed=seed,
                             verbose=0)
    opts = sc.TuningOptions(num_measure_trials=trials - have, num_measures_per_round=16, verbose=0,
                            measure_callbacks=[sc.RecordToFile(str(log))])
    t0 = time.perf_counter()
    task.tune(opts, search_policy=policy)
    print(f"{name} {model_kind}: {trials - have} trials in {time.perf_counter() - t0:.0f} s", flush=True)
    return log


def train(logs: list, seed: int) -> tuple[LGBMModel, int]:
    """One LGBMModel fitted on every record of ``logs`` at once; (model, number of records)."""
    inputs, results = [], []
    for log in logs:
        for inp, res in sc.load_records(str(log)):
            inputs.append(inp)
            results.append(res)
    model = LGBMModel(seed=seed)
    model.update(inputs, results)
    return model, len(inputs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=96)
    ap.add_argument("--records-dir", default=str(ROOT / "benchmarks/results/pretrain_records"))
    ap.add_argument("--out", default=str(ROOT / "cost_model/pretrained/llvm.json"))
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--train-only", action="store_true", help="train on the record files already there")
    opts = ap.parse_args()
    records_dir = Path(opts.records_dir)
    records_dir.mkdir(parents=True, exist_ok=True)
    names = opts.workloads.split(",")
    logs = []
    for name in names:
        for kind in ("random", "lgbm"):
            log = records_dir / f"{name}_{kind}.json"
            if not opts.train_only:
                log = tune_records(name, kind, opts.trials, records_dir, opts.seed)
            if log.exists():
                logs.append(log)
    model, n = train(logs, opts.seed)
    if model.booster is None:
        raise SystemExit(f"nothing to train on in {records_dir}")
    model.save(opts.out)
    with open(opts.out) as fh:
        doc = json.load(fh)
    doc["trained_on"] = {"cpu": cpu_model(), "mcpu": host_cpu(), "workloads": names, "records": n,
                         "when": time.strftime("%Y-%m-%d %H:%M:%S")}
    with open(opts.out, "w") as fh:
        json.dump(doc, fh)
    print(f"wrote {opts.out}: {n} records of {len(logs)} files, {os.path.getsize(opts.out) / 1024:.0f} KiB")


if __name__ == "__main__":
    main()
