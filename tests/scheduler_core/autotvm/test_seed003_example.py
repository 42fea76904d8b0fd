"""examples/seed003_rgb_yuv.py (seed 003's full program, imports changed) runs with a few trials.

The example asserts the applied best schedule against numpy itself (``bench_tvm_func``), so a
zero exit means the tuned program matched numpy.

``slow``: the program as written times each 1920x1080 operator with 400 calls per
measurement (three measurements for the default schedule, three for the tuned one) and the
RandomTuner is not seeded, so a trial can draw a 1080-wide vectorized split that runs into
the 10 s build timeout: 40-55 s on two cores.  The fast tier covers each of its parts:
tests/scheduler_core/test_seeds.py (seed 003's default schedule and its template's
split/fuse/parallel/vectorize/unroll schedule at the seed's size, checked against numpy,
timed and saved), tests/scheduler_core/autotvm/test_space.py (the printed 32-config space)
and tests/scheduler_core/autotvm/test_tuning.py (every tuner tunes seed 003's template, the
"No: " lines, log_to_file, apply_history_best and its "Finish loading" line, the best
rebuilt and checked against numpy).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.slow
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
