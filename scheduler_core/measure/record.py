"""Measurement records, one line: the format, its encoders and its validating parser.

    (MeasureInput, MeasureResult) --encode_record--> line --parse_line--> RawRecord | DagLine
    RawRecord --record_file.decode_record--> (MeasureInput, MeasureResult) (steps replayed)

Files of such lines (reading, writing, the best record, distilling) live in
:mod:`scheduler_core.measure.record_file`.

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
from dataclasses import dataclass
from typing import Any

from scheduler_core.base.errors import RecordFormatError, SchedulerCoreError
from scheduler_core.base.target import Target
from scheduler_core.schedule.dataflow_step import step_from_record
from scheduler_core.schedule.loop_state import ANNOTATION_CODE

from .data import (
    FAILED_COST_S,
    MeasureErrorNo,
    MeasureInput,
    MeasureResult,
    step_records,
)
from .tvm_record import (
    TVM_RECORD_VERSION,
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
        return self.result.median_cost

    @property
    def result(self) -> MeasureResult:
        """The line's ``"r"`` as a MeasureResult (no error message: lines do not keep it)."""
        return MeasureResult(self.costs, self.error_no, "", self.all_cost, self.timestamp)

    @property
    def cost(self) -> float | None:
        """:attr:`MeasureResult.cost` of the line: the median in seconds, None for an error."""
        return self.result.cost

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


def check_format(format: str) -> str:
    """``format`` when it is one of RECORD_FORMATS; RecordFormatError naming the formats otherwise."""
    if format not in RECORD_FORMATS:
        raise RecordFormatError(f"unknown record format {format!r}; the formats are {', '.join(RECORD_FORMATS)}")
    return format


def _result_list(res: MeasureResult) -> list:
    """A record line's ``"r"``: ``[[costs_s...], error_no, all_cost_s, timestamp]`` (TVM's layout;
    non-finite numbers become FAILED_COST_S / 0)."""
    return [[_finite(c, FAILED_COST_S) for c in res.costs] or [FAILED_COST_S], int(res.error_no),
            _finite(res.all_cost, 0.0), _finite(res.timestamp, 0.0)]


def encode_record(inp: MeasureInput, res: MeasureResult, format: str = "autosched",
                  template: dict | None = None) -> str:
    """One JSON line (no newline) for a measurement; see the module docstring for the layout.

    format: ``"autosched"`` (ours, RECORD_VERSION) or ``"tvm"`` (:func:`encode_tvm_record`).
    template: for an AutoTVM template record, ``{"name": str, "args": list, "config": dict}``,
    written as the line's ``"t"`` field (our format only; TVM's lines have no place for it).
    Raises RecordFormatError for another format or a malformed template.
    """
    if check_format(format) == "tvm":
        return encode_tvm_record(inp, res)
    obj: dict[str, Any] = {
        "i": [[str(inp.task.workload_key), str(inp.task.target)], step_records(inp.state)],
        "r": _result_list(res),
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
                     step_records(inp.state), _result_list(res))


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
                         _result_list(raw.result))
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


__all__ = ["RECORD_VERSION", "LEGACY_RECORD_VERSIONS", "RECORD_FORMATS", "TEMPLATE_FIELD", "V1_ANNOTATIONS",
           "TVM_RECORD_VERSION", "RawRecord", "DagLine", "encode_record", "encode_tvm_record", "tvm_line_of",
           "encode_dag_line", "parse_line", "upgrade_v1_steps"]
