"""Write the example workloads as ComputeDAG JSON files under examples/workloads/.

Each file is ``ComputeDAG(tensors).to_json()`` (the canonical wire format of
``docs/dag_json_schema.md``), the payload ``POST /tasks`` and ``autosched tune``
take.  The workloads are the seeds and the performance aims of the project:

    matmul_add.json        seed 000: A (1024, 1024) @ B (1024, 1024) + C, B layout-free
    rgb_to_yuv.json        seed 003: RGB (1920, 1080, 3) -> YUV (1920, 1080, 3)
    conv2d_bias_relu.json  conv2d NCHW 1x64x56x56, 64 filters 3x3, pad 1, + bias + ReLU
    softmax.json           row softmax of (1024, 1024)
    cumsum_scan.json       seed 001: cumulative sum of X (128, 1024) over axis 0 (a scan)

All float32.  The output is deterministic: running the script again rewrites the
same bytes (tests/test_examples.py checks this).

    python examples/make_workloads.py [--out examples/workloads]
"""

from __future__ import annotations

import argparse
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script from anywhere in the checkout
    sys.path.insert(0, str(ROOT))

from scheduler_core.dag.compute_dag import ComputeDAG  # noqa: E402  (after the sys.path line above)
from tests import workloads as W  # noqa: E402

# file name -> constructor of the tensor list (inputs, then outputs)
WORKLOADS = {
    "matmul_add.json": lambda: W.matmul_add(1024, 1024, 1024, "float32"),
    "rgb_to_yuv.json": lambda: W.rgb_to_yuv(1920, 1080, 3),
    "conv2d_bias_relu.json": lambda: W.conv2d_nchw(1, 64, 56, 56, 64, 3, 3, stride=1, pad=1),
    "softmax.json": lambda: W.softmax(1024, 1024),
    "cumsum_scan.json": lambda: W.cumsum_scan(128, 1024),
}

DEFAULT_OUT = pathlib.Path(__file__).resolve().parent / "workloads"


def workload_texts() -> dict[str, str]:
    """The JSON text of every example workload, by file name (with a final newline)."""
    return {name: ComputeDAG(make()).to_json() + "\n" for name, make in WORKLOADS.items()}


def write_workloads(out_dir: pathlib.Path = DEFAULT_OUT) -> list[pathlib.Path]:
    """Write every example workload into ``out_dir``; returns the paths written."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, text in workload_texts().items():
        path = out_dir / name
        path.write_text(text, encoding="utf-8")
        paths.append(path)
    return paths


def main() -> None:
    ap = argparse.ArgumentParser(description="write the example workload JSON files")
    ap.add_argument("--out", type=pathlib.Path, default=DEFAULT_OUT)
    opts = ap.parse_args()
    for path in write_workloads(opts.out):
        dag = ComputeDAG.from_json(path.read_text(encoding="utf-8"))
        print(f"{path}  workload_key={dag.workload_key}  flop={dag.flop_ct:.3g}")


if __name__ == "__main__":
    main()
