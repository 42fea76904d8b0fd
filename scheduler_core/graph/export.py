"""A compiled model as one standalone artifact: TVM's ``lib.export_library`` for a GraphModule.

    GraphModule (build_graph: programs, bound weights, packed weights, memory plan)
      --export_model--> model.tar.gz
        model.so    one C entry per compiled program (``dense0``: the calling convention of
                    docs/calling_convention.md, weights as arguments in their original layout);
                    when every call is a tensor program also the executor: ``model_run`` with
                    the bound weights inside the library (packed in the layouts the tuned
                    programs read, as the GraphModule packed them), the calls in order and the
                    intermediates in one workspace laid out by the memory plan
        model.h     the prototypes, the executor's inputs and outputs with shapes and dtypes
        graph.json  the graph (Graph.to_json) with each function's ``entry`` and ``executor``

    cc -c executor.c (generated) ; cc -c weights.s (.incbin of the weight bytes)
    cc -shared -o model.so <program objects> executor.o weights.o -lgomp -lpthread -lm

The executor, in C (the header repeats it)::

    int32_t model_run(const void* const* inputs, void* const* outputs);
    int32_t model_run_with_workspace(const void* const* inputs, void* const* outputs, void* workspace);
    extern const uint64_t model_workspace_bytes;

``inputs``: the graph's inputs, then its params that have no weight in the library (in the
graph's order); ``outputs``: one caller-owned C-contiguous array per graph output.  No array may
overlap another.  ``model_run`` allocates its workspace (``model_workspace_bytes``, 64-byte
aligned) per call and frees it, so it is reentrant; ``model_run_with_workspace`` uses the
caller's (64-byte aligned, at least that many bytes; one call at a time per workspace).  Both
return 0, or the first nonzero code of a program (bits: 1 a failed allocation, 2 an index read
from a tensor outside the tensor it indexes), 1 when the workspace cannot be allocated.

A model with library calls (Python functions: ``Call.kind == "library"``) has no executor in C:
its library keeps the per-program entries, graph.json's ``executor`` is null and
``executor_missing`` says which calls; such a model runs with :func:`build_graph` only.
:func:`scheduler_core.runtime.load_model` loads the artifact back (ctypes, no compiler).

Weights are embedded with the assembler's ``.incbin``, so their size does not go through a C
parser; they are read-only data of the library.  Every weight starts on a 64-byte boundary.
"""

from __future__ import annotations

import io
import json
import tarfile
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from scheduler_core.base.c_names import comment_text
from scheduler_core.base.errors import BuildError
from scheduler_core.dag.tensor import PlaceholderOp
from scheduler_core.runtime.export import header_text, link_shared, run_c_compiler

LIBRARY_NAME = "model.so"
HEADER_NAME = "model.h"
GRAPH_NAME = "graph.json"
# the C symbols of the executor; build_graph names no program after them
EXECUTOR_SYMBOLS = ("model_run", "model_run_with_workspace", "model_workspace_bytes", "autosched_model_weights")
WEIGHT_ALIGN = 64
COMPILE_TIMEOUT_S = 300


def arg_order(dag) -> list:
    """``[["input", k] | ["output", k], ...]``: how a function's C arguments map to its call's
    arguments and outputs (the DAG's tensors in order)."""
    order, n_in, n_out = [], 0, 0
    for t in dag.tensors:
        if isinstance(t.op, PlaceholderOp):
            order.append(["input", n_in])
            n_in += 1
        else:
            order.append(["output", n_out])
            n_out += 1
    return order


def _spec(name: str, a_type) -> dict:
    return {"name": name, "shape": [int(d) for d in a_type.shape], "dtype": str(a_type.dtype)}


def _nbytes(t) -> int:
    return int(np.prod(t.shape, dtype=np.int64)) * np.dtype(t.dtype).itemsize


