"""The example workload files (examples/workloads/*.json) stay loadable and stable.

Each file loads with ``ComputeDAG.from_json``, writes back byte for byte, keeps the
workload_key pinned below (records in Redis are keyed on it, so a change orphans
them), and equals what ``examples/make_workloads.py`` writes today.
"""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import pytest

from scheduler_core.dag.compute_dag import ComputeDAG

ROOT = pathlib.Path(__file__).resolve().parents[1]
WORKLOAD_DIR = ROOT / "examples" / "workloads"

# file -> (workload_key, placeholder shapes then output shapes, flop count)
EXPECTED = {
    "matmul_add.json": ("b28d0a166a40e1fecd63bbe319cceaab",
                        [(1024, 1024), (1024, 1024), (1024, 1024), (1024, 1024)],
                        2 * 1024 ** 3 + 1024 ** 2),
    "rgb_to_yuv.json": ("eb0bb07f9a6ffe7d64944dd6aec88a72",
                        [(1920, 1080, 3), (1920, 1080, 3)], None),
    "conv2d_bias_relu.json": ("3f244de112484cb800d9a7bca398195c",
                              [(1, 64, 56, 56), (64, 64, 3, 3), (64,), (1, 64, 56, 56)],
                              None),
    "softmax.json": ("0da1d1918f2a081aef98b368a281d586",
                     [(1024, 1024), (1024, 1024)], 4 * 1024 * 1024),  # TVM's count: exp is free
    "cumsum_scan.json": ("957231137f486fc887b4e490cd532fb7",
                         [(128, 1024), (128, 1024)], None),
}


def _load_generator():
    sys.path.insert(0, str(ROOT / "examples"))
    try:
        import make_workloads
    finally:
        sys.path.remove(str(ROOT / "examples"))
    return make_workloads


def _shapes(dag):
    return [tuple(s.value for s in t.shape) for t in dag.tensors]  # IntImm extents


def test_the_committed_files_are_exactly_the_example_set():
    assert sorted(p.name for p in WORKLOAD_DIR.glob("*.json")) == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_file_loads_round_trips_and_keeps_its_key(name):
    text = (WORKLOAD_DIR / name).read_text(encoding="utf-8")
    dag = ComputeDAG.from_json(text)
    assert dag.to_json() + "\n" == text  # canonical: writes back byte for byte
    assert ComputeDAG.from_json(json.loads(text)).to_json() == dag.to_json()  # dict input too
    key, shapes, flop = EXPECTED[name]
    assert dag.workload_key == key
    assert _shapes(dag) == shapes
    if flop is not None:
        assert dag.flop_ct == flop


def test_matmul_add_keeps_b_layout_free():
    payload = json.loads((WORKLOAD_DIR / "matmul_add.json").read_text(encoding="utf-8"))
    attrs = [op.get("attrs") for op in payload["ops"] if op.get("name") == "matmul"]
    assert attrs and "layout_free_placeholders" in attrs[0]


def test_regenerating_gives_identical_files(tmp_path):
    gen = _load_generator()
    written = gen.write_workloads(tmp_path)
    assert sorted(p.name for p in written) == sorted(EXPECTED)
    for path in written:
        assert path.read_bytes() == (WORKLOAD_DIR / path.name).read_bytes(), path.name


def test_workload_keys_are_the_same_in_a_fresh_process():
    code = ("import pathlib; from scheduler_core.dag.compute_dag import ComputeDAG; "
            "d = pathlib.Path('examples/workloads'); "
            "print(*(p.name + '=' + ComputeDAG.from_json(p.read_text()).workload_key "
            "for p in sorted(d.glob('*.json'))))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, check=True, env={"PYTHONPATH": str(ROOT),
                                                     "PYTHONHASHSEED": "123"}).stdout
    got = dict(item.split("=") for item in out.split())
    assert got == {name: key for name, (key, _, _) in EXPECTED.items()}
