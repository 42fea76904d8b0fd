"""The whole-model artifact of the service: the model's graph with each task's best schedule and
its stored weights, compiled and exported as one standalone ``.tar.gz``.

    per task: State (best record) or None (untuned: build_graph's default_state)
    graph.with_function(state) for every function of the task; bind the stored weights
      --scheduler_core.graph.build_graph--> GraphModule (weights packed in the tuned layouts)
      --GraphModule.export_library--> model.tar.gz = model.so + model.h + graph.json
    artifact_member(tar.gz bytes, "so" | "h" | "json") -> that one file (GET /models/{id}/artifact?format=)

``model.so`` has one C entry per task (the symbol of its first function, the calling convention
of docs/calling_convention.md, weights as arguments in the original layout) and, when every call
of the graph is a tensor program, ``model_run(inputs, outputs)``: the whole model with the
weights inside (``scheduler_core.graph.export``); ``sc.runtime.load_model`` runs it from Python.
Params without stored weights stay arguments of ``model_run``.  ``graph.json``'s
``functions.<name>.entry`` adds the task id, whether the schedule is ``"tuned"`` (the task's
best record) or ``"default"`` (an untuned task), and the best latency in seconds.

Library calls need not be registered in the worker that builds the artifact (they are not run).
"""

from __future__ import annotations

import io
import tarfile
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from scheduler_core.base.errors import BuildError
from scheduler_core.base.target import Target
from scheduler_core.graph.build import build_graph
from scheduler_core.graph.export import GRAPH_NAME, HEADER_NAME, LIBRARY_NAME
from scheduler_core.graph.ir import Graph
from scheduler_core.schedule.loop_state import State


@dataclass(frozen=True)
class EntrySchedule:
    """The schedule of one task in the artifact.

    task_id, workload_key : the task; functions : graph function names it implements;
    state : its best record's State, or None for an untuned task (``build_graph``'s default
    schedule); cost_s : the best latency in seconds (None when untuned).
    """

    task_id: str
    workload_key: str
    functions: tuple
    state: State | None
    cost_s: float | None = None

    @property
    def tuned(self) -> bool:
        return self.state is not None


def build_model_artifact(graph: Graph, target: str, entries: list[EntrySchedule],
                         params: Mapping[str, Any] | None = None) -> bytes:
    """The ``.tar.gz`` bytes of the whole-model artifact (see the module docstring).

    graph : the model's graph; target : a CPU target string ("llvm ..."); entries : one per
    task; params : the weights to embed (``{param name: array}``; the others stay arguments).
    Raises BuildError for a cuda target (its kernels are served per task), a schedule that does
    not lower or build, or a failed compile or link; InvalidTargetError for a bad target;
    InvalidWorkloadError for params that do not match the graph.
    """
    if Target.parse(str(target)).is_gpu:
        raise BuildError("a whole-model shared library is built for CPU targets only; a cuda model's "
                         "kernels are served per task (GET /tasks/{id}/artifact)")
    info: dict = {}
    for e in entries:
        for name in e.functions:
            if e.state is not None:
                graph = graph.with_function(replace(graph.functions[name], state=e.state))
            info[name] = {"task_id": e.task_id, "workload_key": e.workload_key,
                          "schedule": "tuned" if e.tuned else "default", "cost_s": e.cost_s}
    if params:
        graph = graph.bind_params(params)
    lib = build_graph(graph, target, check_library=False)
    return lib.export_library(entry_info=info)


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
