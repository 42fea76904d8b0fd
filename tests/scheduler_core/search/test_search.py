"""The auto-scheduler end to end: seed 000's workflow, resume, reproducibility, faults.

Fast tier: small matmuls and small populations.  The slow tier runs seed 000's
program as written (1024^3, default SketchPolicy) with only imports changed.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess

import numpy as np
import pytest

import scheduler_core as sc
from cost_model import RandomModel
from scheduler_core.measure.data import MeasureErrorNo as E
from scheduler_core.schedule.loop_state import State
from scheduler_core.search.search_policy import state_key
from sketch_rules import SketchPolicyParams
from tests.workloads import matmul_add

SMALL = SketchPolicyParams(population=64, num_iters=2)


def _task(n=32):
    return sc.SearchTask(compute_dag=sc.ComputeDAG(matmul_add(n, n, n)), target="llvm")


def _canonical(func) -> list:
    """The loop structure of a program: (min, extent, kind) of every loop in order, and
    its allocations (the printed code splits one level at a time, so names differ)."""
    import re
    text = str(func)
    loops = re.findall(r"for \([^,]+, ([^,]+), ([^)]+)\)( \"\w+\")?", text)
    allocs = re.findall(r"allocate\([^,]+, (\w+), \[([^\]]*)\]\)", text)
    return [loops, allocs, text.count(" = ")]


def _record_keys(log):
    return [state_key(i.state) for i, _ in sc.load_records(str(log))]


def test_tune_apply_best_print_best_and_resume_measures_nothing_twice(tmp_path):
    log = tmp_path / "matmul.json"
    task = _task()
    policy = sc.SketchPolicy(task, sc.LGBMModel(seed=0), params=SMALL, seed=0, verbose=0)
    opts = sc.TuningOptions(num_measure_trials=8, num_measures_per_round=4,
                            measure_callbacks=[sc.RecordToFile(str(log))], verbose=0)
    task.tune(opts, search_policy=policy)
    first = _record_keys(log)
    assert len(first) == 8 and len(set(first)) == 8
    assert sum(1 for line in log.read_text().splitlines() if '"dag"' in line) == 1

    sch, args = task.apply_best(str(log))
    func = sc.build(sch, args, "llvm")
    rng = np.random.default_rng(0)
    a, b, c = (rng.random((32, 32), dtype=np.float32) for _ in range(3))
    out = np.empty((32, 32), np.float32)
    func(a, b, c, out)
    np.testing.assert_allclose(out, a @ b + c, rtol=1e-4)

    # print_best's code rebuilds the same program on a fresh schedule.
    code = task.print_best(str(log))
    A, B, C, outt = task.compute_dag.tensors
    s2 = sc.te.create_schedule(outt.op)
    exec(code, {"s": s2, "te": sc.te, "matmul": outt.op.input_tensors()[0], "out": outt})
    best = sc.load_best_record(str(log), dags={task.workload_key: task.compute_dag})[0].state
    assert _canonical(sc.lower(s2, list(task.compute_dag.tensors))) == _canonical(sc.lower(best))

    # Resume: cost model from the records, measured states preloaded, none measured again.
    model = sc.LGBMModel(seed=0)
    model.update_from_file(str(log))
    policy2 = sc.SketchPolicy(task, model, params=SMALL, seed=1, verbose=0,
                              init_search_callbacks=[sc.PreloadMeasuredStates(str(log))])
    assert len(policy2.measured) == 8
    task.tune(sc.TuningOptions(num_measure_trials=4, num_measures_per_round=4, verbose=0,
                               measure_callbacks=[sc.RecordToFile(str(log))]), search_policy=policy2)
    keys = _record_keys(log)
    assert len(keys) == 12 and len(set(keys)) == 12


class _HashRunner:
    """A runner whose cost is a fixed function of the state, so two searches see the
    same measurements (timings on a shared machine are never repeatable)."""

    def run(self, inputs, build_results, verbose=0):
        import hashlib
        import time as _t

        from scheduler_core.measure.data import MeasureResult
        out = []
        for inp in inputs:
            h = int(hashlib.sha256(state_key(inp.state).encode()).hexdigest()[:8], 16)
            out.append(MeasureResult((1e-3 * (1 + h / 2**32),), 0, "", 0.0, _t.time()))
        return out


class _NoBuilder:
    """A builder for ``_HashRunner``, which never loads a program: every input "built", no file."""

    def build(self, inputs, verbose=0):
        from scheduler_core.measure.data import BuildResult
        return [BuildResult("", tuple(inp.task.compute_dag.tensors), 0, "", 0.0) for inp in inputs]


def test_same_seed_gives_the_same_search(tmp_path):
    runs = []
    for k in range(2):
        log = tmp_path / f"run{k}.json"
        task = _task(16)
        policy = sc.SketchPolicy(task, sc.LGBMModel(seed=5, num_warmup_sample=4), params=SMALL, seed=3,
                                 verbose=0)
        task.tune(sc.TuningOptions(num_measure_trials=12, num_measures_per_round=4, verbose=0,
                                   builder=_NoBuilder(), runner=_HashRunner(),
                                   measure_callbacks=[sc.RecordToFile(str(log))]),
                  search_policy=policy)
        runs.append(_record_keys(log))
    assert runs[0] == runs[1] and len(runs[0]) == 12


_FAULTS = {
    "crash": "volatile int* p = 0; *p = 1; return 0;",
    "hang": "for (;;) {} return 0;",
    "zeros": "for (int k = 0; k < %d; ++k) out[k] = 0.0f; return 0;",
}


class _FaultyBuilder:
    """A LocalBuilder whose first three programs are replaced by crashing, hanging
    and wrong libraries (the rest are built for real)."""

    def __init__(self, libs):
        self.inner = sc.LocalBuilder(n_parallel=2)
        self.libs = list(libs.values())

    def build(self, inputs, verbose=0):
        out = self.inner.build(inputs, verbose)
        for k in range(min(len(self.libs), len(out))):
            out[k] = dataclasses.replace(out[k], filename=self.libs.pop(0))
        return out


def _fault_libs(tmp_path, n):
    task = _task(n)
    meta = sc.build(State.from_dag(task.compute_dag), list(task.compute_dag.tensors), "llvm",
                    name="default_function").signature.to_meta_json()
    libs = {}
    for kind, body in _FAULTS.items():
        src = tmp_path / f"{kind}.c"
        body = body % (n * n) if "%d" in body else body
        src.write_text("#include <stdint.h>\n"
                       f"const char __autosched_meta_default_function[] = {json.dumps(meta)};\n"
                       "int32_t default_function(float* A, float* B, float* C, float* out) "
                       f"{{ {body} }}\n")
        lib = tmp_path / f"{kind}.so"
        subprocess.run(["cc", "-shared", "-fPIC", "-O0", "-o", str(lib), str(src)], check=True)
        libs[kind] = str(lib)
    return libs


def test_crash_hang_and_wrong_answer_are_error_records_and_the_search_completes(tmp_path):
    n = 16
    log = tmp_path / "faults.json"
    task = _task(n)
    builder = _FaultyBuilder(_fault_libs(tmp_path, n))
    runner = sc.LocalRunner(timeout_s=3, check_correctness=True)
    policy = sc.SketchPolicy(task, RandomModel(rng=np.random.default_rng(0)), params=SMALL, seed=0, verbose=0)
    task.tune(sc.TuningOptions(num_measure_trials=8, num_measures_per_round=8, verbose=0, builder=builder,
                               runner=runner, measure_callbacks=[sc.RecordToFile(str(log))]),
              search_policy=policy)
    codes = [r.error_no for _, r in sc.load_records(str(log))]
    assert len(codes) == 8
    assert codes[:3] == [E.RUNTIME_DEVICE, E.RUN_TIMEOUT, E.WRONG_ANSWER]
    assert codes[3:].count(E.NO_ERROR) >= 3
    best = sc.load_best_record(str(log))
    assert best is not None and best[1].error_no == E.NO_ERROR


@pytest.mark.slow
def test_seed000_workflow_at_full_size(tmp_path):
    """Seed 000's flow at 1024^3 with the default policy (population 2048): tune 10 trials,
    apply_best, check vs numpy, print_best, resume 8 more (examples/tune_matmul.py)."""
    import sys
    from pathlib import Path
    script = Path(__file__).resolve().parents[3] / "examples" / "tune_matmul.py"
    res = subprocess.run([sys.executable, str(script), "--n", "1024", "--trials", "10",
                          "--log", str(tmp_path / "matmul.json")],
                         capture_output=True, text=True, timeout=1800, cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "best program matches numpy" in res.stdout and "Resume search:" in res.stdout


def test_sketch_policy_from_options_is_the_one_assembly():
    """``SketchPolicy.from_options``: the options' population, generations, seed (+ offset) and
    verbosity; an LGBMModel unless a cost model is given."""
    from cost_model import LGBMModel
    from scheduler_core.search.search_policy import SketchPolicy
    task = sc.SearchTask(func=matmul_add, args=(8, 8, 8), target="llvm")
    options = sc.TuningOptions(population=12, num_iters=2, seed=5, verbose=0)
    policy = SketchPolicy.from_options(task, options, seed_offset=3)
    assert (policy.params.population, policy.params.num_iters, policy.verbose) == (12, 2, 0)
    assert isinstance(policy.cost_model, LGBMModel)
    assert policy.rng.integers(1 << 30) == np.random.default_rng(8).integers(1 << 30)
    model = RandomModel()
    assert SketchPolicy.from_options(task, options, cost_model=model).cost_model is model
