"""Whole models: a graph of tensor programs and library functions (seed 002).

    ir             Graph, Call, PrimFunction, the JSON wire format, the library-function
                   registry (register_func) and the numpy reference run
    build          build_graph -> GraphModule (the executor), default_state
    tasks          extract_tasks: one SearchTask per distinct workload_key, with weights
    dispatch       ApplyHistoryBest: records -> the schedule of each function when building
    script         TVMScript's spelling: ir_module, T, R, Tensor, IRModule (bodies in te)
    relax          relax.transform.BindParams, relax.vm.build, relax.VirtualMachine
    meta_schedule  tune_tir, TuneConfig

Seed 002 with this package (``tvm`` imports replaced)::

    import scheduler_core as sc
    from scheduler_core import te
    from scheduler_core.graph import meta_schedule as ms, relax
    from scheduler_core.graph.script import IRModule, R, T, Tensor, ir_module

This floor sits above the search floor: extracting a model's tasks makes SearchTasks and
tunes them together.
"""

from . import meta_schedule, relax
from .build import GraphModule, build_graph, default_state
from .dispatch import ApplyHistoryBest
from .ir import (
    GRAPH_FORMAT_VERSION,
    Call,
    Graph,
    GraphVar,
    PrimFunction,
    TensorType,
    get_func,
    register_func,
    run_reference,
)
from .script import IRModule, R, T, Tensor, ir_module
from .tasks import extract_tasks

__all__ = ["GRAPH_FORMAT_VERSION", "Call", "Graph", "GraphVar", "PrimFunction", "TensorType",
           "get_func", "register_func", "run_reference", "GraphModule", "build_graph", "default_state",
           "ApplyHistoryBest", "extract_tasks", "IRModule", "R", "T", "Tensor", "ir_module",
           "meta_schedule", "relax"]
