"""Request and response bodies of the model resource (POST /models, GET /models/{id}/...).

    ModelCreate --POST /models--> ModelCreated ; ModelPublic (GET /models/{id}) ;
    ModelBestPublic (GET /models/{id}/best)

The graph itself is checked by ``scheduler_core.graph.Graph.from_json`` in the route (a 422
whose ``path`` names the field, e.g. ``graph.calls[2].args[0]``), not by this schema.
"""

from __future__ import annotations

import copy
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema

from workers.job_state import JobState

from .dag_schema import graph_schema
from .schemas import TASK_EXAMPLE, BestPublic, FromRecord, Target, Timestamp, TuningOptions

# A valid POST /models body, the OpenAPI example: y = x + x (a tensor program) then a library
# relu (not tuned).  The search needs no weights; ``params`` only goes into the artifact.
MODEL_EXAMPLE: dict[str, Any] = {
    "graph": {
        "version": "graph-v1",
        "inputs": [{"name": "x", "shape": [4], "dtype": "float32"}],
        "params": [],
        "calls": [{"kind": "tir", "func": "add", "args": ["x"],
                   "outputs": [{"name": "y", "shape": [4], "dtype": "float32"}]},
                  {"kind": "library", "func": "env.relu", "args": ["y"],
                   "outputs": [{"name": "z", "shape": [4], "dtype": "float32"}]}],
        "outputs": ["z"],
        "functions": {"add": {"dag": copy.deepcopy(TASK_EXAMPLE["dag"]), "attrs": {}}},
    },
    "target": "llvm",
    "tuning": {"num_measure_trials": 8},
}


class ModelCreate(BaseModel):
    """POST /models: a model's graph (``Graph.to_json``: inputs, params, calls, outputs and the
    DAG of every tensor-program function), optionally its weights (``params``), a target and
    tuning options shared by all its tasks (``num_measure_trials`` is the budget of the whole
    model)."""

    model_config = ConfigDict(strict=True, extra="forbid", json_schema_extra={"examples": [MODEL_EXAMPLE]})

    graph: Annotated[dict[str, Any], WithJsonSchema(graph_schema(MODEL_EXAMPLE["graph"]))] = Field(
        description="graph JSON (scheduler_core.graph.Graph.to_json), validated by Graph.from_json")
    target: Target = "llvm"
    tuning: TuningOptions = Field(default_factory=TuningOptions)
    params: str | None = Field(
        None, description="the weights: base64 of an .npz file (numpy.savez) with one array per graph param, "
                          "named and shaped as the param; they are built into the model's artifact (model_run), "
                          "never used by the search.  Omitted: the model keeps the weights sent before, else "
                          "its artifact takes the params as arguments")


class ModelUpload(BaseModel):
    """POST /models as multipart/form-data: an ONNX model file and, as JSON text fields, the
    target, the tuning options and the shapes of inputs with symbolic dims.  The service imports
    the file (``frontend.from_onnx``, opsets 13-21); its initializers become the model's weights
    (built into its artifact, never used by the search)."""

    model_config = ConfigDict(extra="forbid")

    model: bytes = Field(json_schema_extra={"format": "binary"},
                         description="the .onnx file (at most Settings.max_model_upload_bytes)")
    target: Target = "llvm"
    tuning: str = Field("{}", description="TuningOptions as JSON text, e.g. {\"num_measure_trials\": 64}")
    shapes: str = Field("{}", description="{input name: [dims]} as JSON text, for inputs with symbolic dims")


class ModelTaskRef(FromRecord):
    """One task of a model (``workers.records.ModelTaskRef``): the graph functions with one DAG."""

    task_id: str
    workload_key: str
    functions: list[str]              # graph function names implemented by this task
    weight: int                       # calls of these functions in the graph (latency weight)


class ModelCreated(BaseModel):
    model_id: str
    job_id: str
    tasks: list[ModelTaskRef]


class ModelTaskPublic(ModelTaskRef):
    """A task of a model with its best so far (``workers.model_store.ModelTaskProgress``)."""

    best_cost_s: float | None = None  # best measured latency in seconds (None: not measured yet)
    best_gflops: float | None = None
    trials: int = 0                   # records of the task over all its jobs
    job_trials: int = 0               # trials the model's latest job measured for it


class ModelPublic(BaseModel):
    model_id: str
    target: str
    created: Timestamp = None         # ISO 8601, UTC
    tuning: dict[str, Any] = {}
    latest_job_id: str | None = None
    state: JobState | None = None     # the latest job's state
    trials_done: int = 0              # of the latest job, over all tasks
    trials_total: int = 0
    total_latency_s: float | None = Field(
        None, description="sum over tasks of weight x best latency, in seconds (None while a task has none)")
    tasks: list[ModelTaskPublic]


class ModelTaskBest(ModelTaskRef):
    best: BestPublic | None = None    # None: the task has no successful measurement yet


class ModelBestPublic(BaseModel):
    model_id: str
    total_latency_s: float | None = None
    tasks: list[ModelTaskBest]
