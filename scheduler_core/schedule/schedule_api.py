"""The manual schedule API of seed 004 (``te.create_schedule``, ``s[C].split`` ...).

Every primitive appends one transform step to a ``State``; a Schedule is only
a mutable handle on the latest State, so a manual schedule and a searched one
are the same thing and print to the same Python code.

    s = te.create_schedule(C.op)
    xo, xi = s[C].split(C.op.axis[0], factor=32)   # SplitStep
    s[C].vectorize(xi)                              # AnnotationStep
"""

from __future__ import annotations

from typing import Any

from scheduler_core.base.errors import ScheduleError
from scheduler_core.dag.compute_dag import ComputeDAG
from scheduler_core.dag.tensor import PlaceholderOp, Tensor, check_iter_names, post_order_ops
from scheduler_core.ir.expr import IntImm, IterVar, Var

from . import dataflow_step as df
from . import transform_step as ts
from .loop_state import State
from .schedule_printer import state_to_python


def _outputs(ops: Any) -> list:
    items = ops if isinstance(ops, (list, tuple)) else [ops]
    out = []
    for x in items:
        if isinstance(x, Tensor):
            out.append(x)
        else:
            out.extend(x.output(i) for i in range(x.num_outputs))
    return out


class Schedule:
    """A mutable handle on a State; ``s[tensor]`` gives that tensor's Stage handle."""

    def __init__(self, state: State):
        self.state = state

    @staticmethod
    def create(ops: Any) -> Schedule:
        """The schedule of the ops that produce ``ops`` (``te.create_schedule``).

        Raises InvalidWorkloadError on a cycle, or for a compute with two iterators of one
        name (a stage tells its loops apart by name; ``ComputeDAG`` rejects the same).
        """
        outs = _outputs(ops)
        all_ops = post_order_ops(outs)
        for op in all_ops:
            check_iter_names(op)
        placeholders = [op.output(0) for op in all_ops if isinstance(op, PlaceholderOp)]
        dag = ComputeDAG.__new__(ComputeDAG)
        dag.tensors = tuple(placeholders + outs)
        dag.ops = tuple(all_ops)
        return Schedule(State.from_dag(dag))

    @staticmethod
    def from_state(state: State) -> Schedule:
        return Schedule(state)

    def __getitem__(self, key) -> StageHandle:
        k = self.state.stage_index(key.op if isinstance(key, Tensor) else key)
        return StageHandle(self, self.state.stages[k].op)

    def apply(self, step) -> State:
        self.state = step.apply(self.state)
        return self.state

    @property
    def stages(self) -> list:
        return [StageHandle(self, st.op) for st in self.state.stages]

    # -- dataflow primitives --------------------------------------------------
    def cache_read(self, tensor: Tensor, scope: str, readers) -> Tensor:
        """Copy ``tensor`` into ``<name>.<scope>`` read by ``readers`` instead (CHR)."""
        sid = self.state.stage_index(tensor.op)
        rids = tuple(self.state.stage_index(r.op if isinstance(r, Tensor) else r) for r in readers)
        self.apply(df.CacheReadStep(sid, scope, rids))
        return self.state.stages[sid + 1].op.output(0)

    def cache_write(self, tensor: Tensor | list, scope: str) -> Any:
        """Compute ``tensor`` into ``<name>.<scope>`` and copy it out (CHW).

        ``tensor``: a tensor, or (TVM's spelling for a multi-output op) the list of its
        outputs.  Returns the cache tensor, or for an op with several outputs the list of
        the cache stage's tensors (the stage computes them all, as TVM's cache_write).
        """
        t = tensor[0] if isinstance(tensor, (list, tuple)) else tensor
        sid = self.state.stage_index(t.op)
        self.apply(df.CacheWriteStep(sid, scope))
        op = self.state.stages[sid].op
        return op.output(0) if op.num_outputs == 1 else [op.output(v) for v in range(op.num_outputs)]

    def rfactor(self, tensor: Tensor, axis, factor_axis: int = 0) -> Tensor:
        """Factor ``tensor``'s reduction over reduce iterator ``axis`` into a new stage (RF)."""
        sid = self.state.stage_index(tensor.op)
        it = self[tensor]._iter(axis)
        self.apply(df.RfactorStep(sid, it, factor_axis))
        return self.state.stages[sid].op.output(0)

    def to_python(self) -> str:
        return state_to_python(self.state)


