"""Real networks end to end: import, (tune within a time budget,) build, and time beside PyTorch
eager, ``torch.compile`` and ONNX Runtime in one process, batch 1.

    python benchmarks/networks.py [--models resnet18,resnet50,mobilenet_v2,bert_layer,gpt2_block]
        [--time-budget-s 0 | --records FILE] [--threads 2] [--no-compile] [--conv-layout NCHW|NHWC]
        [--population 512] [--out benchmarks/results/networks.json]

For each model (random weights, eval mode):

- ``frontend.from_pytorch`` (torch.fx, or torch.export when fx cannot trace it; convolutions in
  ``--conv-layout``): the import path,
  its time, the number of tensor-program calls and of library calls;
- with ``--records FILE`` the schedules of an earlier run (its ``records`` path) are built and
  timed again, untuned (to see a code generation change on the same schedules);
- with ``--time-budget-s`` > 0 the model's tasks are tuned by ``TaskScheduler`` within that many
  seconds (records in a temporary file, applied with ``ApplyHistoryBest``), 16 measurements per
  round, an evolutionary population of ``--population`` (512, MetaSchedule's default: at Ansor's
  2048 the search took 44 of a 53 s round on a MobileNetV2 conv, at 512 10 of 15-22 s, so a
  30-minute budget measured 1200 programs instead of 417); 0 builds the default schedules
  (untuned);
- the ONNX export of the model (torch's TorchScript exporter, opset 17) imported with
  ``frontend.from_onnx``: whether it imports, and its max relative error against torch;
- times (median seconds per inference, ``--threads`` threads everywhere): ours
  (``GraphModule.time_evaluator``), torch eager, ``torch.compile`` (inductor; ``--no-compile``
  skips it), ONNX Runtime (CPUExecutionProvider, ``intra_op_num_threads`` = threads);
- weights packed at build time (``GraphModule.pre_transformed_calls`` / ``packed_weight_bytes``),
  and, tuned, the same schedules built with ``pack_weights=False`` (each call copies its weight
  into the tuned layout, as during tuning) timed beside ours;
- memory: the executor's planned bytes for call outputs, one buffer per value, the peak of
  live call outputs, and the two largest call outputs;
- max relative error of our output against torch's;
- per task: each call timed alone (``GraphModule.run_individual``) and summed over the task's
  calls (library calls per function), largest first, with its trials and schedule source.

torchvision, transformers and onnxruntime are needed only here (and in tests); a model whose
package is missing is reported as skipped.  Writes the figures, the CPU model and the load
average to ``--out``.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_util import best_of, cpu_model  # noqa: E402  (same folder)

import scheduler_core as sc  # noqa: E402
from scheduler_core.graph import ApplyHistoryBest, build_graph, extract_tasks  # noqa: E402
from scheduler_core.graph.build import plan_memory  # noqa: E402


class _FirstOutput:
    """A Hugging Face block's hidden-state output (older versions return a tuple)."""

    @staticmethod
    def wrap(layer):
        import torch

        class Wrapped(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.layer = layer

            def forward(self, h):
                out = self.layer(h)
                return out[0] if isinstance(out, tuple) else out
        return Wrapped()


def make_model(name: str):
    """(module in eval mode, example inputs) of a benchmark model, random weights."""
    import torch

    from scheduler_core.frontend.pytorch import without_triton

    torch.manual_seed(0)
    if name in ("resnet18", "resnet50", "mobilenet_v2"):
        import torchvision

        module = getattr(torchvision.models, name)(weights=None)
        return module.eval(), (torch.randn(1, 3, 224, 224),)
    if name == "bert_layer":
        with without_triton():  # transformers probes for triton, which brings a second LLVM
            import transformers
            from transformers.models.bert.modeling_bert import BertLayer

        config = transformers.BertConfig(hidden_size=768, num_attention_heads=12, intermediate_size=3072,
                                         attn_implementation="eager")
        return _FirstOutput.wrap(BertLayer(config)).eval(), (torch.randn(1, 128, 768),)
    if name == "gpt2_block":
        with without_triton():
            import transformers
            from transformers.models.gpt2.modeling_gpt2 import GPT2Block

        config = transformers.GPT2Config(n_embd=768, n_head=12, n_positions=128, attn_implementation="eager")
        return _FirstOutput.wrap(GPT2Block(config)).eval(), (torch.randn(1, 128, 768),)
    raise SystemExit(f"unknown model {name!r}")


def _median(fn, number: int, repeat: int) -> float:
    fn()  # warm-up
    return best_of(fn, repeat=repeat, number=number)


def _rel_error(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.abs(got - want).max() / max(float(np.abs(want).max()), 1e-30))


def _per_task(graph, lib, tasks, trials_by_task: list, x_np: list, number: int, repeat: int) -> list:
    """Where a run's time goes: each call timed alone (``GraphModule.run_individual``), summed per
    task (library calls per function), largest first, with the task's trials and schedule source."""
    seconds = lib.run_individual(*x_np, number=number, repeat=repeat)
    index = {t.workload_key: i for i, t in enumerate(tasks)}
    rows: dict = {}
    for call, s in zip(graph.calls, seconds):
        if call.kind == "tir":
            key = graph.functions[call.func].dag.workload_key
            r = rows.setdefault(key, {"task": index.get(key), "function": call.func, "calls": 0, "seconds": 0.0,
                                      "trials": trials_by_task[index[key]] if key in index else 0,
                                      "schedule": lib.schedule_source(call.func)})
        else:
            r = rows.setdefault(call.func, {"task": None, "function": call.func, "calls": 0, "seconds": 0.0,
                                            "trials": 0, "schedule": "library"})
        r["calls"] += 1
        r["seconds"] += float(s)
    total = sum(r["seconds"] for r in rows.values()) or 1.0
    for r in rows.values():
        r["share"] = r["seconds"] / total
    return sorted(rows.values(), key=lambda r: -r["seconds"])


def _trials_in(records: str, tasks: list) -> list:
    """How many records of each task a record file holds."""
    counts = {t.workload_key: 0 for t in tasks}
    for inp, _ in sc.load_records(records):
        if inp.task.workload_key in counts:
            counts[inp.task.workload_key] += 1
    return [counts[t.workload_key] for t in tasks]


def run_model(name: str, budget_s: float, threads: int, compile_: bool, number: int, repeat: int,
              records: str | None = None, conv_layout: str = "NHWC", population: int = 512) -> dict:
    import torch

    from scheduler_core.frontend import from_onnx, from_pytorch

    torch.set_num_threads(threads)
    module, xs = make_model(name)
    x_np = [x.numpy() for x in xs]
    with torch.no_grad():
        want = module(*xs).numpy()
    row: dict = {"model": name, "input_shapes": [list(x.shape) for x in xs], "conv_layout": conv_layout,
                "population": population if budget_s > 0 and not records else None}
    try:
        torch.fx.symbolic_trace(module)
        row["import_path"] = "torch.fx"
    except Exception:
        row["import_path"] = "torch.export"
    t = time.perf_counter()
    graph = from_pytorch(module, xs, conv_layout=conv_layout)
    row["import_s"] = time.perf_counter() - t
    row["tir_calls"] = sum(c.kind == "tir" for c in graph.calls)
    row["library_calls"] = [c.func for c in graph.calls if c.kind != "tir"]
    tasks, weights = extract_tasks(graph, "llvm")
    row["tasks"] = len(tasks)
    t = time.perf_counter()
    trials_by_task = [0] * len(tasks)
    if records:  # re-time an earlier run's schedules (e.g. after a codegen change): no tuning
        row["records"] = records
        trials_by_task = _trials_in(records, tasks)
        row["trials"], row["tuning_wall_s"] = sum(trials_by_task), 0.0
        with ApplyHistoryBest(records):
            lib = build_graph(graph, "llvm")
            unpacked = build_graph(graph, "llvm", pack_weights=False)
    elif budget_s > 0:
        log = os.path.join(tempfile.mkdtemp(prefix="networks_"), f"{name}.json")
        scheduler = sc.TaskScheduler(tasks, weights)
        scheduler.tune(sc.TuningOptions(num_measure_trials=100_000, num_measures_per_round=16, verbose=0,
                                        time_budget_s=budget_s, population=population,
                                        measure_callbacks=[sc.RecordToFile(log)]))
        row["trials"] = int(scheduler.task_cts.sum())
        trials_by_task = [int(n) for n in scheduler.task_cts]
        row["tuning_wall_s"] = time.perf_counter() - t
        row["records"] = log
        with ApplyHistoryBest(log):
            lib = build_graph(graph, "llvm")
            unpacked = build_graph(graph, "llvm", pack_weights=False)
    else:
        lib = build_graph(graph, "llvm")
        unpacked = None
        row["trials"], row["tuning_wall_s"] = 0, 0.0
    row["build_s"] = time.perf_counter() - t - row["tuning_wall_s"]
    got = lib(*x_np)
    row["max_rel_error"] = _rel_error(got, want)
    plan = plan_memory(graph)
    sizes = sorted((int(np.prod(o.type.shape)) * np.dtype(o.type.dtype).itemsize
                    for c in graph.calls for o in c.outputs), reverse=True)
    row["memory"] = {"planned_bytes": plan.planned_bytes, "one_buffer_per_value_bytes": plan.unplanned_bytes,
                     "peak_live_bytes": plan.peak_live_bytes, "two_largest_outputs_bytes": int(sum(sizes[:2]))}
    timer = lib.time_evaluator(number=number, repeat=repeat)
    times = {"ours": float(np.median(timer(*x_np).results))}
    row["weights_packed_at_build"] = {"calls": lib.pre_transformed_calls, "bytes": lib.packed_weight_bytes}
    if unpacked is not None and lib.pre_transformed_calls:  # the same schedules copying weights per call
        row["max_rel_error_unpacked"] = _rel_error(unpacked(*x_np), want)
        times["ours_weights_copied_per_call"] = float(np.median(
            unpacked.time_evaluator(number=number, repeat=repeat)(*x_np).results))
    row["per_task"] = _per_task(graph, lib, tasks, trials_by_task, x_np, number, repeat)
    with torch.no_grad():
        times["torch_eager"] = _median(lambda: module(*xs), number, repeat)
        if compile_:
            compiled = torch.compile(module)
            t = time.perf_counter()
            compiled(*xs)
            row["torch_compile_s"] = time.perf_counter() - t
            times["torch_compile"] = _median(lambda: compiled(*xs), number, repeat)
    buf = io.BytesIO()
    try:
        torch.onnx.export(module, xs, buf, dynamo=False, opset_version=17, input_names=["x"])
        onnx_bytes = buf.getvalue()
        try:
            og = from_onnx(onnx_bytes, conv_layout=conv_layout)
            row["from_onnx"] = {"imports": True, "tir_calls": sum(c.kind == "tir" for c in og.calls),
                                "library_calls": sum(c.kind != "tir" for c in og.calls),
                                "max_rel_error": _rel_error(np.asarray(build_graph(og, "llvm")(*x_np)), want)}
        except Exception as e:  # report, do not stop the benchmark
            row["from_onnx"] = {"imports": False, "error": str(e)[:300]}
        try:
            import onnxruntime as ort

            opts = ort.SessionOptions()
            opts.intra_op_num_threads, opts.inter_op_num_threads = threads, 1
            sess = ort.InferenceSession(onnx_bytes, opts, providers=["CPUExecutionProvider"])
            feed = {"x": x_np[0]}
            row["onnxruntime_max_rel_error"] = _rel_error(sess.run(None, feed)[0], want)
            times["onnxruntime"] = _median(lambda: sess.run(None, feed), number, repeat)
        except ImportError:
            row["onnxruntime"] = "not installed"
    except Exception as e:
        row["onnx_export_error"] = str(e)[:300]
    row["median_s"] = times
    row["speedup_vs"] = {k: v / times["ours"] for k, v in times.items() if k != "ours"}
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="resnet18,resnet50,mobilenet_v2,bert_layer,gpt2_block")
    ap.add_argument("--time-budget-s", type=float, default=0.0, help="tuning seconds per model (0: untuned)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--no-compile", action="store_true", help="skip torch.compile")
    ap.add_argument("--number", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", default="benchmarks/results/networks.json")
    ap.add_argument("--population", type=int, default=512,
                    help="evolutionary population per round (512, MetaSchedule's default: at Ansor's 2048 "
                         "the search takes about 80%% of a round on 2 cores)")
    ap.add_argument("--records", help="build from this record file instead of tuning (one model)")
    ap.add_argument("--conv-layout", choices=("NCHW", "NHWC"), default="NHWC",
                    help="the layout convolutions compute in (frontend conv_layout)")
    args = ap.parse_args()
    doc = {"meta": {"cpu": cpu_model(), "when": time.strftime("%Y-%m-%d %H:%M:%S"), "args": vars(args),
                    "loadavg_before": os.getloadavg()}, "results": []}
    for name in args.models.split(","):
        try:
            row = run_model(name, args.time_budget_s, args.threads, not args.no_compile, args.number, args.repeat,
                            args.records, args.conv_layout, args.population)
        except ImportError as e:
            row = {"model": name, "skipped": f"missing package: {e}"}
        doc["results"].append(row)
        print(json.dumps(row), flush=True)
    doc["meta"]["loadavg_after"] = os.getloadavg()
    Path(args.out).write_text(json.dumps(doc, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
