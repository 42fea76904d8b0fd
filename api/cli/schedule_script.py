"""``best_schedule.py``: a runnable script that rebuilds the tuned program from its record.

    schedule_script(dag, record_line, target, cost_s, schedule_code) --> Python source

The script holds the DAG (JSON) and the best record line; run with ``python best_schedule.py``
it replays the record on the DAG (the same driver path as the service's artifact:
``program_from_state``: layout rewrite, lowering, build), writes ``best.so`` and its header
``best.h`` beside itself (or under ``--out``), loads the shared library, checks its outputs
against the reference evaluator and times it beside the numpy and torch formulations of the DAG
(``scheduler_core.measure.baseline``: BLAS matmuls, im2col convolutions) at its thread count.
The schedule as Python schedule code (te's manual schedule API) is in its docstring, for reading.
"""

from __future__ import annotations

import json

from scheduler_core.dag.compute_dag import ComputeDAG

_TEMPLATE = '''"""The best schedule autosched found for {name} on {target!r}: {cost_ms:.4g} ms when it was measured.

Run it (with autosched installed):

    python best_schedule.py [--out DIR] [--no-check]

It replays the record below on the DAG below (the program of the service's artifact), writes
DIR/best.so and DIR/best.h (DIR: this script's directory), loads best.so, checks its outputs
against scheduler_core's reference evaluator, and times it beside what you would otherwise call:
numpy (BLAS matmuls, im2col + BLAS convolutions) and torch when installed, at the same threads.

The schedule as Python schedule code (te's manual schedule API; ``s = te.create_schedule(...)``
and one variable per stage, named like the stage):

{schedule}
"""

import argparse
import statistics
from pathlib import Path

import scheduler_core as sc
from scheduler_core.dag.reference import evaluate
from scheduler_core.driver.program import program_from_state
from scheduler_core.base.target import Target
from scheduler_core.codegen.parallel import default_num_threads
from scheduler_core.measure.baseline_timing import compare_with_baselines, comparison_text
from scheduler_core.measure.local_runner import arg_specs, empty_outputs, random_inputs
from scheduler_core.measure.record_file import decode_record

TARGET = {target!r}
DAG_JSON = {dag_json!r}
RECORD = {record!r}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent,
                        help="where best.so and best.h go (default: beside this script)")
    parser.add_argument("--no-check", action="store_true", help="do not check the outputs")
    args = parser.parse_args()

    dag = sc.ComputeDAG.from_json(DAG_JSON)
    inp, _ = decode_record(RECORD, {{dag.workload_key: dag}})
    program = program_from_state(inp.state, TARGET)
    module = program.build()
    if not hasattr(module, "export_library"):
        print(f"built the {{TARGET}} program; run it on a GPU through the service's artifacts")
        return
    args.out.mkdir(parents=True, exist_ok=True)
    so = args.out / "best.so"
    header = module.export_library(so)
    print(f"wrote {{so}} and {{header}}")

    lib = sc.load_module(so)
    specs = arg_specs(list(dag.tensors))
    inputs = random_inputs(specs)
    outputs = empty_outputs(specs)
    it_in, it_out, call_args = iter(inputs), iter(outputs), []
    for _, _, _, is_output in specs:
        call_args.append(next(it_out) if is_output else next(it_in))
    lib(*call_args)
    if not args.no_check:
        expected = evaluate(dag, inputs)
        for got, want in zip(outputs, expected):
            sc.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
        print(f"outputs match the reference evaluator's ({{len(outputs)}} output(s))")
    threads = Target.parse(TARGET).num_cores or default_num_threads()
    tuned_s = statistics.median(lib.time_evaluator(lib.entry_name, sc.cpu(), repeat=5,
                                                   min_repeat_ms=40)(*call_args).results)
    timings = compare_with_baselines(dag, inputs, threads, tuned_s)
    print("best.so " + comparison_text(timings, threads))


if __name__ == "__main__":
    main()
'''


def schedule_script(dag: ComputeDAG, record_line: str, target: str, cost_s: float, schedule_code: str) -> str:
    """The source of ``best_schedule.py`` for the record ``record_line`` (a record JSON line of
    ``dag``) on ``target`` (canonical text); ``cost_s`` is its measured latency in seconds and
    ``schedule_code`` the schedule as Python (``state_to_python``), quoted in the docstring."""
    names = [t.op.name for t in dag.outputs] or ["the DAG"]
    schedule = "\n".join("    " + ln if ln.strip() else "" for ln in schedule_code.strip().splitlines())
    return _TEMPLATE.format(name=", ".join(names), target=target, cost_ms=cost_s * 1e3,
                            schedule=schedule.replace('"""', "'''").replace("\\", "\\\\"),
                            dag_json=json.dumps(json.loads(dag.to_json()), separators=(",", ":")),
                            record=record_line.strip())
