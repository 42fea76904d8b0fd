"""TVM's spelling: seed 000 as written for TVM, with ``import scheduler_core as tvm`` and
``tvm.auto_scheduler.*``; ``Target(str)`` parses; ``sc.relax`` / ``sc.meta_schedule``; a target
for a CPU this host is not is refused for measurement; ``autosched records show|best|distill``
on the local record file."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

import scheduler_core as tvm  # the seeds say ``import tvm``
from api.cli import app
from scheduler_core import auto_scheduler
from scheduler_core.base.errors import InvalidTargetError
from scheduler_core.base.target import Target
from sketch_rules.params import SketchPolicyParams
from tests.scheduler_core.test_seeds import matmul_add as seed000_matmul_add

# seed 000's workload, registered as the seed does
spelling_matmul_add = auto_scheduler.register_workload(seed000_matmul_add)


def test_seed000_runs_with_tvm_names_and_the_record_file_commands(tmp_path):
    target = tvm.target.Target("llvm")
    N = L = M = 64
    task = tvm.auto_scheduler.SearchTask(func=spelling_matmul_add, args=(N, L, M, "float32"), target=target)
    log_file = str(tmp_path / "matmul.json")
    small = {"population": 32, "num_iters": 1, "min_repeat_ms": 5}  # the seed's defaults search for minutes
    tune_option = auto_scheduler.TuningOptions(num_measure_trials=4, num_measures_per_round=4, **small,
                                               measure_callbacks=[auto_scheduler.RecordToFile(log_file)])
    task.tune(tune_option)
    sch, args = task.apply_best(log_file)
    func = tvm.build(sch, args, target)
    a, b, c = (np.random.uniform(size=(N, N)).astype(np.float32) for _ in range(3))
    dev = tvm.cpu()
    out = tvm.nd.empty((N, M), device=dev)
    func(tvm.nd.array(a, device=dev), tvm.nd.array(b, device=dev), tvm.nd.array(c, device=dev), out)
    np.testing.assert_allclose(out.numpy(), a @ b + c, rtol=1e-4)
    assert "s[matmul]" in task.print_best(log_file) or "s[out]" in task.print_best(log_file)
    # resume_search of the seed, with XGBModel (LightGBM here)
    cost_model = auto_scheduler.XGBModel()
    cost_model.update_from_file(log_file)
    search_policy = auto_scheduler.SketchPolicy(
        task, cost_model, params=SketchPolicyParams(population=32, num_iters=1),
        init_search_callbacks=[auto_scheduler.PreloadMeasuredStates(log_file)])
    task.tune(auto_scheduler.TuningOptions(num_measure_trials=2, num_measures_per_round=2, **small,
                                           measure_callbacks=[auto_scheduler.RecordToFile(log_file)]),
              search_policy=search_policy)
    assert len(auto_scheduler.load_records(log_file)) == 6
    assert auto_scheduler.XGBModel is auto_scheduler.LGBMModel

    cli = CliRunner()
    shown = cli.invoke(app, ["records", "show", log_file])
    assert shown.exit_code == 0 and task.workload_key in shown.stdout and " 6 " in shown.stdout, shown.output
    best = cli.invoke(app, ["records", "best", log_file, "--target", "llvm"])
    assert best.exit_code == 0 and best.stdout.startswith("best ") and "s[matmul]" in best.stdout, best.output
    distilled = tmp_path / "best.json"
    res = cli.invoke(app, ["records", "distill", log_file, str(distilled)])
    assert res.exit_code == 0 and "1 record(s)" in res.stdout, res.output
    lines = [json.loads(ln) for ln in distilled.read_text().splitlines()]
    assert sum(1 for ln in lines if "i" in ln) == 1
    missing = cli.invoke(app, ["records", "best", str(tmp_path / "none.json")])
    assert missing.exit_code == 1 and "none.json" in missing.output


def test_target_strings_parse_as_tvm_does():
    text = "llvm -mcpu=skylake-avx512 -num-cores=4"
    assert tvm.Target(text) == Target.parse(text) and str(tvm.Target(text)) == text
    assert str(tvm.Target("llvm -num-cores=4")) == "llvm -num-cores=4"
    assert tvm.Target("llvm") == Target.parse("llvm") and tvm.Target("llvm").is_host
    with pytest.raises(InvalidTargetError, match="unknown target kind 'lvm'; the kinds are: llvm, cuda"):
        tvm.Target("lvm")
    with pytest.raises(InvalidTargetError, match="unknown option '-mcpux'"):
        tvm.Target("llvm -mcpux=znver3")


def test_tvm_namespaces_are_attributes():
    assert tvm.auto_scheduler is auto_scheduler
    assert tvm.auto_scheduler.SearchTask is tvm.SearchTask and tvm.auto_scheduler.TuningOptions is tvm.TuningOptions
    assert tvm.relax.VirtualMachine and tvm.relax.transform.BindParams
    assert tvm.meta_schedule.tune_tir and tvm.meta_schedule.TuneConfig


def test_a_target_for_another_cpu_is_refused_for_measurement():
    host = Target.parse("llvm")
    for feature in ("avx512f", "avx512fp16", "amx-tile"):
        if feature not in host.features:
            foreign = Target.parse(f"llvm -mattr=+{feature}")
            break
    else:
        pytest.skip("this host has every feature tried")
    assert foreign.missing_on_host() == [feature]
    dag = tvm.ComputeDAG(spelling_matmul_add(8, 8, 8, "float32"))
    inp = tvm.MeasureInput(tvm.Task.create(dag, foreign), tvm.State.from_dag(dag))
    refused = rf"{feature}, which this host's CPU .* lacks.*'llvm'"
    with tvm.LocalRunner() as runner, pytest.raises(InvalidTargetError, match=refused):
        runner.run([inp], [tvm.BuildResult("", (), 0, "", 0.0)])
    assert host.missing_on_host() == [] and Target.parse("cuda").missing_on_host() == []
