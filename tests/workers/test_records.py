"""TaskRecord / JobRecord / ModelRecord: the typed form of the service's Redis hashes.

    hash as stored before the records existed --from_hash--> record --to_hash--> the same fields
    a real Redis: what the store writes reads back as the record it was made from
"""

from __future__ import annotations

import json

import pytest

from api.schemas import JobPublic, TaskPublic
from workers import keys
from workers.admission import new_job_fields
from workers.job_state import JobState
from workers.records import JobRecord, ModelRecord, ModelTaskRef, TaskRecord

LEGACY_JOB = {b"job_id": b"j1", b"task_id": b"t1", b"state": b"running", b"trials_done": b"6",
              b"trials_total": b"10", b"best_cost_s": b"0.002", b"best_gflops": b"1.5",
              b"errors": b'{"RUN_TIMEOUT": 2}', b"created": b"1764000000.5", b"started": b"1764000001.0",
              b"ended": b"", b"error": b"", b"cancel": b"0", b"phase": b"evolution", b"phase_since": b"1764000002.0"}


def test_a_job_hash_stored_before_the_records_reads_and_writes_back_the_same():
    job = JobRecord.from_hash(LEGACY_JOB)
    assert job is not None
    assert (job.state, job.trials_done, job.trials_total) == (JobState.running, 6, 10)
    assert job.best_cost_s == 0.002 and job.best_gflops == 1.5 and job.errors == {"RUN_TIMEOUT": 2}
    assert job.created == 1764000000.5 and job.ended is None and job.model_id is None and not job.cancel
    assert job.phase == "evolution" and job.phase_since == 1764000002.0
    written = job.to_hash()
    assert {k: str(v) for k, v in written.items()} == {k.decode(): v.decode() for k, v in LEGACY_JOB.items()}
    assert JobRecord.from_hash(written) == job
    assert JobRecord.from_hash({}) is None


def test_a_model_job_keeps_its_model_and_per_task_trials():
    job = JobRecord.from_hash({**new_job_fields("j2", "", 4, "m1"), "trials_done:t1": "3", "trials_done:t2": "1"})
    assert job is not None and job.model_id == "m1" and job.task_id == "" and job.state == JobState.queued
    assert job.task_trials == {"t1": 3, "t2": 1} and job.trials_total == 4 and job.created is not None
    assert JobRecord.from_hash(job.to_hash()) == job
    assert "model_id" not in new_job_fields("j3", "t", 1)  # a task job's hash has no model_id, as before


def test_task_and_model_records_round_trip():
    task = TaskRecord("t1", "wk", "llvm", 1764000000.25, {"num_measure_trials": 8}, "j1", 12)
    assert TaskRecord.from_hash(task.to_hash()) == task
    assert TaskRecord.from_hash({"tuning": "{}"}) is None  # incomplete: no workload_key
    old = TaskRecord.from_hash({b"task_id": b"t0", b"workload_key": b"wk0", b"target": b"llvm", b"created": b"1.5",
                                b"tuning": b'{"seed": 3}', b"latest_job_id": b""})  # no trials_total yet
    assert old == TaskRecord("t0", "wk0", "llvm", 1.5, {"seed": 3}, "", 0)
    model = ModelRecord("m1", "llvm", (ModelTaskRef("t1", "wk1", ("dense0", "dense1"), 2),
                                       ModelTaskRef("t2", "wk2", ("bias",), 1)), {"seed": 0}, "j1", 2.0, 6)
    assert ModelRecord.from_hash(model.to_hash()) == model
    assert json.loads(str(model.to_hash()["tasks"]))[0] == {"task_id": "t1", "workload_key": "wk1",
                                                            "functions": ["dense0", "dense1"], "weight": 2}


def test_the_api_schemas_are_the_records_fields():
    job = JobRecord.from_hash(LEGACY_JOB)
    body = JobPublic.model_validate(job).model_dump(mode="json")
    assert body["state"] == "running" and body["best_cost_s"] == 0.002 and body["phase"] == "evolution"
    assert body["created"] == "2025-11-24T16:00:00.500000Z" and body["ended"] is None
    assert "cancel" not in body and "task_trials" not in body
    task = TaskPublic.model_validate(TaskRecord("t1", "wk", "llvm", 0.0, {}, "")).model_dump(mode="json")
    assert task == {"task_id": "t1", "workload_key": "wk", "target": "llvm", "created": None, "tuning": {},
                    "latest_job_id": ""}


@pytest.mark.integration
def test_the_store_reads_back_what_it_wrote(conn):
    from scheduler_core.dag.compute_dag import ComputeDAG
    from tests.workloads import matmul_add
    from workers.store import RedisStore
    store = RedisStore(conn)
    task_id, wk, job_id = store.create_task_with_job(ComputeDAG(matmul_add(8, 8, 8)), "llvm", {"seed": 1}, 5)
    task, job = store.get_task(task_id), store.get_job(job_id)
    assert task == TaskRecord.from_hash(conn.hgetall(keys.task(task_id)))
    assert task is not None and task.latest_job_id == job_id and task.trials_total == 5 and task.tuning["seed"] == 1
    assert job is not None and job.state == JobState.queued and job.task_id == task_id and job.trials_total == 5
