"""The API's tuning object is the library's TuningOptions: same fields, defaults and bounds."""

from api.schemas import TaskCreate, TuningOptions
from scheduler_core.search.tuning_options import TUNING_FIELDS
from scheduler_core.search.tuning_options import TuningOptions as LibraryTuningOptions


def test_api_defaults_are_the_library_defaults():
    assert TuningOptions().model_dump() == LibraryTuningOptions().to_json()
    body = TaskCreate.model_validate({"dag": {}, "tuning": {"num_measure_trials": 5}})
    assert LibraryTuningOptions.from_json(body.tuning.model_dump()) == LibraryTuningOptions(num_measure_trials=5)


def test_api_schema_carries_the_bounds_and_descriptions():
    props = TuningOptions.model_json_schema()["properties"]
    assert set(props) == {f.name for f in TUNING_FIELDS}
    for f in TUNING_FIELDS:
        p = props[f.name]
        assert p.get("description") == f.doc
        if f.le is not None and f.type in (int, float):
            assert p["maximum"] == f.le
