"""Compiler bugs found by sampling states from the sketches (tests/sketch_rules).

Each test is a minimal reproducer (as small as the step-removal shrinker got it)
of a state that the transform steps accepted but that fails to lower, build or
compute the right numbers.  They were xfail until the compiler was fixed (LLVM's own loop unroller is now
off; our unroll pass does the unrolling the schedule asks for).
Programs that can abort the process run in a subprocess.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run_in_subprocess(name: str, steps: list, seed: int = 0, timeout_s: float = 300.0) -> tuple:
    """``(returncode, output)`` of building and checking DAG ``name`` (program_check.DAGS)
    with ``steps`` in a fresh Python process."""
    code = ("import sys, json; from tests.sketch_rules.program_check import check_program; "
            "err = check_program(sys.argv[1], sys.argv[2], int(sys.argv[3])); "
            "print('RESULT', err); sys.exit(0 if err is None else 1)")
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([sys.executable, "-c", code, name, json.dumps(steps), str(seed)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout_s)
    return proc.returncode, (proc.stdout + proc.stderr)[-3000:]


# conv2d NCHW + bias + ReLU (1x3x10x10, 4 filters 3x3, pad 1): conv2d tiled and fused
# into bias_relu at level 2, the padding stage computed inside conv2d at ry.0 and
# vectorized (12 lanes, masked loads), conv2d auto-unrolled (512) and vectorized,
# bias_relu parallel.  LLVM's O3 pipeline aborts the process:
#   ValueMapper.cpp:987: Assertion `(Flags & RF_IgnoreMissingLocals) && "Referenced value
#   not in value map!"' failed.
# Without the parallel annotation it aborts in instruction selection instead
# (SelectionDAGBuilder.h:390 "Already set a value for this node!").  Dropping the
# unroll pragma, or any of the three vectorize annotations, builds fine.
CONV2D_UNROLLED_VECTORIZED_PAD = [
    ["SP", 3, 0, 1, [1, 1, 1], 1], ["SP", 3, 4, 4, [1, 1, 1], 1], ["SP", 3, 8, 10, [1, 2, 1], 1],
    ["SP", 3, 12, 10, [1, 2, 5], 1], ["SP", 3, 16, 3, [1], 1], ["SP", 3, 18, 3, [1], 1],
    ["SP", 3, 20, 3, [3], 1],
    ["RE", 3, [0, 4, 8, 12, 1, 5, 9, 13, 16, 18, 20, 2, 6, 10, 14, 17, 19, 21, 3, 7, 11, 15]],
    ["FSP", 5, 0, 0, 2], ["FSP", 5, 3, 1, 2], ["FSP", 5, 6, 2, 2], ["FSP", 5, 9, 3, 2],
    ["CA", 3, 5, 7], ["CA", 1, 3, 9], ["FU", 5, [0, 1, 2, 3, 4, 5, 6, 7]], ["AN", 5, 0, 3],
    ["PR", 3, 0, "auto_unroll_max_step$512"], ["AN", 1, 3, 2], ["AN", 3, 21, 2], ["AN", 5, 4, 2],
]


def test_conv2d_unrolled_vectorized_padding_builds():
    rc, out = run_in_subprocess("conv2d_nchw", CONV2D_UNROLLED_VECTORIZED_PAD)
    assert rc == 0, out


# matmul + bias (seed 000 at 12x8x16): 'matmul' tiled (fusion level 2) and computed at
# 'out', auto-unrolled (max step 64) with its innermost j.3 vectorized (4 lanes); 'out'
# vectorized (8 lanes, reading the local matmul tile written by the 4-lane stores).
# The verified LLVM module crashes LLVM 22 (llvmlite 0.50, assertions on) after O2/O3:
#   SelectionDAGBuilder.h:390: Assertion `!N.getNode() && "Already set a value for this
#   node!"' failed.      (at O1 it compiles)
# With 'out' also parallel (as InitParallel makes it), O3 itself aborts in ValueMapper
# ("Referenced value not in value map!").  Dropping the pragma or either vectorize
# annotation builds fine.  This is one of the most common states of a matmul search.
MATMUL_ADD_UNROLLED_VECTORIZED = [
    ["SP", 2, 0, 12, [1, 1, 2], 1], ["SP", 2, 4, 16, [1, 2, 4], 1], ["SP", 2, 8, 8, [1], 1],
    ["RE", 2, [0, 4, 1, 5, 8, 2, 6, 9, 3, 7]], ["FSP", 4, 0, 0, 2], ["FSP", 4, 3, 1, 2],
    ["RE", 4, [0, 3, 1, 4, 2, 5]], ["CA", 2, 4, 3], ["FU", 4, [0, 1, 2, 3]],
    ["PR", 2, 0, "auto_unroll_max_step$64"], ["AN", 2, 9, 2], ["AN", 4, 2, 2],
]


def test_matmul_add_unrolled_vectorized_builds():
    rc, out = run_in_subprocess("matmul_add", MATMUL_ADD_UNROLLED_VECTORIZED)
    assert rc == 0, out


def test_matmul_add_unrolled_vectorized_parallel_builds():
    steps = MATMUL_ADD_UNROLLED_VECTORIZED[:9] + [["AN", 4, 0, 3]] + MATMUL_ADD_UNROLLED_VECTORIZED[9:]
    rc, out = run_in_subprocess("matmul_add", steps)
    assert rc == 0, out


def test_the_same_state_without_unroll_builds():
    """Control: the reproducers minus their auto_unroll pragma build and match."""
    for name, steps in (("conv2d_nchw", CONV2D_UNROLLED_VECTORIZED_PAD),
                        ("matmul_add", MATMUL_ADD_UNROLLED_VECTORIZED)):
        rc, out = run_in_subprocess(name, [s for s in steps if s[0] != "PR"])
        assert rc == 0, out
