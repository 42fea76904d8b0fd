"""Measurement records: encode/decode, RecordToFile, RecordReader, best record, distill, validation.

    (MeasureInput, MeasureResult) --encode_record--> JSON line --decode_record--> same steps, same program
    RecordToFile: DAG line once per workload_key per file (also after reopening), fsync per batch
    load_best_record: lowest mean cost among NO_ERROR records;  distill: best per (workload_key, target)
    malformed lines: RecordFormatError (a ValueError) naming the line; skip_invalid=True skips them

No program is built or run here: results are made up.
"""

from __future__ import annotations

import dataclasses
import json

import pytest

from scheduler_core.base.errors import RecordFormatError
from scheduler_core.dag.compute_dag import ComputeDAG
from scheduler_core.dag.task import Task
from scheduler_core.lowering.lower import lower_state
from scheduler_core.measure.data import MeasureErrorNo, MeasureInput, MeasureResult
from scheduler_core.measure.record import RECORD_VERSION, encode_dag_line, encode_record
from scheduler_core.measure.record_file import (
    RecordReader,
    RecordToFile,
    decode_record,
    distill,
    load_best_record,
    load_records,
)
from scheduler_core.schedule.loop_state import State
from scheduler_core.schedule.schedule_api import Schedule
from tests.workloads import matmul, matmul_add

E = MeasureErrorNo


def _tiled_input(n: int = 32, target: str = "llvm", inner: int = 8) -> MeasureInput:
    """matmul+bias: split/reorder/vectorize/unroll on the output, matmul computed at its tile."""
    dag = ComputeDAG(matmul_add(n, n, n))
    A, B, C, out = dag.tensors
    mm = out.op.input_tensors()[0]
    s = Schedule.from_state(State.from_dag(dag))
    i, j = s[out].op.axis
    io, ii = s[out].split(i, factor=4)
    jo, ji = s[out].split(j, factor=inner)
    s[out].reorder(io, jo, ii, ji)
    s[out].vectorize(ji)
    s[out].unroll(ii)
    s[mm].compute_at(s[out], jo)
    return MeasureInput(Task.create(dag, target), s.state)


def _plain_input(n: int = 16, target: str = "llvm") -> MeasureInput:
    dag = ComputeDAG(matmul(n, n, n))
    return MeasureInput(Task.create(dag, target), State.from_dag(dag))


def _result(cost_s: float, error_no: int = 0) -> MeasureResult:
    return MeasureResult((cost_s, cost_s), int(error_no), "", 0.25, 1.7e9)


def _program(inp: MeasureInput) -> str:
    return str(lower_state(inp.state, list(inp.task.compute_dag.tensors)))


def test_encode_decode_round_trip():
    inp, res = _tiled_input(), MeasureResult((1.5e-4, 1.25e-4), 0, "", 0.75, 1.7e9 + 0.5)
    line = encode_record(inp, res)
    obj = json.loads(line)
    assert obj["v"] == RECORD_VERSION and obj["i"][0] == [inp.task.workload_key, "llvm"]
    assert obj["r"] == [[1.5e-4, 1.25e-4], 0, 0.75, 1.7e9 + 0.5]
    inp2, res2 = decode_record(line, {inp.task.workload_key: inp.task.compute_dag})
    assert inp2.state.transform_steps == inp.state.transform_steps
    assert _program(inp2) == _program(inp)
    assert res2.costs == res.costs and res2.error_no == 0 and res2.all_cost == 0.75 and res2.timestamp == res.timestamp
    assert inp2.task.workload_key == inp.task.workload_key and str(inp2.task.target) == "llvm"


def test_record_to_file_writes_each_dag_once_and_survives_reopen(tmp_path):
    path = tmp_path / "log.json"
    a, b = _tiled_input(), _plain_input()
    RecordToFile(path)(None, [a, a], [_result(2e-3), _result(1e-3)])
    RecordToFile(path)(None, [a, b], [_result(3e-3), _result(5e-4, E.RUN_TIMEOUT)])  # reopened: append
    lines = [json.loads(t) for t in path.read_text().splitlines()]
    dag_keys = [o["w"] for o in lines if "w" in o]
    assert dag_keys == [a.task.workload_key, b.task.workload_key]
    assert "w" in lines[0] and "i" in lines[1]  # the DAG comes before its first record
    assert [o["r"][0][0] for o in lines if "i" in o] == [2e-3, 1e-3, 3e-3, 5e-4]

    records = load_records(path)  # DAGs rebuilt from the file's own "w" lines
    assert len(records) == 4 and [r.error_no for _, r in records] == [0, 0, 0, E.RUN_TIMEOUT]
    assert _program(records[0][0]) == _program(a) and _program(records[3][0]) == _program(b)
    assert records[0][0].task is records[2][0].task  # one RecordTask per (workload_key, target)
    given = RecordReader(path, dags={a.task.workload_key: a.task.compute_dag}).read_lines(max_lines=1)[0]
    assert given[0].task.compute_dag is a.task.compute_dag


def test_load_best_record_and_filters(tmp_path):
    path = tmp_path / "log.json"
    a, a_avx2, b = _tiled_input(), _tiled_input(target="llvm -mcpu=core-avx2", inner=16), _plain_input()
    RecordToFile(path)(
        None, [a, a, a, a_avx2, b],
        [_result(3e-3), _result(1e-4, E.WRONG_ANSWER), _result(2e-3), _result(1e-3), _result(5e-3)])
    best_inp, best_res = load_best_record(path)
    assert best_res.costs == (1e-3, 1e-3) and str(best_inp.task.target) == "llvm -mcpu=core-avx2"
    inp, res = load_best_record(path, workload_key=a.task.workload_key, target="llvm")
    assert res.costs[0] == 2e-3 and _program(inp) == _program(a)
    assert load_best_record(path, target="llvm  -mcpu=core-avx2")[1].costs[0] == 1e-3  # whitespace-normalized
    assert load_best_record(path, workload_key=b.task.workload_key)[1].costs[0] == 5e-3
    assert load_best_record(path, workload_key="no-such-workload") is None


