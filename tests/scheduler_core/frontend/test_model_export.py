"""A whole model exported with its weights and executor, run without the compiler or the graph:

    from_pytorch(conv2d-relu-flatten-linear) with tiled schedules (weights packed at build time)
      --build_graph--> GraphModule --export_library--> model.tar.gz
      --> sc.runtime.load_model in this process and in a fresh interpreter
      --> a C program (cc, model.h, model_run; no Python at all) in a fresh process
    every answer matches torch; a param left unbound is an argument of model_run; a graph with a
    library call exports its entries but no executor, and load_model says why.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile
import textwrap

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import scheduler_core as sc  # noqa: E402
from scheduler_core import te  # noqa: E402
from scheduler_core.base.errors import BuildError, RuntimeArgumentError  # noqa: E402
from scheduler_core.dag.compute_dag import ComputeDAG  # noqa: E402
from scheduler_core.graph import Call, Graph, GraphVar, PrimFunction, TensorType  # noqa: E402
from scheduler_core.runtime.export import find_c_compiler  # noqa: E402
from scheduler_core.schedule.layout_rewrite import has_layout_free_placeholders  # noqa: E402
from tests.scheduler_core.frontend.test_layout_prepack import _imported, _tiled_state  # noqa: E402

MAIN_C = textwrap.dedent("""\
    /* argv: input files, then output files (raw bytes, C order); sizes from the files / argv. */
    #include <stdio.h>
    #include <stdlib.h>
    #include "model.h"

    static void* slurp(const char* path, long* n) {
        FILE* f = fopen(path, "rb"); if (!f) { perror(path); exit(3); }
        fseek(f, 0, SEEK_END); *n = ftell(f); fseek(f, 0, SEEK_SET);
        void* p = malloc(*n ? *n : 1); if (fread(p, 1, *n, f) != (size_t)*n) exit(4);
        fclose(f); return p;
    }

    int main(int argc, char** argv) {
        const void* inputs[MODEL_NUM_INPUTS]; void* outputs[MODEL_NUM_OUTPUTS]; long sizes[MODEL_NUM_OUTPUTS];
        if (argc != 1 + MODEL_NUM_INPUTS + 2 * MODEL_NUM_OUTPUTS) return 2;
        long n;
        for (int k = 0; k < MODEL_NUM_INPUTS; ++k) inputs[k] = slurp(argv[1 + k], &n);
        for (int k = 0; k < MODEL_NUM_OUTPUTS; ++k) {
            sizes[k] = atol(argv[1 + MODEL_NUM_INPUTS + 2 * k + 1]);
            outputs[k] = malloc(sizes[k]);
        }
        int32_t rc = model_run(inputs, outputs);
        if (rc != 0) { fprintf(stderr, "model_run: %d\\n", rc); return 10 + rc; }
        for (int k = 0; k < MODEL_NUM_OUTPUTS; ++k) {
            FILE* f = fopen(argv[1 + MODEL_NUM_INPUTS + 2 * k], "wb");
            fwrite(outputs[k], 1, sizes[k], f); fclose(f);
        }
        return 0;
    }
    """)

LOAD_PY = textwrap.dedent("""\
    import sys, numpy as np
    import scheduler_core as sc
    model = sc.runtime.load_model(sys.argv[1])
    args = [np.load(p) for p in sys.argv[3:]]
    np.save(sys.argv[2], model(*args))
    """)


def _tiled_graph():
    """(x, torch's output, the graph with a tiled schedule on each weight's function)."""
    x, want, graph, tasks = _imported()
    for _, _, func in list(graph.tir_calls()):
        if has_layout_free_placeholders(func.dag):
            task = next(t for t in tasks if t.workload_key == func.workload_key)
            graph = graph.with_function(func.with_state(_tiled_state(task)))
    return x.numpy(), want, graph


def members_of(path) -> dict:
    with tarfile.open(path) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers()}


def run_c(tmp_path, members: dict, args: list, out_specs: list) -> list:
    """Compile MAIN_C against the artifact's header and library, run it in a fresh process."""
    for name in ("model.so", "model.h"):
        (tmp_path / name).write_bytes(members[name])
    (tmp_path / "main.c").write_text(MAIN_C)
    exe = tmp_path / "main"
    subprocess.run([find_c_compiler(), "-O1", "-o", str(exe), str(tmp_path / "main.c"), str(tmp_path / "model.so"),
                    f"-Wl,-rpath,{tmp_path}"], check=True, capture_output=True, text=True)
    argv = [str(exe)]
    for k, a in enumerate(args):
        p = tmp_path / f"in{k}.bin"
        p.write_bytes(np.ascontiguousarray(a).tobytes())
        argv.append(str(p))
    for k, spec in enumerate(out_specs):
        nbytes = int(np.prod(spec["shape"])) * np.dtype(spec["dtype"]).itemsize
        argv += [str(tmp_path / f"out{k}.bin"), str(nbytes)]
    done = subprocess.run(argv, capture_output=True, text=True, env={"OMP_NUM_THREADS": "2"}, timeout=120)
    assert done.returncode == 0, done.stderr
    return [np.fromfile(tmp_path / f"out{k}.bin", spec["dtype"]).reshape(spec["shape"])
            for k, spec in enumerate(out_specs)]


