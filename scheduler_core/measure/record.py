"""Measurement records: one JSON object per line, the durable truth of every search.

    (MeasureInput, MeasureResult) --encode_record--> line --RecordToFile--> file (append, fsync)
    file --RecordReader / load_records--> (MeasureInput, MeasureResult), state = replay_steps(dag, steps)
    file --load_best_record / distill--> the fastest correct record per (workload_key, target)

Our lines (TVM's ``auto_scheduler/measure_record.py`` log lines, plus the DAG, so that a
record file alone can rebuild everything):

- a record: ``{"i": [[workload_key, target], [step records...]],
  "r": [[costs_s...], error_no, all_cost_s, timestamp], "v": RECORD_VERSION}``
- a DAG, written once per workload_key per file before its first record:
  ``{"w": workload_key, "dag": <ComputeDAG JSON object>, "v": RECORD_VERSION}``
- an AutoTVM template record (``scheduler_core.autotvm``): a record whose extra field
  ``"t": {"name": template, "args": [...], "config": {"index", "code_hash", "entity"}}``
  names the template, its arguments and the config (TVM's log form); its "i" holds the
  workload_key of the DAG the template built and the steps of the State the config made, so
  every reader here takes it as an ordinary, replayable record (``RawRecord.template``).

Step records use TVM's names, layouts and numeric codes (an "AN" step's code is TVM's
IteratorAnnotation: 5 blockIdx.x, 6 threadIdx.x, 7 blockIdx.y, ...).  Versions read:

- ``RECORD_VERSION`` ("autosched-record-v2");
- "autosched-record-v1" (``LEGACY_RECORD_VERSIONS``), whose "AN" codes of GPU axes were
  numbered blockIdx.x/y/z = 5/6/7, threadIdx.x/y/z = 8/9/10; they are converted on reading
  (``RawRecord.steps`` always holds current codes; ``text`` stays as read);
- TVM's "v0.6" lines (``tvm_record``): ``{"i": [[workload_key, target, hardware_params,
  target_host, layout_rewrite_option, task_input_names], [[], [steps...]]], "r": ..., "v":
  "v0.6"}``, mixed freely with ours in one file.  They carry no DAG: a reader resolves their
  workload_key (TVM's ``["<hash>", shape...]`` or ``["func_name", args...]``) through the
  ``dags`` it is given, the ``register_workload`` registry, or the ``task`` it is given
  (:class:`~scheduler_core.measure.tvm_record.TvmWorkloadResolver`); such a record's Task has
  our workload_key for that DAG and TVM's hardware params.  ``RecordToFile(f, format="tvm")``
  writes lines TVM reads (no DAG lines).

Failed measurements keep ``costs == [FAILED_COST_S]`` (1e10 s, Ansor's convention).  Decoding
validates every field and raises :class:`~scheduler_core.base.errors.RecordFormatError`
(a ValueError) naming the line; lines of another version are rejected.  Lines starting with
``#`` are comments (TVM's reader skips them too).
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
from scheduler_core.schedule.loop_state import ANNOTATION_CODE

from .data import (
    FAILED_COST_S,
    MeasureErrorNo,
    MeasureInput,
    MeasureResult,
    median_of,
    step_records,
)
from .tvm_record import (
    TVM_RECORD_VERSION,
    TvmWorkloadResolver,
    UnresolvedWorkloadError,
    hardware_params_from_tvm,
    hardware_params_to_tvm,
    layout_rewrite_option,
    steps_from_tvm,
    steps_to_tvm,
    target_from_tvm,
    tvm_workload_key,
)

RECORD_VERSION = "autosched-record-v2"
# Earlier versions of our lines that are still read (and converted).
LEGACY_RECORD_VERSIONS = ("autosched-record-v1",)
# The formats RecordToFile / encode_record / save_records write.
RECORD_FORMATS = ("autosched", "tvm")
# The field of an AutoTVM template record naming its template, arguments and config.
TEMPLATE_FIELD = "t"
# autosched-record-v1's annotation codes ("AN" steps), index = code.
V1_ANNOTATIONS = ("none", "unroll", "vectorize", "parallel", "vthread",
                  "blockIdx.x", "blockIdx.y", "blockIdx.z", "threadIdx.x", "threadIdx.y", "threadIdx.z")


@dataclass(frozen=True)
class RawRecord:
    """A validated record line, not yet replayed.

    lineno: 1-based line number; steps: the step records (lists) in the current encoding
    (a v1 line's annotation codes converted, a TVM line's unknown split extents ``None``);
    costs: seconds.  text: the line as read (without its newline).
    version: the line's ``"v"``.  For a TVM line (``is_tvm``): ``workload_key`` is TVM's key
    as written, ``target`` TVM's target with the options our Target does not take dropped
    (``tvm_record.target_from_tvm``), ``hardware_params`` TVM's 8 values (None when absent).
    template: the ``"t"`` field of an AutoTVM template record (``{"name", "args", "config"}``),
    None for a record of the auto-scheduler.
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
    version: str = RECORD_VERSION
    hardware_params: tuple | None = None
    template: dict | None = None

    @property
    def mean_cost(self) -> float:
        """Mean of ``costs`` in seconds (what TVM ranks records by)."""
        return sum(self.costs) / len(self.costs)

    @property
    def median_cost(self) -> float:
        """Median of ``costs`` in seconds: what the best record is chosen by here."""
        return median_of(self.costs)

    @property
    def is_tvm(self) -> bool:
        """Whether this is a TVM ("v0.6") line: its workload_key is TVM's, its DAG not in the file."""
        return self.version == TVM_RECORD_VERSION


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


