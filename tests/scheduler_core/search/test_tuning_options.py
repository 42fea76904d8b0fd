"""TuningOptions: one table of fields, defaults and bounds for the library, the API, Redis and the CLI."""

import dataclasses
import json

import pytest

import scheduler_core as sc
from scheduler_core.base.errors import InvalidWorkloadError
from scheduler_core.search.tuning_options import TUNING_FIELDS, TuningOptions


def test_the_dataclass_defaults_are_the_table():
    fields = {f.name: f for f in dataclasses.fields(TuningOptions)}
    for f in TUNING_FIELDS:
        assert fields[f.name].default == f.default, f.name
    assert TuningOptions().to_json() == {f.name: f.default for f in TUNING_FIELDS}
    assert sc.TuningOptions is TuningOptions


def test_json_round_trip_and_library_fields():
    log = []
    opts = TuningOptions(num_measure_trials=8, num_measures_per_round=4, early_stopping=16, seed=3,
                         measure_callbacks=[log.append])
    text = json.dumps(opts.to_json())
    again = TuningOptions.from_json(json.loads(text), measure_callbacks=[log.append])
    assert again == opts and again.measure_callbacks and "measure_callbacks" not in text


@pytest.mark.parametrize("field,value,why", [
    ("num_measure_trials", 0, ">= 1"), ("num_measure_trials", 10**9, "<= 100000"),
    ("num_measure_trials", "10", "a number"), ("num_measure_trials", 1.5, "an integer"),
    ("num_measures_per_round", True, "a number"), ("timeout_s", 0.0, "> 0"),
    ("timeout_s", float("inf"), "finite"), ("seed", -1, ">= 0"), ("measure", "remote", "one of"),
    ("early_stopping", 0, ">= 1"),
])
def test_bad_values_name_the_field(field, value, why):
    with pytest.raises(InvalidWorkloadError, match=why) as info:
        TuningOptions(**{field: value})
    assert field in str(info.value) and info.value.path == f"tuning.{field}"


def test_unknown_keys_are_rejected():
    with pytest.raises(InvalidWorkloadError, match="unknown tuning option.*num_trials"):
        TuningOptions.from_json({"num_trials": 4})
