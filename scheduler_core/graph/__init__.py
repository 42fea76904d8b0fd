"""Whole models: a graph of tensor programs and library functions (seed 002).

``ir`` holds the graph as data (Graph, Call, PrimFunction, the JSON wire format, the
library-function registry and the numpy reference run).  This floor sits above the
search floor: extracting a model's tasks makes SearchTasks and tunes them together.
"""

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

__all__ = ["GRAPH_FORMAT_VERSION", "Call", "Graph", "GraphVar", "PrimFunction", "TensorType",
           "get_func", "register_func", "run_reference"]
