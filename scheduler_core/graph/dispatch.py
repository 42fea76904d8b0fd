"""Which schedule a tensor program gets when a model is built: TVM's ``ApplyHistoryBest``.

    with sc.ApplyHistoryBest("model.json"):          # records of extract_tasks + TaskScheduler
        lib = sc.build_graph(graph, target="llvm")     # every function: its best record, if any

TVM's ``auto_scheduler.DispatchContext``: a stack of contexts, the innermost one asked first;
a context that has no answer passes the question to the one it was entered inside (TVM's
``DispatchContext.query`` falls back to ``_old_ctx`` the same way).  :func:`current` is the
innermost active context (None outside every ``with``).

Records are matched by workload_key and target.  A record for exactly the requested target
(canonical text) wins; otherwise the best record of the same target kind (``llvm`` with
other options, e.g. ``-num-cores=1``) is used, as TVM keys its history by the target's keys
(``"cpu"``) rather than by its full text.  Only the winning record of a query is replayed
(``measure.record.load_best_record``), and the answer is cached.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

from scheduler_core.base.context_stack import ContextStack
from scheduler_core.base.errors import InvalidWorkloadError, RecordFormatError, SchedulerCoreError
from scheduler_core.base.target import Target
from scheduler_core.measure.data import MeasureInput, MeasureResult
from scheduler_core.measure.record import RawRecord
from scheduler_core.measure.record_file import iter_lines, load_best_record

_SCOPES: ContextStack[ApplyHistoryBest] = ContextStack("autosched_apply_history_best")


def current() -> ApplyHistoryBest | None:
    """The innermost active :class:`ApplyHistoryBest` of this thread (None when no ``with`` block
    is active)."""
    return _SCOPES.current()


def _canonical(target: Any) -> Target | None:
    try:
        return Target.parse(target)
    except SchedulerCoreError:
        return None


class ApplyHistoryBest:
    """A context that answers "which schedule for this workload on this target?" from records.

    Parameters
    ----------
    records : a record file path (str or PathLike), a list of such paths, or a list of
        ``(MeasureInput, MeasureResult)`` pairs (as ``sc.load_records`` returns); TVM's
        ``ApplyHistoryBest(records)``.  Files may mix our lines and TVM's v0.6 lines; a TVM
        line is used when the querying function's DAG resolves it (``dag=`` of :meth:`query`).
    n_lines : read only the first ``n_lines`` records of each file (None: all)

    Raises InvalidWorkloadError when a path does not exist or ``records`` is of another type.
    Use as ``with ApplyHistoryBest(log): ...``; contexts nest, the innermost is asked first.
    """

    def __init__(self, records: Any, n_lines: int | None = None):
        self.files: list = []
        self._pairs: dict = {}     # (workload_key, canonical target) -> (cost s, MeasureInput)
        self._index: dict = {}     # (workload_key, canonical target) -> (cost s, target text, file)
        self._cache: dict = {}
        self._outer: ApplyHistoryBest | None = None
        self._targets: dict = {}
        items = [records] if isinstance(records, (str, os.PathLike)) else records
        if not isinstance(items, Iterable):
            raise InvalidWorkloadError(f"ApplyHistoryBest takes a record file, a list of files or a list of "
                                       f"(MeasureInput, MeasureResult) pairs, not {type(records).__name__}")
        for k, item in enumerate(items):
            if isinstance(item, (str, os.PathLike)):
                self._add_file(str(item), n_lines, f"records[{k}]")
            elif (isinstance(item, (tuple, list)) and len(item) == 2 and isinstance(item[0], MeasureInput)
                  and isinstance(item[1], MeasureResult)):
                self._add_pair(*item)
            else:
                raise InvalidWorkloadError(f"expected a record file path or a (MeasureInput, MeasureResult) "
                                           f"pair, got {type(item).__name__}", f"records[{k}]")

    # -- loading ---------------------------------------------------------------
    def _target_of(self, text: str) -> Target | None:
        if text not in self._targets:
            self._targets[text] = _canonical(text)
        return self._targets[text]

    def _add_file(self, path: str, n_lines: int | None, where: str) -> None:
        if not os.path.exists(path):
            raise InvalidWorkloadError(f"record file {path!r} does not exist", where)
        self.files.append(path)
        seen = 0
        for item in iter_lines(path, skip_invalid=True):
            if not isinstance(item, RawRecord):
                continue
            seen += 1
            if n_lines is not None and seen > n_lines:
                break
            cost = item.cost
            if cost is None or item.is_tvm:
                continue
            t = self._target_of(item.target)
            if t is None:
                continue
            key = (item.workload_key, str(t))
            if key not in self._index or cost < self._index[key][0]:
                self._index[key] = (cost, item.target, path)

    def _add_pair(self, inp: MeasureInput, res: MeasureResult) -> None:
        if res.cost is None:
            return
        key = (str(inp.task.workload_key), str(inp.task.target))
        if key not in self._pairs or res.cost < self._pairs[key][0]:
            self._pairs[key] = (res.cost, inp)

    # -- queries ---------------------------------------------------------------
    def query(self, workload_key: str, target: Any, dag: Any = None):
        """The best recorded State of ``workload_key`` for ``target`` (str or Target), or None.

        dag : the function's ComputeDAG (optional): the state is replayed on it, and TVM
        records of it are found by shape.  Falls back to the enclosing context when this
        one has no record.  Raises InvalidTargetError for a target the parser rejects.
        """
        found = self.query_record(workload_key, target, dag)
        return None if found is None else found[0]

    def query_record(self, workload_key: str, target: Any, dag: Any = None):
        """``(State, cost in seconds)`` of the best record, or None (see :meth:`query`)."""
        t = Target.parse(target)
        key = (workload_key, str(t))
        if key not in self._cache:
            self._cache[key] = self._lookup(workload_key, t, dag)
        found = self._cache[key]
        if found is None and self._outer is not None:
            return self._outer.query_record(workload_key, target, dag)
        return found

    def _best(self, table: dict, workload_key: str, t: Target):
        exact = table.get((workload_key, str(t)))
        if exact is not None:
            return exact
        same_kind = [v for (k, ts), v in table.items()
                     if k == workload_key and (self._target_of(ts) or t).kind == t.kind]
        return min(same_kind, key=lambda v: v[0]) if same_kind else None

    def _lookup(self, workload_key: str, t: Target, dag: Any):
        candidates = []
        pair = self._best(self._pairs, workload_key, t)
        if pair is not None:
            candidates.append((pair[0], pair[1].state))
        entry = self._best(self._index, workload_key, t)
        if entry is not None:
            cost, target_text, path = entry
            rec = load_best_record(path, workload_key, target_text,
                                   dags={workload_key: dag} if dag is not None else None, skip_invalid=True)
            if rec is not None:
                candidates.append((rec[1].cost, rec[0].state))
        if not candidates and dag is not None:  # TVM lines: resolved through the DAG, exact target only
            for path in self.files:
                try:
                    rec = load_best_record(path, workload_key, t, dags={workload_key: dag},
                                           skip_invalid=True, task=dag)
                except RecordFormatError:
                    rec = None
                if rec is not None:
                    candidates.append((rec[1].cost, rec[0].state))
        if not candidates:
            return None
        cost, state = min(candidates, key=lambda c: c[0])
        return state, cost

    # -- the context -------------------------------------------------------------
    def __enter__(self) -> ApplyHistoryBest:
        self._outer = current()
        _SCOPES.push(self)
        return self

    def __exit__(self, *exc) -> None:
        _SCOPES.pop(self)
        self._outer = None

    def __repr__(self) -> str:
        return f"ApplyHistoryBest({len(self._index) + len(self._pairs)} best records from {self.files or 'a list'})"
