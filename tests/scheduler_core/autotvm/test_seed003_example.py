"""examples/seed003_rgb_yuv.py (seed 003's full program, imports changed) runs with a few trials.

The example asserts the applied best schedule against numpy itself (``bench_tvm_func``), so a
zero exit means the tuned program matched numpy."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def test_seed003_example_runs_with_a_few_trials(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, str(ROOT / "examples" / "seed003_rgb_yuv.py"), "4"], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    assert "ConfigSpace (len=32, space_map=" in out
    assert out.count("No: ") == 4 and out.count("Time cost of this operator") == 2
    assert "Finish loading 4 records" in out
    assert (tmp_path / "rgb2yuv.log").exists()
