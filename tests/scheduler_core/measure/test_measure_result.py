"""MeasureResult's one wire form (``to_json`` / ``from_json``), as the runner's workers and the
measurement queue send it, and ``RawRecord.cost``: a record line's cost as ``MeasureResult.cost``.

    MeasureResult --to_json--> {"costs", "error_no", "error_msg", "all_cost", "timestamp"} --from_json--> equal
    a failed result: costs (FAILED_COST_S,), cost None; an empty costs list reads as (FAILED_COST_S,)
"""

from __future__ import annotations

import json

import pytest

from scheduler_core.measure.data import FAILED_COST_S, MeasureErrorNo, MeasureResult
from scheduler_core.measure.local_runner import worker_reply
from scheduler_core.measure.record import parse_line


def test_a_result_survives_its_json_wire_form():
    res = MeasureResult((3e-3, 1e-3, 2e-3), 0, "", 0.25, 1764000000.5)
    wire = json.loads(json.dumps(res.to_json()))  # what crosses the queue: plain JSON
    assert wire == {"costs": [3e-3, 1e-3, 2e-3], "error_no": 0, "error_msg": "", "all_cost": 0.25,
                    "timestamp": 1764000000.5}
    back = MeasureResult.from_json(wire)
    assert back == res and back.cost == pytest.approx(2e-3)  # the median of the repeats


def test_a_failed_result_and_an_empty_cost_list():
    wire = {"costs": [], "error_no": int(MeasureErrorNo.WRONG_ANSWER), "error_msg": "mismatch", "all_cost": 1.0,
            "timestamp": 2.0}
    res = MeasureResult.from_json(wire)
    assert res.costs == (FAILED_COST_S,) and res.cost is None and res.error_no == MeasureErrorNo.WRONG_ANSWER
    with pytest.raises(ValueError):
        MeasureResult.from_json({**wire, "error_no": 99})
    reply = worker_reply(MeasureErrorNo.RUNTIME_DEVICE, "crashed")
    assert MeasureResult.from_json(reply).costs == (FAILED_COST_S,) and reply["error_msg"] == "crashed"
    assert MeasureResult.from_json(worker_reply(0, "", (1e-3, 3e-3))).cost == pytest.approx(2e-3)


def test_a_record_line_has_the_cost_of_its_result():
    line = json.dumps({"i": [["wk", "llvm"], []], "r": [[4e-3, 2e-3, 3e-3], 0, 0.5, 1.0], "v": "autosched-record-v2"})
    raw = parse_line(line)
    assert raw.cost == pytest.approx(3e-3) == raw.result.cost and raw.result.all_cost == 0.5
    failed = parse_line(line.replace('], 0, 0.5', '], 5, 0.5'))
    assert failed.cost is None and failed.median_cost == pytest.approx(3e-3)