def _handle(name: str) -> IterVar:
    return IterVar(Var(name), IntImm(0), IntImm(0), "spatial")


class StageHandle:
    """``s[T]``: the schedule primitives of one stage."""

    def __init__(self, sch: Schedule, op):
        self.sch = sch
        self._op = op

    @property
    def sid(self) -> int:
        return self.sch.state.stage_index(self._op)

    @property
    def stage(self):
        return self.sch.state.stages[self.sid]

    @property
    def op(self):
        return self.stage.op

    @property
    def is_output(self) -> bool:
        """Whether this stage computes an output of the schedule (TVM's ``Stage.is_output``;
        ``ComputeDAG(sch)`` reads it)."""
        origin = self.stage.origin_op
        return origin is not None and any(t.op is origin for t in self.sch.state.dag.outputs)

    def _iter(self, x) -> int:
        name = x.var.name if isinstance(x, IterVar) else (x.name if isinstance(x, Var) else str(x))
        return self.stage.iter_index(name)

    @property
    def leaf_iter_vars(self) -> list:
        return [_handle(it.name) for it in self.stage.iters]

    def _step(self, step):
        self.sch.apply(step)

    def split(self, parent, factor: int | None = None, nparts: int | None = None):
        """Split ``parent`` by ``factor`` (inner trip count) or ``nparts`` (outer trip count)."""
        size = factor if factor is not None else nparts
        if size is None or (factor is not None and nparts is not None):
            raise ScheduleError("split needs exactly one of factor= or nparts=")
        k = self._iter(parent)
        it = self.stage.iters[k]
        ext = it.const_extent
        val = int(size)
        self._step(ts.SplitStep(self.sid, k, ext, (val,), factor is not None))
        return _handle(f"{it.name}.0"), _handle(f"{it.name}.1")

    def tile(self, x_parent, y_parent, x_factor: int, y_factor: int):
        """Split two axes and order them ``xo, yo, xi, yi``."""
        xo, xi = self.split(x_parent, factor=x_factor)
        yo, yi = self.split(y_parent, factor=y_factor)
        self.reorder(xo, yo, xi, yi)
        return xo, yo, xi, yi

    def fuse(self, *args):
        """Fuse consecutive iterators into one (FuseStep)."""
        ids = [self._iter(a) for a in args]
        name = "@".join(self.stage.iters[k].name for k in ids) + "@" if len(ids) > 1 else self.stage.iters[ids[0]].name
        self._step(ts.FuseStep(self.sid, tuple(ids)))
        return _handle(name)

    def reorder(self, *args):
        """Put the given iterators in this relative order; the others keep their places."""
        ids = [self._iter(a) for a in args]
        if len(set(ids)) != len(ids):
            raise ScheduleError("reorder got the same iterator twice")
        slots = sorted(ids)
        order = list(range(len(self.stage.iters)))
        for slot, k in zip(slots, ids):
            order[slot] = k
        self._step(ts.ReorderStep(self.sid, tuple(order)))

    def _annotate(self, x, ann: str):
        self._step(ts.AnnotationStep(self.sid, self._iter(x), ann))

    def parallel(self, x):
        self._annotate(x, "parallel")

    def vectorize(self, x):
        self._annotate(x, "vectorize")

    def unroll(self, x):
        self._annotate(x, "unroll")

    def bind(self, x, thread: IterVar):
        """Bind a loop to a GPU axis from ``te.thread_axis("blockIdx.x")`` (or ``"vthread"``)."""
        self._annotate(x, thread.var.name)

    def pragma(self, x, name: str, value: Any = True):
        """``pragma(x, "auto_unroll_max_step", 16)`` or ``"unroll_explicit"``."""
        if isinstance(value, bool):
            value = int(value)
        self._step(ts.PragmaStep(self.sid, self._iter(x), f"{name}${value}"))

    def compute_at(self, parent: StageHandle, x):
        """Compute this stage inside loop ``x`` of stage ``parent``."""
        self._step(ts.ComputeAtStep(self.sid, parent.sid, parent._iter(x)))

    def compute_inline(self):
        self._step(df.ComputeInlineStep(self.sid))

    def compute_root(self):
        self._step(ts.ComputeRootStep(self.sid))

    def storage_align(self, x, factor: int, offset: int):
        self._step(ts.StorageAlignStep(self.sid, self._iter(x), factor, offset))