def _check_format(format: str) -> str:
    if format not in RECORD_FORMATS:
        raise RecordFormatError(f"unknown record format {format!r}; the formats are {', '.join(RECORD_FORMATS)}")
    return format


def _result_list(costs: Any, error_no: int, all_cost: float, timestamp: float) -> list:
    return [[_finite(c, FAILED_COST_S) for c in costs] or [FAILED_COST_S], int(error_no),
            _finite(all_cost, 0.0), _finite(timestamp, 0.0)]


def encode_record(inp: MeasureInput, res: MeasureResult, format: str = "autosched",
                  template: dict | None = None) -> str:
    """One JSON line (no newline) for a measurement; see the module docstring for the layout.

    format: ``"autosched"`` (ours, RECORD_VERSION) or ``"tvm"`` (:func:`encode_tvm_record`).
    template: for an AutoTVM template record, ``{"name": str, "args": list, "config": dict}``,
    written as the line's ``"t"`` field (our format only; TVM's lines have no place for it).
    Raises RecordFormatError for another format or a malformed template.
    """
    if _check_format(format) == "tvm":
        return encode_tvm_record(inp, res)
    obj: dict[str, Any] = {
        "i": [[str(inp.task.workload_key), str(inp.task.target)], step_records(inp.state)],
        "r": _result_list(res.costs, res.error_no, res.all_cost, res.timestamp),
        "v": RECORD_VERSION,
    }
    if template is not None:
        obj[TEMPLATE_FIELD] = _check_template(template, lambda m: RecordFormatError(m))
    return json.dumps(obj, separators=(",", ":"))


def _check_template(t: Any, fail) -> dict:
    """The ``"t"`` field of a template record: ``{"name": str, "args": list, "config": {"index": int,
    "entity": list, ...}}``; raises ``fail(message)`` otherwise."""
    if not (isinstance(t, dict) and isinstance(t.get("name"), str) and isinstance(t.get("args"), list)
            and isinstance(t.get("config"), dict) and isinstance(t["config"].get("index"), int)
            and isinstance(t["config"].get("entity"), list)):
        raise fail(f'"{TEMPLATE_FIELD}" must be {{"name": str, "args": [...], "config": {{"index": int, '
                   f'"entity": [...]}}}}, got {t!r}')
    return t


def _tvm_line(workload_key: str, dag: Any, target: Target, hardware_params: Any, steps: Any,
              result: list) -> str:
    obj = {
        "i": [[tvm_workload_key(workload_key, dag), str(target), hardware_params_to_tvm(hardware_params), "",
               layout_rewrite_option(target), []],
              [[], steps_to_tvm(steps)]],
        "r": result,
        "v": TVM_RECORD_VERSION,
    }
    return json.dumps(obj)  # TVM's dmlc writer spaces its separators the same way


def encode_tvm_record(inp: MeasureInput, res: MeasureResult) -> str:
    """One TVM v0.6 line (no newline) for a measurement, as TVM's ``RecordToFile`` writes it.

    ``{"i": [[tvm_key, target, hardware_params, "", layout_rewrite_option, []], [[], steps]],
    "r": [[costs_s...], error_no, all_cost_s, timestamp], "v": "v0.6"}``: tvm_key is
    :func:`~scheduler_core.measure.tvm_record.tvm_workload_key` (our key when it is a JSON
    list, else ``["<our key>", shape...]``; TVM needs the same DAG registered under it),
    hardware_params the task's (TVM's 8 fields), layout_rewrite_option TVM's default for the
    target.  Raises RecordFormatError for steps TVM cannot read (``tvm_record.steps_to_tvm``).
    """
    task = inp.task
    return _tvm_line(str(task.workload_key), task.compute_dag, task.target, task.hardware_params,
                     step_records(inp.state), _result_list(res.costs, res.error_no, res.all_cost, res.timestamp))


