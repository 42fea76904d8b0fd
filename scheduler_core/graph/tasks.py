"""The tuning tasks of a model: TVM's ``auto_scheduler.extract_tasks``.

    tasks, weights = sc.extract_tasks(graph, "llvm")
    sc.TaskScheduler(tasks, weights).tune(sc.TuningOptions(..., measure_callbacks=[sc.RecordToFile(log)]))
    with sc.ApplyHistoryBest(log):
        lib = sc.build_graph(graph, "llvm")

One SearchTask per distinct workload_key among the graph's tensor-program calls; its weight
is the number of calls that run it, so the TaskScheduler's objective (the weighted sum of
the tasks' latencies) is the model's latency.  Identical subgraphs (same DAG, hence same
workload_key) are one task, as in Ansor's task extraction (section 6 of the paper).
"""

from __future__ import annotations

from typing import Any

from scheduler_core.base.errors import InvalidWorkloadError
from scheduler_core.base.target import HardwareParams
from scheduler_core.search.search_task import SearchTask

from .ir import Graph


def extract_tasks(graph: Graph, target: Any = "llvm", hardware_params: HardwareParams | None = None,
                  include_scheduled: bool = True) -> tuple[list, list]:
    """``(tasks, weights)``: one SearchTask per distinct workload_key of ``graph``'s tir calls.

    graph : Graph; target : str or Target (parsed by SearchTask)
    hardware_params : passed to every SearchTask (default: the target's)
    include_scheduled : also make tasks of functions that carry their own ``state``
        (``build_graph`` uses that state, not records)
    Tasks come in the order of their first call; a task's ``desc`` is the name of the
    first function with its key.  weights[i] (int) counts the calls of tasks[i].
    Raises InvalidWorkloadError for a non-Graph, InvalidTargetError for a bad target.
    """
    if not isinstance(graph, Graph):
        raise InvalidWorkloadError(f"extract_tasks needs a Graph, got {type(graph).__name__}", "graph")
    tasks: list = []
    weights: list = []
    index: dict = {}
    for _, _call, func in graph.tir_calls():
        if func.state is not None and not include_scheduled:
            continue
        key = func.workload_key
        if key in index:
            weights[index[key]] += 1
            continue
        index[key] = len(tasks)
        tasks.append(SearchTask(compute_dag=func.dag, target=target, hardware_params=hardware_params,
                                desc=func.name))
        weights.append(1)
    return tasks, weights