def test_distill_keeps_the_best_per_workload_and_target(tmp_path):
    log, out = tmp_path / "log.json", tmp_path / "best" / "out.json"
    a, a_avx2, b = _tiled_input(), _tiled_input(target="llvm -mcpu=core-avx2"), _plain_input()
    RecordToFile(log)(
        None, [a, a, a_avx2, a_avx2, b, b],
        [_result(3e-3), _result(2e-3), _result(4e-3), _result(1e-9, E.RUNTIME_DEVICE), _result(1e-3), _result(9e-4)])
    assert distill(log, out) == 3
    records = load_records(out)
    kept = sorted((str(i.task.target), i.task.workload_key == a.task.workload_key, r.costs[0]) for i, r in records)
    assert kept == [("llvm", False, 9e-4), ("llvm", True, 2e-3), ("llvm -mcpu=core-avx2", True, 4e-3)]
    assert sum(1 for t in out.read_text().splitlines() if '"w"' in t) == 2
    # a second distill merges with what out already holds
    log2 = tmp_path / "log2.json"
    RecordToFile(log2)(None, [b], [_result(5e-4)])
    assert distill(log2, out) == 3
    assert load_best_record(out, workload_key=b.task.workload_key)[1].costs[0] == 5e-4


def _write_lines(path, lines):
    path.write_text("".join(t + "\n" for t in lines))


@pytest.mark.parametrize("bad, message", [
    ("{not json", "not valid JSON"),
    ("[1, 2]", "expected a JSON object"),
    ('{"i": [], "r": [], "v": "autosched-record-v0"}', "unknown record version"),
    ('{"i": [], "r": []}', "unknown record version None"),
    ('{"r": [[1e-3], 0, 0.1, 1.0], "v": "V"}', "expected a record"),
    ('{"i": [["K", "llvm"], [["SP", 2]]], "r": [[1e-3], 0, 0.1, 1.0], "v": "V"}', "step 0"),
    ('{"i": [["K", "llvm"], [["XX", 1]]], "r": [[1e-3], 0, 0.1, 1.0], "v": "V"}', "unknown step kind"),
    ('{"i": [["K", "llvm"], []], "r": [[], 0, 0.1, 1.0], "v": "V"}', "costs"),
    ('{"i": [["K", "llvm"], []], "r": [[1e-3], 42, 0.1, 1.0], "v": "V"}', "error_no"),
    ('{"i": [["K", "llvm"], []], "r": [[1e-3], 0, "x", 1.0], "v": "V"}', "all_cost"),
    ('{"i": [["K", 3], []], "r": [[1e-3], 0, 0.1, 1.0], "v": "V"}', "must be strings"),
    ('{"i": [["no-dag", "llvm"], []], "r": [[1e-3], 0, 0.1, 1.0], "v": "V"}', "no DAG for workload_key"),
    ('{"i": [["K", "llvm"], [["SP", 2, 9, 16, [4], 1]]], "r": [[1e-3], 0, 0.1, 1.0], "v": "V"}', "do not replay"),
    ('{"w": "K2", "dag": {"ops": 1}, "v": "V"}\n{"i": [["K2", "llvm"], []], "r": [[1e-3], 0, 0.1, 1.0], "v": "V"}',
     "invalid DAG"),
])
def test_malformed_lines_raise_record_format_error_naming_the_line(tmp_path, bad, message):
    path = tmp_path / "log.json"
    good = _plain_input()
    RecordToFile(path)(None, [good], [_result(1e-3)])  # lines 1 (DAG) and 2 (record)
    text = path.read_text() + "\n" + bad.replace('"K"', json.dumps(good.task.workload_key)).replace(
        '"V"', json.dumps(RECORD_VERSION)) + "\n"
    path.write_text(text)  # line 3 blank, the bad line(s) from 4 on
    with pytest.raises(RecordFormatError, match=message) as info:
        load_records(path)
    assert isinstance(info.value, ValueError) and info.value.lineno >= 4
    assert f"line {info.value.lineno}" in str(info.value)
    reader = RecordReader(path, skip_invalid=True)
    assert [r.costs[0] for _, r in reader] == [1e-3] and len(reader.errors) == 1


def test_a_line_cut_by_a_kill_does_not_swallow_the_next_batch(tmp_path):
    path = tmp_path / "log.json"
    a = _plain_input()
    write = RecordToFile(path)
    write(None, [a], [_result(2e-3)])
    with open(path, "a") as f:
        f.write(encode_record(a, _result(1e-3))[:40])  # killed mid-write: no newline
    RecordToFile(path)(None, [a], [_result(3e-3)])
    reader = RecordReader(path, skip_invalid=True)
    assert [r.costs[0] for _, r in reader] == [2e-3, 3e-3] and len(reader.errors) == 1
    assert load_best_record(path, skip_invalid=True)[1].costs[0] == 2e-3
    with pytest.raises(RecordFormatError, match="line 3"):
        load_records(path)


def test_dag_line_and_failed_cost_encoding():
    a = _plain_input()
    obj = json.loads(encode_dag_line(a.task.workload_key, a.task.compute_dag))
    assert obj["w"] == a.task.workload_key
    assert ComputeDAG.from_json(obj["dag"]).workload_key == a.task.compute_dag.workload_key
    nan_res = dataclasses.replace(_result(1.0), costs=(float("nan"),))
    assert json.loads(encode_record(a, nan_res))["r"][0] == [1e10]
