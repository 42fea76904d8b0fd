"""Measurement records: one JSON object per line, the durable truth of every search.

    (MeasureInput, MeasureResult) --encode_record--> line --RecordToFile--> file (append, fsync)
    file --RecordReader / load_records--> (MeasureInput, MeasureResult), state = replay_steps(dag, steps)
    file --load_best_record / distill--> the fastest correct record per (workload_key, target)

Two kinds of line (TVM's ``auto_scheduler/measure_record.py`` log lines, plus the DAG,
so that a record file alone can rebuild everything):

- a record: ``{"i": [[workload_key, target], [step records...]],
  "r": [[costs_s...], error_no, all_cost_s, timestamp], "v": RECORD_VERSION}``
- a DAG, written once per workload_key per file before its first record:
  ``{"w": workload_key, "dag": <ComputeDAG JSON object>, "v": RECORD_VERSION}``

Failed measurements keep ``costs == [FAILED_COST_S]`` (1e10 s, Ansor's convention).  Decoding
validates every field and raises :class:`~scheduler_core.base.errors.RecordFormatError`
(a ValueError) naming the line; lines of another version are rejected.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from scheduler_core.base.errors import RecordFormatError, SchedulerCoreError
from scheduler_core.base.target import Target
from scheduler_core.dag.compute_dag import ComputeDAG
from scheduler_core.dag.task import Task
from scheduler_core.schedule.dataflow_step import replay_steps, step_from_record

from .data import (
    FAILED_COST_S,
    MeasureErrorNo,
    MeasureInput,
    MeasureResult,
    step_records,
)

RECORD_VERSION = "autosched-record-v1"


@dataclass(frozen=True)
class RawRecord:
    """A validated record line, not yet replayed.

    lineno: 1-based line number; steps: the step records (lists); costs: seconds.
    text: the line as read (without its newline).
    """

    lineno: int
    workload_key: str
    target: str
    steps: tuple
    costs: tuple
    error_no: int
    all_cost: float
    timestamp: float
    text: str

    @property
    def mean_cost(self) -> float:
        """Mean of ``costs`` in seconds."""
        return sum(self.costs) / len(self.costs)


@dataclass(frozen=True)
class DagLine:
    """A validated DAG line: ``dag`` is the JSON object (not yet a ComputeDAG)."""

    lineno: int
    workload_key: str
    dag: dict
    text: str


# ---------------------------------------------------------------------------
# encoding
# ---------------------------------------------------------------------------

def _finite(x: float, default: float) -> float:
    x = float(x)
    return x if math.isfinite(x) else default


def encode_record(inp: MeasureInput, res: MeasureResult) -> str:
    """One JSON line (no newline) for a measurement; see the module docstring for the layout."""
    costs = [_finite(c, FAILED_COST_S) for c in res.costs] or [FAILED_COST_S]
    obj = {
        "i": [[str(inp.task.workload_key), str(inp.task.target)], step_records(inp.state)],
        "r": [costs, int(res.error_no), _finite(res.all_cost, 0.0), _finite(res.timestamp, 0.0)],
        "v": RECORD_VERSION,
    }
    return json.dumps(obj, separators=(",", ":"))


def encode_dag_line(workload_key: str, dag: Any) -> str:
    """The JSON line (no newline) that stores ``dag`` for ``workload_key``."""
    return json.dumps({"w": str(workload_key), "dag": json.loads(dag.to_json()), "v": RECORD_VERSION},
                      separators=(",", ":"))


# ---------------------------------------------------------------------------
# parsing and validation
# ---------------------------------------------------------------------------

def parse_line(text: str, lineno: int | None = None, filename: str = "") -> RawRecord | DagLine | None:
    """Validate one line; ``None`` for a blank line.

    Raises RecordFormatError (naming ``filename`` and ``lineno``) for invalid JSON,
    a missing or unknown version, or any field of the wrong type or value.
    """
    def fail(message: str) -> RecordFormatError:
        return RecordFormatError(message, lineno, filename)

    text = text.rstrip("\r\n")
    if not text.strip():
        return None
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as err:
        raise fail(f"not valid JSON ({err})") from None
    if not isinstance(obj, dict):
        raise fail(f"expected a JSON object, got {type(obj).__name__}")
    version = obj.get("v")
    if version != RECORD_VERSION:
        raise fail(f"unknown record version {version!r}; this reader understands {RECORD_VERSION!r}")
    if "w" in obj:
        if not isinstance(obj["w"], str) or not isinstance(obj.get("dag"), dict):
            raise fail('a DAG line needs "w" (a workload_key string) and "dag" (a JSON object)')
        return DagLine(lineno or 0, obj["w"], obj["dag"], text)
    if "i" not in obj or "r" not in obj:
        raise fail('expected a record ("i" and "r") or a DAG line ("w" and "dag")')
    key, target, steps = _parse_input(obj["i"], fail)
    costs, error_no, all_cost, timestamp = _parse_result(obj["r"], fail)
    return RawRecord(lineno or 0, key, target, steps, costs, error_no, all_cost, timestamp, text)


def _parse_input(i: Any, fail) -> tuple:
    if not (isinstance(i, list) and len(i) == 2 and isinstance(i[0], list) and len(i[0]) >= 2
            and isinstance(i[1], list)):
        raise fail('"i" must be [[workload_key, target, ...], [step records...]]')
    key, target = i[0][0], i[0][1]
    if not isinstance(key, str) or not isinstance(target, str):
        raise fail('"i": workload_key and target must be strings')
    for k, rec in enumerate(i[1]):
        if not isinstance(rec, list) or not rec:
            raise fail(f'"i": step {k} must be a non-empty list, got {rec!r}')
        try:
            step_from_record(rec)
        except SchedulerCoreError as err:
            raise fail(f'"i": step {k}: {err}') from None
    return key, target, tuple(i[1])


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _parse_result(r: Any, fail) -> tuple:
    if not (isinstance(r, list) and len(r) == 4):
        raise fail('"r" must be [[costs_s...], error_no, all_cost_s, timestamp]')
    costs, error_no, all_cost, timestamp = r
    if not (isinstance(costs, list) and costs and all(_is_number(c) and c >= 0 for c in costs)):
        raise fail(f'"r": costs must be a non-empty list of non-negative seconds, got {costs!r}')
    if isinstance(error_no, bool) or not isinstance(error_no, int) or error_no not in MeasureErrorNo._value2member_map_:
        raise fail(f'"r": error_no must be one of {[int(e) for e in MeasureErrorNo]}, got {error_no!r}')
    if not _is_number(all_cost) or not _is_number(timestamp):
        raise fail(f'"r": all_cost and timestamp must be numbers, got {all_cost!r}, {timestamp!r}')
    return tuple(float(c) for c in costs), int(error_no), float(all_cost), float(timestamp)


def decode_record(text: str, dags: Mapping[str, Any], lineno: int | None = None,
                  filename: str = "") -> tuple[MeasureInput, MeasureResult]:
    """Decode a record line into ``(MeasureInput, MeasureResult)``.

    dags: ``{workload_key: ComputeDAG}`` for the record's workload.  The input's
    ``task`` is a :class:`~scheduler_core.dag.task.Task` and its ``state`` is ``replay_steps(dag, steps)``.
    Raises RecordFormatError for an invalid line, a DAG line, an unknown
    workload_key, or steps that do not replay on the DAG.
    """
    raw = parse_line(text, lineno, filename)
    if not isinstance(raw, RawRecord):
        raise RecordFormatError("expected a record line", lineno, filename)
    dag = dags.get(raw.workload_key)
    if dag is None:
        raise RecordFormatError(f"no DAG for workload_key {raw.workload_key!r} (no earlier \"w\" line)",
                                lineno, filename)
    return _materialize(raw, _record_task(dag, raw, filename), filename)


def _record_task(dag: ComputeDAG, raw: RawRecord, filename: str) -> Task:
    """The Task of a record; RecordFormatError when its target does not parse."""
    try:
        return Task.create(dag, raw.target, workload_key=raw.workload_key)
    except SchedulerCoreError as err:
        raise RecordFormatError(f"invalid target {raw.target!r}: {err}", raw.lineno, filename) from None


def _materialize(raw: RawRecord, task: Task, filename: str = "") -> tuple[MeasureInput, MeasureResult]:
    try:
        state = replay_steps(task.compute_dag, raw.steps)
    except SchedulerCoreError as err:
        raise RecordFormatError(f"steps do not replay on the DAG of {raw.workload_key!r}: {err}",
                                raw.lineno, filename) from None
    result = MeasureResult(raw.costs, raw.error_no, "", raw.all_cost, raw.timestamp)
    return MeasureInput(task, state), result


# ---------------------------------------------------------------------------
# files
# ---------------------------------------------------------------------------

def iter_lines(filename: str | os.PathLike, skip_invalid: bool = False,
               errors: list | None = None) -> Iterator[RawRecord | DagLine]:
    """Validated lines of a record file, in order (blank lines skipped).

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