def test_exported_model_runs_standalone_in_python_and_c_matching_torch(tmp_path):
    x, want, graph = _tiled_graph()
    lib = sc.build_graph(graph, "llvm")
    assert lib.pre_transformed_calls == 2
    path = tmp_path / "model.tar.gz"
    data = lib.export_library(path)
    assert path.read_bytes() == data
    members = members_of(path)
    assert sorted(members) == ["graph.json", "model.h", "model.so"]
    gj = json.loads(members["graph.json"])
    ex = gj["executor"]
    assert [s["name"] for s in ex["inputs"]] == [v.name for v in graph.inputs]   # every weight is inside
    assert ex["embedded_params"] == sorted(graph.bound) and ex["packed_weights"] == 2
    assert ex["weight_bytes"] >= sum(a.nbytes for a in graph.bound.values())
    header = members["model.h"].decode()
    assert "int32_t model_run(const void* const* inputs, void* const* outputs);" in header
    for name, func in graph.functions.items():   # each function keeps its own entry
        entry = gj["functions"][name]["entry"]
        assert f"int32_t {entry['symbol']}(" in header and len(entry["args"]) == len(func.dag.tensors)

    model = sc.runtime.load_model(path)   # this process
    np.testing.assert_allclose(model(x), want, rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(model(x), lib(x))
    assert model.time_evaluator(number=2)(x).mean > 0

    np.save(tmp_path / "x.npy", x)   # a fresh interpreter: load_model only
    subprocess.run([sys.executable, "-c", LOAD_PY, str(path), str(tmp_path / "y.npy"), str(tmp_path / "x.npy")],
                   check=True, timeout=120)
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), want, rtol=1e-4, atol=1e-5)

    got, = run_c(tmp_path, members, [x], ex["outputs"])   # C, no Python
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)

    with pytest.raises(RuntimeArgumentError, match=r"argument 0 \(.*\): expected float32\[1, 8, 8, 8\]"):
        model(x[:, :4])
    with pytest.raises(RuntimeArgumentError, match="takes 1 arguments"):
        model(x, x)


def test_an_unbound_param_is_an_argument_of_model_run(tmp_path):
    x, want, graph = _tiled_graph()
    kernel = next(p.name for p in graph.params if graph.bound[p.name].ndim == 4)
    value = graph.bound[kernel]
    free = Graph(graph.inputs, graph.params, graph.calls, graph.outputs, graph.functions,
                 {k: v for k, v in graph.bound.items() if k != kernel})
    path = tmp_path / "free.tar.gz"
    sc.build_graph(free, "llvm").export_library(path)
    model = sc.runtime.load_model(path)
    assert [s["name"] for s in model.inputs] == [graph.inputs[0].name, kernel]
    np.testing.assert_allclose(model(x, value), want, rtol=1e-4, atol=1e-5)
    got, = run_c(tmp_path, members_of(path), [x, value], model.outputs)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_a_graph_with_a_library_call_has_entries_but_no_executor(tmp_path):
    t = TensorType((4,))
    a = te.placeholder((4,), name="a")
    dag = ComputeDAG([a, te.compute((4,), lambda i: a[i] + 1.0, name="inc")])
    graph = Graph((GraphVar("x", t),), (), (Call("tir", "inc", ("x",), (GraphVar("y", t),)),
                                            Call("library", "env.relu", ("y",), (GraphVar("z", t),))),
                  ("z",), {"inc": PrimFunction("inc", dag)})
    path = tmp_path / "lib.tar.gz"   # env.relu is not registered here: built to be exported only
    sc.build_graph(graph, "llvm", check_library=False).export_library(path)
    gj = json.loads(members_of(path)["graph.json"])
    assert gj["executor"] is None and "env.relu" in gj["executor_missing"]
    assert gj["functions"]["inc"]["entry"]["symbol"] == "inc"
    with pytest.raises(BuildError, match="no C executor.*env.relu"):
        sc.runtime.load_model(path)
    with pytest.raises(BuildError, match="not a readable model artifact"):
        (tmp_path / "bad.tar.gz").write_bytes(b"not gzip")
        sc.runtime.load_model(tmp_path / "bad.tar.gz")
