"""A tiny stand-in for the search layer's SketchPolicy, enough for the rules.

The rules of ``sketch_rules`` take a duck-typed policy (see the issue's shared
interfaces): ``policy.task`` with ``compute_dag``, ``target`` and
``hardware_params``; ``policy.params`` (SketchPolicyParams); ``policy.rng``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from scheduler_core.dag.compute_dag import ComputeDAG
from sketch_rules.params import SketchPolicyParams


@dataclass(frozen=True)
class StubHardwareParams:
    """The CPU of the development machine, as the rules see it."""

    num_cores: int = 2
    vector_unit_bytes: int = 32
    cache_line_bytes: int = 64
    max_innermost_split_factor: int = 64


@dataclass(frozen=True)
class StubTask:
    compute_dag: ComputeDAG
    target: str = "llvm"
    hardware_params: StubHardwareParams = field(default_factory=StubHardwareParams)


@dataclass
class StubPolicy:
    task: StubTask
    params: SketchPolicyParams = field(default_factory=SketchPolicyParams)
    rng: np.random.Generator = field(default_factory=lambda: np.random.default_rng(0))


def make_policy(tensors_or_dag, seed: int = 0, num_cores: int = 2, **params) -> StubPolicy:
    """A StubPolicy for a workload's tensor list (or a ComputeDAG)."""
    dag = tensors_or_dag if isinstance(tensors_or_dag, ComputeDAG) else ComputeDAG(tensors_or_dag)
    return StubPolicy(StubTask(dag, "llvm", StubHardwareParams(num_cores=num_cores)),
                      SketchPolicyParams(**params), np.random.default_rng(seed))
