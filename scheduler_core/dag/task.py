"""Task: what the search tunes, as plain frozen data (Ansor's SearchTask without the tuning).

    Task(compute_dag, workload_key, target: Target, hardware_params: HardwareParams)

Records, measurement, the sketch rules and the cost model all take a Task; the search
floor's ``SearchTask`` is a Task that can also ``tune``, ``apply_best`` and ``print_best``.
"""

from __future__ import annotations

from dataclasses import dataclass

from scheduler_core.base.target import HardwareParams, Target

from .compute_dag import ComputeDAG


@dataclass(frozen=True)
class Task:
    """A ComputeDAG to be compiled for a Target.

    compute_dag : ComputeDAG, the computation
    workload_key : str, the key of its records (by default the DAG's hash, so the same
        computation maps to the same records however it was built)
    target : Target, parsed once (``str(task.target)`` is its canonical text)
    hardware_params : HardwareParams of the target (cores, vector width, cache line)
    """

    compute_dag: ComputeDAG
    workload_key: str
    target: Target
    hardware_params: HardwareParams

    @classmethod
    def create(cls, compute_dag: ComputeDAG, target: str | Target = "llvm",
               hardware_params: HardwareParams | None = None, workload_key: str | None = None) -> Task:
        """A Task with the target parsed and defaults filled in.

        Raises InvalidTargetError (a BuildError) for a target string the parser rejects.
        """
        parsed = Target.parse(target)
        return cls(compute_dag, workload_key or compute_dag.workload_key, parsed,
                   hardware_params or HardwareParams.for_target(parsed))

    def __repr__(self) -> str:
        return f"Task({self.workload_key[:12]}, target={str(self.target)!r})"
