"""A tiny stand-in for the search layer's SketchPolicy, enough for the rules.

The rules of ``sketch_rules`` take a duck-typed policy: ``policy.task`` (a real Task),
``policy.params`` (SketchPolicyParams) and ``policy.rng``.  The task's HardwareParams
are fixed (2 cores, 32-byte vectors) so that the sketches do not depend on the host.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from scheduler_core.base.target import HardwareParams, Target
from scheduler_core.dag.compute_dag import ComputeDAG
from scheduler_core.dag.task import Task
from sketch_rules.params import SketchPolicyParams


@dataclass
class StubPolicy:
    task: Task
    params: SketchPolicyParams = field(default_factory=SketchPolicyParams)
    rng: np.random.Generator = field(default_factory=lambda: np.random.default_rng(0))


def make_policy(tensors_or_dag, seed: int = 0, num_cores: int = 2, **params) -> StubPolicy:
    """A StubPolicy for a workload's tensor list (or a ComputeDAG)."""
    dag = tensors_or_dag if isinstance(tensors_or_dag, ComputeDAG) else ComputeDAG(tensors_or_dag)
    task = Task(dag, dag.workload_key, Target.parse("llvm"), HardwareParams(num_cores, 32, 64, 64))
    return StubPolicy(task,
                      SketchPolicyParams(**params), np.random.default_rng(seed))
