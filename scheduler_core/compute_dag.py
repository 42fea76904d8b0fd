"""ComputeDAG: the whole computation a schedule is searched for.

A ComputeDAG is built from the list of argument tensors of a workload (inputs
and outputs, as ``register_workload`` functions return them) and holds every
operation reachable from the outputs in topological order.
"""

from __future__ import annotations

from typing import Sequence

from .errors import InvalidWorkloadError
from .tensor import PlaceholderOp, ScanOp, Tensor, post_order_ops


class ComputeDAG:
    """The ops of a workload in topological order.

    Parameters
    ----------
    tensors : list of Tensor
        The workload's arguments in call order: placeholders and outputs.

    Raises
    ------
    InvalidWorkloadError
        On an empty list, non-tensors, or a cycle.
    """

    def __init__(self, tensors: Sequence[Tensor]):
        tensors = list(tensors)
        if not tensors:
            raise InvalidWorkloadError("a ComputeDAG needs at least one tensor")
        for k, t in enumerate(tensors):
            if not isinstance(t, Tensor):
                raise InvalidWorkloadError(f"tensors[{k}] is {type(t).__name__}, not a Tensor")
        self.tensors: tuple = tuple(tensors)
        outputs = [t for t in tensors if not isinstance(t.op, PlaceholderOp)]
        self.ops: tuple = tuple(post_order_ops(outputs or tensors))
        arg_ops = {id(t.op) for t in tensors}
        for op in self.ops:
            if isinstance(op, PlaceholderOp) and id(op) not in arg_ops and not self._is_scan_state(op):
                raise InvalidWorkloadError(
                    f"placeholder {op.name} is read by the computation but is not among the tensors"
                )

    def _is_scan_state(self, op) -> bool:
        return any(
            isinstance(o, ScanOp) and any(s.op is op for s in o.state_placeholder) for o in self.ops
        )

    @property
    def outputs(self) -> tuple:
        """The argument tensors that are computed (not placeholders)."""
        return tuple(t for t in self.tensors if not isinstance(t.op, PlaceholderOp))

    @property
    def inputs(self) -> tuple:
        return tuple(t for t in self.tensors if isinstance(t.op, PlaceholderOp))

    def get_init_state(self):
        """The State with no transform steps (every op at root, loops in axis order)."""
        from .loop_state import State
        return State.from_dag(self)

    init_state = property(get_init_state)