class RecordReader:
    """Iterates a record file as ``(MeasureInput, MeasureResult)`` pairs (TVM's ``RecordReader``).

    Parameters
    ----------
    filename : path of a JSON-lines record file
    dags : optional ``{workload_key: ComputeDAG}`` (any Mapping); used before the
        file's own DAG lines, so that records share the caller's DAG objects
    skip_invalid : bool, skip lines that fail validation or replay instead of
        raising RecordFormatError; they are listed in ``errors`` after iterating

    Each iteration reads the file again from the start.
    """

    def __init__(self, filename: str | os.PathLike, dags: Mapping[str, Any] | None = None,
                 skip_invalid: bool = False):
        self.filename = str(filename)
        self.dags = dags if dags is not None else {}
        self.skip_invalid = bool(skip_invalid)
        self.errors: list = []

    def __iter__(self) -> Iterator[tuple[MeasureInput, MeasureResult]]:
        self.errors = []
        tasks = _TaskTable(self.dags, self.filename)
        for item in iter_lines(self.filename, self.skip_invalid, self.errors):
            try:
                if isinstance(item, DagLine):
                    tasks.add_dag_line(item)
                    continue
                yield _materialize(item, tasks.task(item), self.filename)
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


class _TaskTable:
    """The DAGs of a file (parsed on first use) and one Task per (workload_key, target)."""

    def __init__(self, dags: Mapping[str, Any], filename: str):
        self.dags, self.filename = dags, filename
        self.dag_lines: dict = {}
        self.parsed: dict = {}
        self.tasks: dict = {}

    def add_dag_line(self, line: DagLine) -> None:
        self.dag_lines.setdefault(line.workload_key, line)

    def dag(self, raw: RawRecord):
        key = raw.workload_key
        found = self.dags.get(key) if self.dags else None
        if found is not None:
            return found
        if key not in self.parsed:
            line = self.dag_lines.get(key)
            if line is None:
                raise RecordFormatError(f"no DAG for workload_key {key!r} (no earlier \"w\" line)",
                                        raw.lineno, self.filename)
            try:
                self.parsed[key] = ComputeDAG.from_json(line.dag)
            except SchedulerCoreError as err:
                raise RecordFormatError(f"invalid DAG for {key!r}: {err}", line.lineno, self.filename) from None
        return self.parsed[key]

    def task(self, raw: RawRecord) -> Task:
        k = (raw.workload_key, raw.target)
        if k not in self.tasks:
            self.tasks[k] = _record_task(self.dag(raw), raw, self.filename)
        return self.tasks[k]


