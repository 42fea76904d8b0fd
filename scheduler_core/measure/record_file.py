"""Files of measurement records (:mod:`scheduler_core.measure.record` lines): read, write, pick.

    (MeasureInput, MeasureResult) --RecordToFile / save_records--> file (append, fsync)
    file --iter_lines--> RawRecord | DagLine --RecordReader / load_records--> (MeasureInput, MeasureResult),
        state = replay_steps(dag, steps)
    file --load_best_record / distill--> the fastest correct record per (workload_key, target)
    file --native_lines--> our lines (TVM's v0.6 lines resolved, replayed and rewritten)

A record's DAG comes from the ``dags`` a reader is given, the file's own DAG lines, the
``register_workload`` registry or a ``task`` (TVM lines carry no DAG:
:class:`~scheduler_core.measure.tvm_record.TvmWorkloadResolver`), as TVM's
``auto_scheduler/measure_record.py`` reads its logs.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator, Mapping
from typing import Any

from scheduler_core.base.errors import RecordFormatError, SchedulerCoreError
from scheduler_core.base.target import Target
from scheduler_core.dag.compute_dag import ComputeDAG
from scheduler_core.dag.task import Task
from scheduler_core.schedule.dataflow_step import replay_steps

from .data import MeasureInput, MeasureResult
from .record import (
    LEGACY_RECORD_VERSIONS,
    RECORD_VERSION,
    DagLine,
    RawRecord,
    check_format,
    encode_dag_line,
    encode_record,
    parse_line,
)
from .tvm_record import TVM_RECORD_VERSION, TvmWorkloadResolver, UnresolvedWorkloadError, hardware_params_from_tvm


def decode_record(text: str, dags: Mapping[str, Any], lineno: int | None = None,
                  filename: str = "", task: Any = None) -> tuple[MeasureInput, MeasureResult]:
    """Decode a record line into ``(MeasureInput, MeasureResult)``.

    dags: ``{workload_key: ComputeDAG}`` for the record's workload.  The input's
    ``task`` is a :class:`~scheduler_core.dag.task.Task` and its ``state`` is ``replay_steps(dag, steps)``.
    A TVM line's DAG is resolved as :class:`RecordReader` does (``dags``, the registry,
    ``task``).  Raises RecordFormatError for an invalid line, a DAG line, an unknown
    workload_key (UnresolvedWorkloadError for a TVM key), or steps that do not replay on the DAG.
    """
    raw = parse_line(text, lineno, filename)
    if not isinstance(raw, RawRecord):
        raise RecordFormatError("expected a record line", lineno, filename)
    return _materialize(raw, _TaskTable(dags, filename, task).task(raw), filename)


def _materialize(raw: RawRecord, task: Task, filename: str = "") -> tuple[MeasureInput, MeasureResult]:
    try:
        state = replay_steps(task.compute_dag, raw.steps)
    except SchedulerCoreError as err:
        raise RecordFormatError(f"steps do not replay on the DAG of {raw.workload_key!r}: {err}",
                                raw.lineno or None, filename) from None
    return MeasureInput(task, state), raw.result


def iter_lines(filename: str | os.PathLike, skip_invalid: bool = False,
               errors: list | None = None) -> Iterator[RawRecord | DagLine]:
    """Validated lines of a record file, in order (blank lines and ``#`` comments skipped).

    skip_invalid: leave out invalid lines (appending each RecordFormatError to
    ``errors`` when given) instead of raising the first one.
    """
    name = str(filename)
    with open(name, encoding="utf-8", errors="replace") as f:
        for lineno, text in enumerate(f, start=1):
            try:
                item = parse_line(text, lineno, name)
            except RecordFormatError as err:
                if not skip_invalid:
                    raise
                if errors is not None:
                    errors.append(err)
                continue
            if item is not None:
                yield item


def _candidates(task: Any) -> list:
    """``task`` as a list of resolver candidates: None, a Task / ComputeDAG, or a sequence of them."""
    if task is None:
        return []
    return list(task) if isinstance(task, (list, tuple)) else [task]


class RecordReader:
    """Iterates a record file as ``(MeasureInput, MeasureResult)`` pairs (TVM's ``RecordReader``).

    Parameters
    ----------
    filename : path of a JSON-lines record file (ours, v1, TVM's v0.6 lines, mixed)
    dags : optional ``{workload_key: ComputeDAG}`` (any Mapping); used before the
        file's own DAG lines, so that records share the caller's DAG objects.  For a TVM
        line the key may be its TVM workload_key or that key's hash (first element).
    skip_invalid : bool, skip lines that fail validation or replay instead of
        raising RecordFormatError; they are listed in ``errors`` after iterating
    task : a Task (or ComputeDAG, or a list of them) the file's TVM records may belong to:
        a TVM record whose key's tensor shapes are the task's DAG's (or whose registered
        function builds the task's DAG) is read as a record of that task (its workload_key).
        With a task, TVM records whose DAG cannot be resolved are skipped (they are not
        the task's) instead of raising UnresolvedWorkloadError.

    A TVM record's DAG comes from ``dags``, the ``register_workload`` registry, the file's
    own DAG lines (by the key's hash) or ``task``
    (:class:`~scheduler_core.measure.tvm_record.TvmWorkloadResolver`); otherwise it raises
    :class:`~scheduler_core.measure.tvm_record.UnresolvedWorkloadError` (a RecordFormatError)
    naming the line, the key and how to supply the DAG.  Each iteration reads the file
    again from the start.
    """

    def __init__(self, filename: str | os.PathLike, dags: Mapping[str, Any] | None = None,
                 skip_invalid: bool = False, task: Any = None):
        self.filename = str(filename)
        self.dags = dags if dags is not None else {}
        self.skip_invalid = bool(skip_invalid)
        self.task = task
        self.errors: list = []

    def __iter__(self) -> Iterator[tuple[MeasureInput, MeasureResult]]:
        self.errors = []
        tasks = _TaskTable(self.dags, self.filename, self.task)
        for item in iter_lines(self.filename, self.skip_invalid, self.errors):
            try:
                if isinstance(item, DagLine):
                    tasks.add_dag_line(item)
                    continue
                try:
                    task = tasks.task(item)
                except UnresolvedWorkloadError:
                    if self.task is not None:
                        continue
                    raise
                yield _materialize(item, task, self.filename)
            except RecordFormatError as err:
                if not self.skip_invalid:
                    raise
                self.errors.append(err)

    def read_lines(self, max_lines: int | None = None, skip_lines: int = 0) -> tuple[list, list]:
        """``(inputs, results)`` of up to ``max_lines`` records after the first ``skip_lines``."""
        inputs: list = []
        results: list = []
        for k, (inp, res) in enumerate(self):
            if k < skip_lines:
                continue
            if max_lines is not None and len(inputs) >= max_lines:
                break
            inputs.append(inp)
            results.append(res)
        return inputs, results


class _FileDags(Mapping):
    """The caller's DAGs, then the DAGs of the file's "w" lines read so far (parsed on first use)."""

    def __init__(self, table: _TaskTable):
        self.table = table

    def __getitem__(self, key: str) -> Any:
        found = self.table.dags.get(key) if self.table.dags else None
        if found is not None:
            return found
        if key in self.table.dag_lines:
            return self.table.parsed_dag(self.table.dag_lines[key])
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        return iter({**dict.fromkeys(self.table.dags), **dict.fromkeys(self.table.dag_lines)})

    def __len__(self) -> int:
        return sum(1 for _ in self)


class _TaskTable:
    """The DAGs of a file (parsed on first use), the resolver of TVM keys, one Task per record kind."""

    def __init__(self, dags: Mapping[str, Any], filename: str, task: Any = None):
        self.dags, self.filename = dags, filename
        self.dag_lines: dict = {}
        self.parsed: dict = {}
        self.tasks: dict = {}
        self.resolver = TvmWorkloadResolver(_FileDags(self), _candidates(task))

    def add_dag_line(self, line: DagLine) -> None:
        self.dag_lines.setdefault(line.workload_key, line)

    def parsed_dag(self, line: DagLine) -> ComputeDAG:
        if line.workload_key not in self.parsed:
            try:
                self.parsed[line.workload_key] = ComputeDAG.from_json(line.dag)
            except SchedulerCoreError as err:
                raise RecordFormatError(f"invalid DAG for {line.workload_key!r}: {err}", line.lineno,
                                        self.filename) from None
        return self.parsed[line.workload_key]

    def dag(self, raw: RawRecord):
        key = raw.workload_key
        found = self.dags.get(key) if self.dags else None
        if found is not None:
            return found
        line = self.dag_lines.get(key)
        if line is None:
            raise RecordFormatError(f"no DAG for workload_key {key!r} (no earlier \"w\" line)",
                                    raw.lineno or None, self.filename)
        return self.parsed_dag(line)

    def resolve(self, raw: RawRecord) -> tuple[ComputeDAG, str]:
        """``(dag, our workload_key)`` of a TVM record; UnresolvedWorkloadError naming the line."""
        try:
            return self.resolver.resolve(raw.workload_key)
        except UnresolvedWorkloadError as err:
            raise UnresolvedWorkloadError(str(err), raw.lineno or None, self.filename) from None

    def workload_key(self, raw: RawRecord) -> str | None:
        """Our workload_key of a record (a TVM record's once resolved; None when it cannot be)."""
        if not raw.is_tvm:
            return raw.workload_key
        try:
            return self.resolve(raw)[1]
        except RecordFormatError:
            return None

    def task(self, raw: RawRecord) -> Task:
        k = (raw.version == TVM_RECORD_VERSION, raw.workload_key, raw.target, raw.hardware_params)
        if k not in self.tasks:
            if raw.is_tvm:
                dag, key = self.resolve(raw)
            else:
                dag, key = self.dag(raw), raw.workload_key
            try:
                target = Target.parse(raw.target)
                hardware_params = hardware_params_from_tvm(target, raw.hardware_params) if raw.is_tvm else None
                self.tasks[k] = Task.create(dag, target, hardware_params, workload_key=key)
            except SchedulerCoreError as err:
                raise RecordFormatError(f"invalid target {raw.target!r}: {err}", raw.lineno or None,
                                        self.filename) from None
        return self.tasks[k]


def load_records(filename: str | os.PathLike, dags: Mapping[str, Any] | None = None,
                 skip_invalid: bool = False, task: Any = None) -> list[tuple[MeasureInput, MeasureResult]]:
    """All records of ``filename`` as ``(MeasureInput, MeasureResult)`` pairs, in file order
    (:class:`RecordReader`'s parameters)."""
    return list(RecordReader(filename, dags, skip_invalid, task))


def _same_target(a: str, b: Any) -> bool:
    """Whether two target texts name the same Target (compared in canonical form)."""
    try:
        return str(Target.parse(a)) == str(Target.parse(b))
    except SchedulerCoreError:
        return False


def load_best_record(filename: str | os.PathLike, workload_key: str | None = None, target: Any = None,
                     dags: Mapping[str, Any] | None = None, skip_invalid: bool = False,
                     task: Any = None) -> tuple[MeasureInput, MeasureResult] | None:
    """The record with the lowest median cost (``RawRecord.cost``) among NO_ERROR records (TVM's ``load_best_record``).

    workload_key / target: only consider records of this workload / target
    (targets compare in canonical form).  A TVM record matches ``workload_key`` by its key
    as written or by our key of its resolved DAG; one whose DAG cannot be resolved matches
    no ``workload_key``.  task: a Task whose records are wanted (``workload_key`` defaults
    to its key; its DAG resolves TVM records by shape, as in :class:`RecordReader`).
    Returns None when no record qualifies.  Only the winner is replayed; it raises
    RecordFormatError (UnresolvedWorkloadError for a TVM key) when its DAG is unknown.
    """
    if workload_key is None and task is not None and not isinstance(task, (list, tuple, ComputeDAG)):
        workload_key = str(task.workload_key)
    tasks = _TaskTable(dags or {}, str(filename), task)
    best = None
    for item in iter_lines(filename, skip_invalid):
        if isinstance(item, DagLine):
            tasks.add_dag_line(item)
        elif ((cost := item.cost) is not None
              and (best is None or cost < best.median_cost)
              and (target is None or _same_target(item.target, target))
              and (workload_key is None or item.workload_key == workload_key
                   or (item.is_tvm and tasks.workload_key(item) == workload_key))):
            best = item
    if best is None:
        return None
    return _materialize(best, tasks.task(best), str(filename))


def native_lines(filename: str | os.PathLike, dags: Mapping[str, Any] | None = None,
                 task: Any = None) -> Iterator[RawRecord | DagLine]:
    """The lines of a record file in our format: what ``autosched records import`` stores.

    Our lines (any version) come as :func:`iter_lines` yields them.  A TVM line is resolved
    (``dags``, registry, the file's DAG lines, ``task``: see :class:`RecordReader`) and
    replayed, then comes as our RECORD_VERSION line (our workload_key, the canonical target),
    preceded by a DAG line the first time its workload_key appears.  Raises RecordFormatError
    naming the first line that is invalid, unresolvable or does not replay.
    """
    name = str(filename)
    tasks = _TaskTable(dags or {}, name, task)
    dag_sent: set = set()
    for item in iter_lines(name):
        if isinstance(item, DagLine):
            tasks.add_dag_line(item)
            dag_sent.add(item.workload_key)
            yield item
            continue
        if not item.is_tvm:
            yield item
            continue
        inp, res = _materialize(item, tasks.task(item), name)
        key = inp.task.workload_key
        if key not in dag_sent:
            text = encode_dag_line(key, inp.task.compute_dag)
            yield DagLine(item.lineno, key, json.loads(text)["dag"], text)
            dag_sent.add(key)
        parsed = parse_line(encode_record(inp, res), item.lineno, name)
        assert isinstance(parsed, RawRecord)
        yield parsed


def distill(in_file: str | os.PathLike, out_file: str | os.PathLike, skip_invalid: bool = False) -> int:
    """Keep only the best NO_ERROR record per (workload_key, target) (TVM's ``distill_record_file``).

    Records already in ``out_file`` take part too; ``out_file`` is rewritten
    atomically with each kept workload's DAG line before its record.  Records are
    copied verbatim (not replayed; a TVM line stays a TVM line, grouped by its TVM key).
    Returns the number of records kept.
    """
    sources = [str(in_file)]
    if os.path.exists(out_file) and not os.path.samefile(in_file, out_file):
        sources.append(str(out_file))
    dag_lines: dict = {}
    best: dict = {}
    for source in sources:
        for item in iter_lines(source, skip_invalid):
            if isinstance(item, DagLine):
                dag_lines.setdefault(item.workload_key, item)
                continue
            k = (item.workload_key, " ".join(item.target.split()))
            cost = item.cost
            if cost is not None and (k not in best or cost < best[k].median_cost):
                best[k] = item
    lines, dag_written = [], set()
    for (key, _), raw in best.items():
        if key not in dag_written and key in dag_lines:
            lines.append(dag_lines[key].text)
            dag_written.add(key)
        lines.append(raw.text)
    out_dir = os.path.dirname(os.path.abspath(out_file))
    os.makedirs(out_dir, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".distill_", dir=out_dir)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write("".join(line + "\n" for line in lines))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, out_file)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return len(best)


class RecordToFile:
    """A measure callback that appends every measurement to a record file (TVM's ``RecordToFile``).

    format: ``"autosched"`` (ours, the default) or ``"tvm"`` (TVM's v0.6 lines, which TVM's
    ``RecordReader`` / ``load_best_record`` read: :func:`encode_tvm_record`; no DAG lines,
    so TVM, or a reader here, needs the DAG registered under the written key).  Raises
    RecordFormatError for another format.

    ``callback(policy, inputs, results)`` writes one line per measurement, preceded (format
    "autosched") by the workload's DAG line the first time a workload_key appears in the
    file (the file is scanned for DAG lines at construction, so reopening an existing
    file does not repeat them).  Each batch is appended with one write, then
    flushed and fsync'ed, so a killed process loses no finished measurement.
    """

    def __init__(self, filename: str | os.PathLike, format: str = "autosched"):
        self.filename = str(filename)
        self.format = check_format(format)
        self._dag_written: set = set()
        if self.format == "autosched" and os.path.exists(self.filename):
            with open(self.filename, encoding="utf-8", errors="replace") as f:
                for text in f:
                    if '"w"' not in text:
                        continue
                    try:
                        obj = json.loads(text)
                    except json.JSONDecodeError:
                        continue
                    if (isinstance(obj, dict) and obj.get("v") in (RECORD_VERSION, *LEGACY_RECORD_VERSIONS)
                            and isinstance(obj.get("w"), str)):
                        self._dag_written.add(obj["w"])

    def __call__(self, policy: Any, inputs: list[MeasureInput], results: list[MeasureResult]) -> None:
        lines, new_keys = [], set()
        for inp, res in zip(inputs, results):
            key = str(inp.task.workload_key)
            if self.format == "autosched" and key not in self._dag_written and key not in new_keys:
                lines.append(encode_dag_line(key, inp.task.compute_dag))
                new_keys.add(key)
            lines.append(encode_record(inp, res, self.format))
        if not lines:
            return
        out_dir = os.path.dirname(os.path.abspath(self.filename))
        os.makedirs(out_dir, exist_ok=True)
        with open(self.filename, "a+b") as f:
            prefix = b""
            if f.tell() > 0:  # a process killed mid-line left no newline: start on a fresh line
                f.seek(-1, os.SEEK_END)
                prefix = b"" if f.read(1) == b"\n" else b"\n"
            f.write(prefix + "".join(line + "\n" for line in lines).encode("utf-8"))
            f.flush()
            os.fsync(f.fileno())
        self._dag_written |= new_keys


def save_records(filename: str | os.PathLike, inputs: list[MeasureInput], results: list[MeasureResult],
                 format: str = "autosched") -> None:
    """Append measurements to a record file (TVM's ``save_records``): ``RecordToFile(filename,
    format)(None, inputs, results)``."""
    RecordToFile(filename, format)(None, inputs, results)


__all__ = ["decode_record", "iter_lines", "RecordReader", "RecordToFile", "save_records", "load_records",
           "load_best_record", "native_lines", "distill"]