def tvm_line_of(raw: RawRecord, dag: Any, hardware_params: Any = None) -> str:
    """A record line (ours, or TVM's) rewritten as a TVM v0.6 line, without replaying it.

    dag: the record's ComputeDAG (for the key's shapes); hardware_params: default
    ``HardwareParams.for_target`` of the record's target (a TVM line keeps its own).
    Raises RecordFormatError for a target that does not parse or steps TVM cannot read.
    """
    try:
        target = Target.parse(raw.target)
    except SchedulerCoreError as err:
        raise RecordFormatError(f"invalid target {raw.target!r}: {err}", raw.lineno) from None
    if hardware_params is None:
        hardware_params = hardware_params_from_tvm(target, raw.hardware_params)
    try:
        return _tvm_line(raw.workload_key, dag, target, hardware_params, raw.steps,
                         _result_list(raw.costs, raw.error_no, raw.all_cost, raw.timestamp))
    except RecordFormatError as err:
        raise RecordFormatError(str(err), raw.lineno) from None


def encode_dag_line(workload_key: str, dag: Any) -> str:
    """The JSON line (no newline) that stores ``dag`` for ``workload_key``."""
    return json.dumps({"w": str(workload_key), "dag": json.loads(dag.to_json()), "v": RECORD_VERSION},
                      separators=(",", ":"))


# ---------------------------------------------------------------------------
# parsing and validation
# ---------------------------------------------------------------------------

def parse_line(text: str, lineno: int | None = None, filename: str = "") -> RawRecord | DagLine | None:
    """Validate one line; ``None`` for a blank line or a ``#`` comment.

    Reads RECORD_VERSION, LEGACY_RECORD_VERSIONS (v1 annotation codes converted) and TVM's
    "v0.6" lines.  Raises RecordFormatError (naming ``filename`` and ``lineno``) for invalid
    JSON, a missing or unknown version, or any field of the wrong type or value.
    """
    def fail(message: str) -> RecordFormatError:
        return RecordFormatError(message, lineno, filename)

    text = text.rstrip("\r\n")
    if not text.strip() or text.lstrip().startswith("#"):
        return None
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as err:
        raise fail(f"not valid JSON ({err})") from None
    if not isinstance(obj, dict):
        raise fail(f"expected a JSON object, got {type(obj).__name__}")
    version = obj.get("v")
    if version == TVM_RECORD_VERSION:
        return _parse_tvm_record(obj, text, lineno or 0, fail)
    if version != RECORD_VERSION and version not in LEGACY_RECORD_VERSIONS:
        raise fail(f"unknown record version {version!r}; this reader understands {RECORD_VERSION!r}, "
                   + ", ".join(repr(v) for v in LEGACY_RECORD_VERSIONS) + f" and TVM's {TVM_RECORD_VERSION!r}")
    if "w" in obj:
        if not isinstance(obj["w"], str) or not isinstance(obj.get("dag"), dict):
            raise fail('a DAG line needs "w" (a workload_key string) and "dag" (a JSON object)')
        return DagLine(lineno or 0, obj["w"], obj["dag"], text)
    if "i" not in obj or "r" not in obj:
        raise fail('expected a record ("i" and "r") or a DAG line ("w" and "dag")')
    key, target, steps = _parse_input(obj["i"], fail, upgrade_v1=version != RECORD_VERSION)
    costs, error_no, all_cost, timestamp = _parse_result(obj["r"], fail)
    template = _check_template(obj[TEMPLATE_FIELD], fail) if TEMPLATE_FIELD in obj else None
    return RawRecord(lineno or 0, key, target, steps, costs, error_no, all_cost, timestamp, text, version,
                     template=template)


def upgrade_v1_steps(steps: list) -> list:
    """autosched-record-v1 step records with their "AN" codes renumbered as TVM's (and ours now).

    Codes that v1 did not have are left alone (decoding then rejects them).
    """
    out = []
    for rec in steps:
        if (isinstance(rec, list) and len(rec) == 4 and rec[0] == "AN" and isinstance(rec[3], int)
                and 0 <= rec[3] < len(V1_ANNOTATIONS)):
            rec = [*rec[:3], ANNOTATION_CODE[V1_ANNOTATIONS[rec[3]]]]
        out.append(rec)
    return out


def _check_steps(steps: Any, fail) -> tuple:
    for k, rec in enumerate(steps):
        if not isinstance(rec, list) or not rec:
            raise fail(f'"i": step {k} must be a non-empty list, got {rec!r}')
        try:
            step_from_record(rec)
        except SchedulerCoreError as err:
            raise fail(f'"i": step {k}: {err}') from None
    return tuple(steps)