def load_records(filename: str | os.PathLike, dags: Mapping[str, Any] | None = None,
                 skip_invalid: bool = False) -> list[tuple[MeasureInput, MeasureResult]]:
    """All records of ``filename`` as ``(MeasureInput, MeasureResult)`` pairs, in file order."""
    return list(RecordReader(filename, dags, skip_invalid))


def _same_target(a: str, b: Any) -> bool:
    """Whether two target texts name the same Target (compared in canonical form)."""
    try:
        return Target.parse(a).str == Target.parse(b).str
    except SchedulerCoreError:
        return False


def load_best_record(filename: str | os.PathLike, workload_key: str | None = None, target: Any = None,
                     dags: Mapping[str, Any] | None = None,
                     skip_invalid: bool = False) -> tuple[MeasureInput, MeasureResult] | None:
    """The record with the lowest mean cost among NO_ERROR records (TVM's ``load_best_record``).

    workload_key / target: only consider records of this workload / target
    (targets compare as whitespace-normalized strings).  Returns None when no
    record qualifies.  Only the winner is replayed.
    """
    tasks = _TaskTable(dags or {}, str(filename))
    best = None
    for item in iter_lines(filename, skip_invalid):
        if isinstance(item, DagLine):
            tasks.add_dag_line(item)
        elif (item.error_no == MeasureErrorNo.NO_ERROR
              and (workload_key is None or item.workload_key == workload_key)
              and (target is None or _same_target(item.target, target))
              and (best is None or item.mean_cost < best.mean_cost)):
            best = item
    if best is None:
        return None
    return _materialize(best, tasks.task(best), str(filename))


def distill(in_file: str | os.PathLike, out_file: str | os.PathLike, skip_invalid: bool = False) -> int:
    """Keep only the best NO_ERROR record per (workload_key, target) (TVM's ``distill_record_file``).

    Records already in ``out_file`` take part too; ``out_file`` is rewritten
    atomically with each kept workload's DAG line before its record.  Records are
    copied verbatim (not replayed).  Returns the number of records kept.
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
            if item.error_no == MeasureErrorNo.NO_ERROR and (k not in best or item.mean_cost < best[k].mean_cost):
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

    ``callback(policy, inputs, results)`` writes one line per measurement, preceded
    by the workload's DAG line the first time a workload_key appears in the file
    (the file is scanned for DAG lines at construction, so reopening an existing
    file does not repeat them).  Each batch is appended with one write, then
    flushed and fsync'ed, so a killed process loses no finished measurement.
    """

    def __init__(self, filename: str | os.PathLike):
        self.filename = str(filename)
        self._dag_written: set = set()
        if os.path.exists(self.filename):
            with open(self.filename, encoding="utf-8", errors="replace") as f:
                for text in f:
                    if '"w"' not in text:
                        continue
                    try:
                        obj = json.loads(text)
                    except json.JSONDecodeError:
                        continue
                    if isinstance(obj, dict) and obj.get("v") == RECORD_VERSION and isinstance(obj.get("w"), str):
                        self._dag_written.add(obj["w"])

    def __call__(self, policy: Any, inputs: list[MeasureInput], results: list[MeasureResult]) -> None:
        lines, new_keys = [], set()
        for inp, res in zip(inputs, results):
            key = str(inp.task.workload_key)
            if key not in self._dag_written and key not in new_keys:
                lines.append(encode_dag_line(key, inp.task.compute_dag))
                new_keys.add(key)
            lines.append(encode_record(inp, res))
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


__all__ = ["RECORD_VERSION", "RawRecord", "DagLine", "encode_record", "encode_dag_line",
           "parse_line", "decode_record", "iter_lines", "RecordReader", "RecordToFile", "load_records",
           "load_best_record", "distill"]
