"""The whole-model artifact: one shared library with one entry point per task, its header, the graph.

    per task: State (best record, else the naive schedule) --driver.program_from_state(name=symbol)-->
        Program --build--> object code (entry ``symbol``, meta ``__autosched_meta_<symbol>``)
    cc -shared -o model.so <every object> -lgomp -lpthread -lm       (runtime.export's link flags)
    model.tar.gz = model.so + model.h (one prototype per entry) + graph.json
    artifact_member(tar.gz bytes, "so" | "h" | "json") -> that one file (GET /models/{id}/artifact?format=)

``graph.json`` is the graph's JSON (``Graph.to_json``; ``Graph.from_json`` reads it back)
where each tensor-program function also has ``"entry"``: the C symbol that implements it,
its task, whether the schedule is ``"tuned"`` (the task's best record) or ``"default"``
(an untuned task: the naive schedule of its DAG, the loops as written, no tiling and no
parallelism), the best latency in seconds, and ``args``: the order of the C arguments as
``["input", k]`` / ``["output", k]`` (the DAG's tensors in order: a function's buffers
are its inputs and outputs, as a ``call_tir`` passes them).  Functions with the same DAG
share one task and one entry.

Linking several objects into one library is safe: each object's parallel thread pool has
internal linkage and the pool hook ``__autosched_parallel_pool`` is a weak symbol
(scheduler_core.codegen.thread_pool), so the only global symbols of an object are its entry
and its meta string, distinct per entry.
"""

from __future__ import annotations

import io
import json
import tarfile
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from scheduler_core.base.c_names import c_identifiers
from scheduler_core.base.errors import BuildError
from scheduler_core.base.target import Target
from scheduler_core.dag.tensor import PlaceholderOp
from scheduler_core.driver.program import program_from_state
from scheduler_core.graph.ir import Graph
from scheduler_core.runtime.export import header_text, link_shared
from scheduler_core.runtime.module import Module
from scheduler_core.schedule.loop_state import State

LIBRARY_NAME = "model.so"
HEADER_NAME = "model.h"
GRAPH_NAME = "graph.json"


@dataclass(frozen=True)
class EntrySchedule:
    """The schedule of one task in the artifact.

    task_id, workload_key : the task; functions : graph function names it implements;
    state : the State to build (a replayed best record, or ``State.from_dag`` for an untuned
    task); tuned : whether ``state`` is the best record; cost_s : its measured latency in
    seconds (None when untuned).
    """

    task_id: str
    workload_key: str
    functions: tuple
    state: State
    tuned: bool
    cost_s: float | None = None


def entry_symbols(entries: list[EntrySchedule]) -> list[str]:
    """The C symbol of each entry: its first function's name as a C identifier, made distinct."""
    return c_identifiers([e.functions[0] for e in entries])


def _arg_order(dag) -> list:
    """``[["input", k] | ["output", k], ...]``: how a function's buffers map to the C arguments."""
    order, n_in, n_out = [], 0, 0
    for t in dag.tensors:
        if isinstance(t.op, PlaceholderOp):
            order.append(["input", n_in])
            n_in += 1
        else:
            order.append(["output", n_out])
            n_out += 1
    return order


def annotated_graph(graph: Graph, entries: list[EntrySchedule], symbols: list[str]) -> dict:
    """``graph.to_json()`` with ``functions[name]["entry"]`` for every function a task implements."""
    data = graph.to_json()
    for e, sym in zip(entries, symbols):
        for name in e.functions:
            data["functions"][name]["entry"] = {
                "symbol": sym, "library": LIBRARY_NAME, "task_id": e.task_id, "workload_key": e.workload_key,
                "schedule": "tuned" if e.tuned else "default", "cost_s": e.cost_s,
                "args": _arg_order(e.state.dag)}
    return data


def build_model_artifact(graph: Graph, target: str, entries: list[EntrySchedule]) -> bytes:
    """The ``.tar.gz`` bytes of the whole-model artifact (see the module docstring).

    graph : the model's graph; target : a CPU target string ("llvm ..."); entries : one per
    task.  Raises BuildError for a cuda target (its kernels are served per task), a schedule
    that does not lower or build, or a failed link; InvalidTargetError for a bad target.
    """
    if Target.parse(str(target)).is_gpu:
        raise BuildError("a whole-model shared library is built for CPU targets only; a cuda model's "
                         "kernels are served per task (GET /tasks/{id}/artifact)")
    symbols = entry_symbols(entries)
    headers = []
    with tempfile.TemporaryDirectory(prefix="autosched_model_") as tmp:
        objects = []
        for e, sym in zip(entries, symbols):
            module = program_from_state(e.state, target, name=sym).build()
            if not isinstance(module, Module):
                raise BuildError(f"{sym}: expected a CPU module, got {type(module).__name__}")
            obj = Path(tmp) / f"{sym}.o"
            obj.write_bytes(module.object_code())
            objects.append(obj)
            headers.append(header_text(module.signature, library_name=LIBRARY_NAME))
        so = Path(tmp) / LIBRARY_NAME
        link_shared(objects, so)
        files: Mapping[str, bytes] = {
            LIBRARY_NAME: so.read_bytes(),
            HEADER_NAME: "\n".join(headers).encode(),
            GRAPH_NAME: json.dumps(annotated_graph(graph, entries, symbols), indent=1).encode(),
        }
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


ARTIFACT_MEMBERS = {"so": LIBRARY_NAME, "h": HEADER_NAME, "json": GRAPH_NAME}


def artifact_member(data: bytes, fmt: str) -> bytes:
    """One file of a model artifact's ``.tar.gz`` bytes: ``"so"`` (model.so), ``"h"`` (model.h)
    or ``"json"`` (graph.json).  Raises KeyError for another ``fmt``, BuildError when the archive
    is not a model artifact (unreadable, or without that member)."""
    name = ARTIFACT_MEMBERS[fmt]
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
            member = tar.extractfile(name)
            if member is None:
                raise KeyError(name)
            return member.read()
    except (tarfile.TarError, KeyError, OSError) as err:
        raise BuildError(f"the stored model artifact has no readable {name}: {type(err).__name__}: {err}") from None