def _parse_input(i: Any, fail, upgrade_v1: bool = False) -> tuple:
    if not (isinstance(i, list) and len(i) == 2 and isinstance(i[0], list) and len(i[0]) >= 2
            and isinstance(i[1], list)):
        raise fail('"i" must be [[workload_key, target, ...], [step records...]]')
    key, target = i[0][0], i[0][1]
    if not isinstance(key, str) or not isinstance(target, str):
        raise fail('"i": workload_key and target must be strings')
    steps = upgrade_v1_steps(i[1]) if upgrade_v1 else i[1]
    return key, target, _check_steps(steps, fail)


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _tvm_state_steps(state: Any, fail) -> list:
    """The steps of TVM's serialized State ``[[], [steps...]]`` (a bare step list is read too)."""
    if isinstance(state, list) and len(state) == 2 and state[0] == [] and isinstance(state[1], list):
        return state[1]
    if isinstance(state, list) and all(isinstance(r, list) and r and isinstance(r[0], str) for r in state):
        return state
    raise fail('"i"[1] of a TVM record must be its State: [[], [step records...]]')


def _parse_tvm_record(obj: dict, text: str, lineno: int, fail) -> RawRecord:
    """A TVM v0.6 record line (see the module docstring of ``tvm_record``)."""
    if "i" not in obj or "r" not in obj:
        raise fail('a TVM v0.6 line needs "i" and "r"')
    i = obj["i"]
    if not (isinstance(i, list) and len(i) == 2 and isinstance(i[0], list) and 2 <= len(i[0]) <= 6):
        raise fail('"i" of a TVM v0.6 record must be [[workload_key, target, hardware_params, target_host, '
                   'layout_rewrite_option, task_input_names] (2 to 6 entries), [[], [step records...]]]')
    task = i[0]
    key, target = task[0], task[1]
    if not isinstance(key, str) or not isinstance(target, str):
        raise fail('"i": workload_key and target must be strings')
    hardware_params = None
    if len(task) > 2 and task[2] is not None:
        if not (isinstance(task[2], list) and len(task[2]) == 8 and all(_is_int(v) for v in task[2])):
            raise fail(f'"i": hardware_params must be 8 integers (num_cores, vector_unit_bytes, cache_line_bytes, '
                       f'max_shared_memory_per_block, max_local_memory_per_block, max_threads_per_block, '
                       f'max_vthread_extent, warp_size), got {task[2]!r}')
        hardware_params = tuple(task[2])
    if len(task) > 3 and not isinstance(task[3], str):
        raise fail(f'"i": target_host must be a string, got {task[3]!r}')
    if len(task) > 4 and not _is_int(task[4]):
        raise fail(f'"i": layout_rewrite_option must be an integer, got {task[4]!r}')
    if len(task) > 5 and not (isinstance(task[5], list) and all(isinstance(n, str) for n in task[5])):
        raise fail(f'"i": task_input_names must be a list of strings, got {task[5]!r}')
    steps = _check_steps(steps_from_tvm(_tvm_state_steps(i[1], fail)), fail)
    costs, error_no, all_cost, timestamp = _parse_result(obj["r"], fail)
    return RawRecord(lineno, key, target_from_tvm(target), steps, costs, error_no, all_cost, timestamp, text,
                     TVM_RECORD_VERSION, hardware_params)


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
    result = MeasureResult(raw.costs, raw.error_no, "", raw.all_cost, raw.timestamp)
    return MeasureInput(task, state), result


# ---------------------------------------------------------------------------
# files
# ---------------------------------------------------------------------------

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
        return Target.parse(a).str == Target.parse(b).str
    except SchedulerCoreError:
        return False


def load_best_record(filename: str | os.PathLike, workload_key: str | None = None, target: Any = None,
                     dags: Mapping[str, Any] | None = None, skip_invalid: bool = False,
                     task: Any = None) -> tuple[MeasureInput, MeasureResult] | None:
    """The record with the lowest mean cost among NO_ERROR records (TVM's ``load_best_record``).

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
        elif (item.error_no == MeasureErrorNo.NO_ERROR
              and (best is None or item.median_cost < best.median_cost)
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
            if item.error_no == MeasureErrorNo.NO_ERROR and (k not in best or item.median_cost < best[k].median_cost):
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
        self.format = _check_format(format)
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


__all__ = ["RECORD_VERSION", "LEGACY_RECORD_VERSIONS", "RECORD_FORMATS", "TEMPLATE_FIELD", "V1_ANNOTATIONS",
           "TVM_RECORD_VERSION",
           "RawRecord", "DagLine", "UnresolvedWorkloadError", "encode_record", "encode_tvm_record", "tvm_line_of",
           "encode_dag_line", "parse_line", "upgrade_v1_steps", "decode_record", "iter_lines", "RecordReader",
           "RecordToFile", "save_records", "load_records", "load_best_record", "native_lines", "distill"]