class _Weights:
    """The bytes of the embedded weights: each array once, at a 64-byte aligned offset."""

    def __init__(self):
        self.offsets: dict = {}
        self.chunks: list = []
        self.size = 0

    def offset(self, key, array: np.ndarray) -> int:
        if key not in self.offsets:
            start = -(-self.size // WEIGHT_ALIGN) * WEIGHT_ALIGN
            if start > self.size:
                self.chunks.append(b"\0" * (start - self.size))
            data = np.ascontiguousarray(array).tobytes()
            self.chunks.append(data)
            self.offsets[key] = start
            self.size = start + len(data)
        return self.offsets[key]


def _executor_source(lib, weights: _Weights) -> tuple[str, dict]:
    """The C source of ``model_run`` and the executor's description for graph.json."""
    graph, plan = lib.graph, lib.plan
    values = lib.values()
    runtime_args = [*graph.inputs, *graph.free_params]
    input_index = {v.name: k for k, v in enumerate(runtime_args)}
    output_index: dict = {}
    for k, name in enumerate(graph.outputs):
        output_index.setdefault(name, k)
    produced = {o.name for c in graph.calls for o in c.outputs}
    assignment = lib.memory_plan.assignment
    packed = lib.packed_weights

    def pointer(ref) -> str:
        kind, key = ref
        if kind == "packed":
            return f"(void*)(W + {weights.offset(('packed', key), packed[key])})"
        if key in input_index:
            return f"(void*)inputs[{input_index[key]}]"
        if key in graph.bound:
            return f"(void*)(W + {weights.offset(('value', key), values[key])})"
        if key in output_index and key in produced:
            return f"outputs[{output_index[key]}]"
        block, offset, _, _ = assignment[key]
        if block != 0:
            raise BuildError(f"value {key!r} is planned outside the workspace but is not a graph output")
        return f"(void*)(ws + {offset})"

    prototypes, body = {}, []
    for step in plan:
        module = step.program.build()
        sig = module.signature
        if sig.scalar_params:
            raise BuildError(f"{sig.name} has symbolic sizes {list(sig.scalar_params)}: a model's executor needs "
                             "concrete shapes")
        prototypes[sig.name] = f"int32_t {sig.name}({', '.join(['void*'] * len(sig.params)) or 'void'});"
        args = ", ".join(pointer(r) for r in step.args)
        body.append(f"    if ((rc = {sig.name}({args})) != 0) return rc;")
    types = graph.value_types()
    for k, name in enumerate(graph.outputs):  # an output that no call wrote there: copy it
        if output_index[name] == k and name in produced:
            continue
        source = pointer(("value", name)) if output_index[name] == k else f"outputs[{output_index[name]}]"
        body.append(f"    memcpy(outputs[{k}], {source}, {_nbytes(types[name])});")
    ws_bytes = int(lib.memory_plan.storage[0]) if lib.memory_plan.storage else 0
    weights_decl = ("extern const unsigned char autosched_model_weights[];\n"
                    "#define W ((unsigned char*)autosched_model_weights)" if weights.size
                    else "#define W ((unsigned char*)0)")
    source = "\n".join([
        "/* The model's executor, generated by scheduler_core.graph.export. */",
        "#include <stdint.h>",
        "#include <stdlib.h>",
        "#include <string.h>",
        "",
        *prototypes.values(),
        weights_decl,
        "",
        f"const uint64_t model_workspace_bytes = {ws_bytes}ULL;",
        "",
        "int32_t model_run_with_workspace(const void* const* inputs, void* const* outputs, void* workspace) {",
        "    unsigned char* ws = (unsigned char*)workspace;",
        "    int32_t rc;",
        "    (void)inputs; (void)outputs; (void)ws;",
        *body,
        "    return 0;",
        "}",
        "",
        "int32_t model_run(const void* const* inputs, void* const* outputs) {",
        "    void* ws = NULL;",
        f"    if ({ws_bytes}ULL && posix_memalign(&ws, {WEIGHT_ALIGN}, {max(ws_bytes, 1)}ULL) != 0) return 1;",
        "    int32_t rc = model_run_with_workspace(inputs, outputs, ws);",
        "    free(ws);",
        "    return rc;",
        "}",
        "",
    ])
    description = {
        "symbol": "model_run", "workspace_symbol": "model_run_with_workspace",
        "workspace_bytes": ws_bytes, "workspace_align": WEIGHT_ALIGN,
        "inputs": [_spec(v.name, v.type) for v in runtime_args],
        "outputs": [_spec(name, types[name]) for name in graph.outputs],
        "embedded_params": sorted(graph.bound),
        "packed_weights": len(packed), "weight_bytes": weights.size,
    }
    return source, description


def _executor_header(description: dict) -> str:
    def listing(specs: list) -> list:
        return [f" *   [{k}] {s['name']}: {s['dtype']}[{', '.join(map(str, s['shape']))}]"
                for k, s in enumerate(specs)]
    lines = [
        "/* The whole model (scheduler_core.graph.export): run every call in order.",
        " *   inputs[k]: the graph's inputs, then its params without a weight in this library:",
        *listing(description["inputs"]),
        " *   outputs[k]: caller-owned arrays, written in full:",
        *listing(description["outputs"]),
        " * Every array is C-contiguous (row-major), aligned for its element type; no two overlap.",
        f" * Embedded weights (read-only, in the layouts the programs read): {len(description['embedded_params'])} "
        f"params, {description['weight_bytes']} bytes.",
        " * model_run allocates its workspace per call (reentrant); model_run_with_workspace uses the",
        f" * caller's: model_workspace_bytes ({description['workspace_bytes']}) bytes, 64-byte aligned, one call at a",
        " * time per workspace.  Returns 0, else the first nonzero code of a program (bits: 1 a failed",
        " * allocation, 2 an index read outside the tensor it indexes), 1 when the workspace could",
        " * not be allocated. */",
    ]
    lines = [comment_text(x) if x.startswith(" *   [") else x for x in lines]
    return "\n".join([
        "#ifndef AUTOSCHED_MODEL_RUN_H",
        "#define AUTOSCHED_MODEL_RUN_H",
        "#include <stdint.h>",
        "#ifdef __cplusplus",
        'extern "C" {',
        "#endif",
        *lines,
        "int32_t model_run(const void* const* inputs, void* const* outputs);",
        "int32_t model_run_with_workspace(const void* const* inputs, void* const* outputs, void* workspace);",
        "extern const uint64_t model_workspace_bytes;",
        f"#define MODEL_WORKSPACE_BYTES {description['workspace_bytes']}ULL",
        f"#define MODEL_NUM_INPUTS {len(description['inputs'])}",
        f"#define MODEL_NUM_OUTPUTS {len(description['outputs'])}",
        "#ifdef __cplusplus",
        "}",
        "#endif",
        "#endif",
        "",
    ])


def _weights_object(data: bytes, tmp: Path) -> Path:
    blob = tmp / "weights.bin"
    blob.write_bytes(data)
    asm = tmp / "weights.s"
    asm.write_text("\n".join([
        "    .section .rodata",
        f"    .balign {WEIGHT_ALIGN}",
        "    .globl autosched_model_weights",
        "    .hidden autosched_model_weights",
        "    .type autosched_model_weights, @object",
        "autosched_model_weights:",
        f'    .incbin "{blob}"',
        f"    .size autosched_model_weights, {len(data)}",
        '    .section .note.GNU-stack,"",@progbits',
        "",
    ]))
    obj = tmp / "weights.o"
    run_c_compiler(["-c", "-o", str(obj), str(asm)], "assembling the embedded weights", COMPILE_TIMEOUT_S)
    return obj


def export_model(lib, path: Any = None, entry_info: Mapping[str, dict] | None = None) -> bytes:
    """The ``.tar.gz`` bytes of GraphModule ``lib`` (module docstring), also written to ``path``
    when given.  ``entry_info``: ``{function name: {field: value}}`` merged into that function's
    ``entry`` in graph.json (the service adds the task id and whether the schedule is tuned).

    Raises BuildError when a program, the executor or the weights do not compile or link
    (the compiler's message included), or a program has symbolic sizes (no executor then).
    """
    graph = lib.graph
    library_calls = sorted({c.func for c in graph.calls if c.kind == "library"})
    programs: dict = {}  # C symbol -> Module: every function's entry, then the packed variants
    for cf in lib.functions.values():
        module = cf.program.build()
        programs.setdefault(module.signature.name, module)
    data = graph.to_json()
    for name, cf in lib.functions.items():
        data["functions"][name]["entry"] = {
            "symbol": cf.program.build().signature.name, "library": LIBRARY_NAME,
            "schedule": cf.source, "cost_s": cf.record_cost_s, "workload_key": cf.workload_key,
            "args": arg_order(graph.functions[name].dag), **dict((entry_info or {}).get(name, {}))}
    with tempfile.TemporaryDirectory(prefix="autosched_export_") as tmp_name:
        tmp = Path(tmp_name)
        objects = []
        if library_calls:
            data["executor"] = None
            data["executor_missing"] = (f"the graph calls library functions ({', '.join(library_calls)}), which run "
                                        "in Python: no C executor; each tensor program has its entry")
        else:
            weights = _Weights()
            source, description = _executor_source(lib, weights)
            for step in lib.plan:  # the variants reading packed weights
                module = step.program.build()
                programs.setdefault(module.signature.name, module)
            c_file = tmp / "executor.c"
            c_file.write_text(source)
            obj = tmp / "executor.o"
            run_c_compiler(["-c", "-O2", "-fPIC", "-std=c11", "-o", str(obj), str(c_file)],
                           "compiling the model executor", COMPILE_TIMEOUT_S)
            objects.append(obj)
            if weights.size:
                objects.append(_weights_object(b"".join(weights.chunks), tmp))
            data["executor"] = description
        headers = [header_text(m.signature, library_name=LIBRARY_NAME) for m in programs.values()]
        if data["executor"]:
            headers.append(_executor_header(data["executor"]))
        for sym, module in programs.items():
            obj = tmp / f"{sym}.o"
            obj.write_bytes(module.object_code())
            objects.append(obj)
        so = tmp / LIBRARY_NAME
        link_shared(objects, so)
        files = {LIBRARY_NAME: so.read_bytes(), HEADER_NAME: "\n".join(headers).encode(),
                 GRAPH_NAME: json.dumps(data, indent=1).encode()}
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, blob in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(blob), 0o644
            tar.addfile(info, io.BytesIO(blob))
    out = buf.getvalue()
    if path is not None:
        Path(path).write_bytes(out)
    return out
