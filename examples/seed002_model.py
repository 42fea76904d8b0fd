"""Seed 002 end to end: a model mixing a tensor program and library functions, tuned in place.

The MLP 784 -> 128 -> 10 of the seed: ``linear0`` is a tensor program (written in ``te``),
``env.relu`` a numpy function and ``env.linear`` a torch one (numpy when torch is missing).
The program builds and times the model, tunes ``linear0`` with ``ms.tune_tir``, swaps the
tuned function back in, checks that the output is unchanged and times the model again.

    python examples/seed002_model.py [trials=64] [work_dir=./tune_tmp]

Only the imports and the prim_func body differ from the seed's TVM program.
"""
# ruff: noqa: F821 -- TVMScript: ruff reads the dtype strings of T.Buffer[...] as forward references

import shutil
import sys

import numpy as np

import scheduler_core as sc
from scheduler_core import te
from scheduler_core.graph import meta_schedule as ms
from scheduler_core.graph import relax
from scheduler_core.graph.script import IRModule, R, T, Tensor, ir_module

try:
    import torch
except ImportError:  # torch is the optional extra .[torch]
    torch = None


@ir_module
class MyModuleMixture:
    @T.prim_func
    def linear0(X: T.Buffer[(1, 784), "float32"],
                W: T.Buffer[(128, 784), "float32"],
                B: T.Buffer[(128,), "float32"],
                Z: T.Buffer[(1, 128), "float32"]):
        T.func_attr({"global_symbol": "linear0", "tir.noalias": True})
        k = te.reduce_axis((0, 784), name="k")
        Y = te.compute((1, 128), lambda i, j: te.sum(X[i, k] * W[j, k], axis=k), name="Y")
        return te.compute((1, 128), lambda i, j: Y[i, j] + B[j], name="Z")

    @R.function
    def main(x: Tensor((1, 784), "float32"),
             w0: Tensor((128, 784), "float32"),
             b0: Tensor((128,), "float32"),
             w1: Tensor((10, 128), "float32"),
             b1: Tensor((10,), "float32")):
        with R.dataflow():
            lv0 = R.call_tir(linear0, (x, w0, b0), (1, 128), dtype="float32")  # the class's linear0
            lv1 = R.call_tir("env.relu", (lv0,), (1, 128), dtype="float32")
            out = R.call_tir("env.linear", (lv1, w1, b1), (1, 10), dtype="float32")
            R.output(out)
        return out


@sc.register_func("env.linear", override=True)
def torch_linear(x: sc.nd.NDArray, w: sc.nd.NDArray, b: sc.nd.NDArray, out: sc.nd.NDArray):
    if torch is not None:
        x_torch, w_torch, b_torch, out_torch = (torch.from_dlpack(a) for a in (x, w, b, out))
        torch.mm(x_torch, w_torch.T, out=out_torch)
        torch.add(out_torch, b_torch, out=out_torch)
    else:
        np.add(np.asarray(x) @ np.asarray(w).T, np.asarray(b), out=np.asarray(out))


@sc.register_func("env.relu", override=True)
def lnumpy_relu(x: sc.nd.NDArray, out: sc.nd.NDArray):
    np.maximum(np.asarray(x), 0, out=np.asarray(out))  # np.asarray: the NDArray's own memory


def make_params(seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    shapes = {"w0": (128, 784), "b0": (128,), "w1": (10, 128), "b1": (10,)}
    return {k: sc.nd.array((rng.standard_normal(s) * 0.05).astype("float32")) for k, s in shapes.items()}


def run(trials: int = 64, work_dir: str = "./tune_tmp", config: ms.TuneConfig | None = None,
        number: int = 100) -> dict:
    """The seed's workflow; returns the times (seconds), the outputs and the tuned module."""
    nd_params = make_params()
    data_nd = sc.nd.array(np.random.default_rng(1).random((1, 784), dtype=np.float32))

    MyModuleWithParams = relax.transform.BindParams("main", nd_params)(MyModuleMixture)
    ex = relax.vm.build(MyModuleWithParams, target="llvm")
    vm = relax.VirtualMachine(ex, sc.cpu())
    nd_res = vm["main"](data_nd)
    ftimer = vm.module.time_evaluator("main", sc.cpu(), number=number, repeat=5)
    before = ftimer(data_nd).median
    print(f"MyModuleWithParams time-cost: {before * 1e3:.4f} ms "
          f"(linear0: {ex.lib.schedule_source('linear0')} schedule)")

    # the seed's untuned linear0 is its loop nest as written: the naive loops (sc.State.from_dag)
    naive = MyModuleWithParams.copy()
    naive.update_func(naive.get_global_var("linear0"),
                      naive["linear0"].with_state(sc.State.from_dag(naive["linear0"].dag)))
    vm_naive = relax.VirtualMachine(relax.vm.build(naive, target="llvm"), sc.cpu())
    naive_s = vm_naive.module.time_evaluator("main", sc.cpu(), number=number, repeat=5)(data_nd).median
    print(f"with linear0's naive loops: {naive_s * 1e3:.4f} ms")

    mod_linear = IRModule.from_expr(MyModuleMixture["linear0"].with_attr("global_symbol", "main"))
    print(mod_linear.script())
    sch_tuned_linear = ms.tune_tir(
        mod=mod_linear,
        target="llvm --num-cores=1",
        config=config or ms.TuneConfig(max_trials_global=trials, num_trials_per_iter=min(trials, 64)),
        work_dir=work_dir,
        task_name="main",
    )
    MyModuleWithParams2 = relax.transform.BindParams("main", nd_params)(MyModuleMixture)
    new_func = sch_tuned_linear.mod["main"].with_attr("global_symbol", "linear0")
    gv = MyModuleWithParams2.get_global_var("linear0")
    MyModuleWithParams2.update_func(gv, new_func)

    ex2 = relax.vm.build(MyModuleWithParams2, target="llvm")
    vm2 = relax.VirtualMachine(ex2, sc.cpu())
    nd_res2 = vm2["main"](data_nd)
    np.testing.assert_allclose(nd_res2.numpy(), nd_res.numpy(), rtol=1e-4, atol=1e-5)
    after = vm2.module.time_evaluator("main", sc.cpu(), number=number, repeat=5)(data_nd).median
    print(f"MyModuleWithParams2 time-cost: {after * 1e3:.4f} ms (tuned linear0: "
          f"{sch_tuned_linear.cost_s * 1e3:.4f} ms measured; before tuning the model took {before * 1e3:.4f} ms)")
    return {"naive_s": naive_s, "before_s": before, "after_s": after, "out_before": nd_res.numpy(),
            "out_after": nd_res2.numpy(), "tuned": sch_tuned_linear, "exe_before": ex, "exe_after": ex2}


if __name__ == "__main__":
    n_trials = int(sys.argv[1]) if len(sys.argv) > 1 else 64
    out_dir = sys.argv[2] if len(sys.argv) > 2 else "./tune_tmp"
    shutil.rmtree(out_dir, ignore_errors=True)
    result = run(n_trials, out_dir)
    print(f"model with linear0 naive {result['naive_s'] * 1e3:.4f} ms, default schedule "
          f"{result['before_s'] * 1e3:.4f} ms, tuned {result['after_s'] * 1e3:.4f} ms "
          f"({result['naive_s'] / result['after_s']:.2f}x / {result['before_s'] / result['after_s']:.2f}x)")
