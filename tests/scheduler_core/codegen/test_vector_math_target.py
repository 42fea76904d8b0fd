"""libmvec variants follow the build target, not only the host: an export for an older CPU
never calls a vector function its CPU cannot run."""

from __future__ import annotations

import numpy as np
import pytest

import scheduler_core as sc
from scheduler_core import te

VARIANTS = {"_ZGVeN16v_expf": 64, "_ZGVdN8v_expf": 32, "_ZGVbN4v_expf": 16}  # symbol -> vector bytes


def _exp_schedule():
    A = te.placeholder((64,), name="A")
    B = te.compute((64,), lambda i: te.exp(A[i]), name="B")
    s = te.create_schedule(B.op)
    _, inner = s[B].split(B.op.axis[0], factor=16)
    s[B].vectorize(inner)
    return s, A, B


@pytest.mark.parametrize("target, max_bytes", [("llvm -mcpu=core-avx2", 32), ("llvm -mcpu=x86-64", 16)])
def test_exported_code_calls_no_wider_variant_than_its_cpu(target, max_bytes):
    s, A, B = _exp_schedule()
    f = sc.build(s, [A, B], target)
    used = [sym for sym in VARIANTS if sym in f.get_source()]
    assert all(VARIANTS[sym] <= max_bytes for sym in used), used
    a = np.random.default_rng(0).random(64, dtype=np.float32)
    b = np.zeros(64, np.float32)
    f(a, b)  # the JIT'd code runs on the host
    np.testing.assert_allclose(b, np.exp(a), rtol=1e-5)
