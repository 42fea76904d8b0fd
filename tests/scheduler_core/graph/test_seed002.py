"""Seed 002's TVMScript workflow: ir_module / T / R, BindParams, vm.build, tune_tir, update_func."""

from __future__ import annotations

import importlib.util
import os
import pathlib

import numpy as np
import pytest

import scheduler_core as sc
from scheduler_core import te
from scheduler_core.base.errors import InvalidWorkloadError
from scheduler_core.graph import meta_schedule as ms
from scheduler_core.graph import relax
from scheduler_core.graph.script import IRModule, R, T, Tensor, ir_module

from .models import np_relu  # noqa: F401 -- registers "test.relu"

ROOT = pathlib.Path(__file__).resolve().parents[3]


def _example():
    spec = importlib.util.spec_from_file_location("seed002_model", ROOT / "examples" / "seed002_model.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_ir_module_traces_main_and_binds_params():
    ex = _example()
    mod = ex.MyModuleMixture
    assert isinstance(mod, IRModule) and sorted(mod.functions) == ["linear0", "main"]
    g = mod.graph()
    assert [c.func for c in g.calls] == ["linear0", "env.relu", "env.linear"]
    assert [o.name for c in g.calls for o in c.outputs] == ["lv0", "lv1", "out"]  # the body's own names
    assert [p.name for p in g.free_params] == ["x", "w0", "b0", "w1", "b1"]
    assert mod["linear0"].attrs == {"tir.noalias": True}
    text = mod.script()
    assert "R.call_tir(linear0, (x, w0, b0)" in text and "T.Buffer[(128, 784), \"float32\"]" in text
    params = ex.make_params()
    bound = relax.transform.BindParams("main", params)(mod)
    assert [p.name for p in bound.graph().free_params] == ["x"]
    assert mod.graph().free_params[0].name == "x" and len(mod.graph().free_params) == 5  # mod unchanged
    vm = relax.VirtualMachine(relax.vm.build(bound, target="llvm"), sc.cpu())
    x = np.random.default_rng(0).random((1, 784), dtype=np.float32)
    res = vm["main"](sc.nd.array(x))
    assert isinstance(res, sc.nd.NDArray) and res.shape == (1, 10)
    p = {k: v.numpy() for k, v in params.items()}
    want = np.maximum(x @ p["w0"].T + p["b0"], 0) @ p["w1"].T + p["b1"]
    np.testing.assert_allclose(res.numpy(), want, rtol=1e-4, atol=1e-5)
    assert vm.module.time_evaluator("main", sc.cpu(), number=3)(sc.nd.array(x)).mean > 0


def test_module_edits_and_errors():
    @ir_module
    class Mod:
        @T.prim_func
        def double(A: T.Buffer((8,), "float32"), B: T.Buffer((8,), "float32")):
            return te.compute((8,), lambda i: A[i] * 2.0, name="B")

        @R.function
        def main(a: Tensor((8,), "float32")):
            with R.dataflow():
                b = R.call_tir(double, (a,), (8,), dtype="float32")  # noqa: F821 -- the class's
                c = R.call_tir("test.relu", (b,), (8,), dtype="float32")
                R.output(c)
            return c

    main_mod = IRModule.from_expr(Mod["double"].with_attr("global_symbol", "main"))
    assert sorted(main_mod.functions) == ["main"]
    gv = Mod.get_global_var("double")
    Mod.update_func(gv, main_mod["main"])
    assert Mod["double"].name == "double"
    out = relax.VirtualMachine(relax.vm.build(Mod), "cpu")["main"](np.array([-1, 2] * 4, "float32"))
    np.testing.assert_allclose(out.numpy(), [0, 4] * 4)
    with pytest.raises(InvalidWorkloadError, match="has no function 'nope'"):
        Mod.get_global_var("nope")
    with pytest.raises(InvalidWorkloadError, match="not a param"):
        relax.transform.BindParams("main", {"zz": np.zeros(8, "float32")})(Mod)
    with pytest.raises(InvalidWorkloadError, match="only valid inside an @R.function"):
        R.call_tir("test.relu", (), (8,))
    with pytest.raises(InvalidWorkloadError, match="only valid inside a @T.prim_func"):
        T.func_attr({"a": 1})


def test_prim_func_errors_name_the_parameter():
    with pytest.raises(InvalidWorkloadError, match="declared \\(4,\\) float32 but the body returns \\(8,\\)"):
        @T.prim_func
        def wrong_shape(A: T.Buffer((8,), "float32"), B: T.Buffer((4,), "float32")):
            return te.compute((8,), lambda i: A[i] + 1.0, name="B")
    with pytest.raises(InvalidWorkloadError, match="needs a tensor annotation"):
        @T.prim_func
        def no_annotation(A, B: T.Buffer((8,), "float32")):
            return te.compute((8,), lambda i: A[i] + 1.0, name="B")
    with pytest.raises(InvalidWorkloadError, match="must return its computed output"):
        @T.prim_func
        def returns_input(A: T.Buffer((8,), "float32"), B: T.Buffer((8,), "float32")):
            return A
    with pytest.raises(InvalidWorkloadError, match="reads its output parameter B"):
        @T.prim_func
        def reads_output(A: T.Buffer((8,), "float32"), B: T.Buffer((8,), "float32")):
            return te.compute((8,), lambda i: A[i] + B[i], name="C")


def test_seed002_example_tunes_linear0_and_swaps_it_in(tmp_path, capsys):
    ex = _example()
    config = ms.TuneConfig(max_trials_global=4, num_trials_per_iter=4, population=16, num_iters=1,
                           min_repeat_ms=1.0, repeat=1)
    result = ex.run(4, str(tmp_path / "tune"), config=config, number=20)
    np.testing.assert_allclose(result["out_after"], result["out_before"], rtol=1e-4, atol=1e-5)
    tuned = result["tuned"]
    assert tuned.mod["main"].state is not None and tuned.cost_s > 0
    assert os.path.exists(tuned.log_file)
    assert result["exe_before"].lib.schedule_source("linear0") == "default"
    assert result["exe_after"].lib.schedule_source("linear0") == "manual"
    assert "Y" in tuned.trace
    with capsys.disabled():
        print(f"\nseed 002 with 4 trials: naive {result['naive_s'] * 1e3:.4f} ms, "
              f"untuned {result['before_s'] * 1e3:.4f} ms, tuned {result['after_s'] * 1e3:.4f} ms")
