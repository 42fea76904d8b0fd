"""Random index forms: each DAG is refused at validation (a 422) or runs without reading
outside its buffers.

A generator builds ``B[i] = A[index(i)]`` (A: 200 floats, i in 0..199) with indices made of
the loop variable, constants, narrowing casts, floordiv/floormod by either sign, select,
min/max, abs, pow, float floor, and gathers (``Idx[i]``, ``int(X[i] * c)``).  Every accepted
DAG is built and run in a forked child with A placed against an inaccessible page (after its
end, then before its start) and data that sends some gathers out of range.  The child must
not fault, and the program must agree with the reference evaluator: its values where the
reference computes them, IndexOutOfBoundsError where the reference finds an index outside.
"""

from __future__ import annotations

import os
import pickle

import numpy as np
import pytest

import scheduler_core as sc
from scheduler_core.base.errors import IndexOutOfBoundsError, InvalidWorkloadError
from scheduler_core.dag.compute_dag import ComputeDAG
from scheduler_core.dag.reference import evaluate
from scheduler_core.driver.bounds import check_bounds
from scheduler_core.driver.pipeline import run_passes
from scheduler_core.schedule.loop_state import State
from tests.guard_pages import next_to_guard_page

N = 200
# 50 forms in the suite (about 10 s); offline sweeps set INDEX_FORMS (and INDEX_FORM_SEED) to thousands
FORMS = int(os.environ.get("INDEX_FORMS", "50"))


def _var() -> dict:
    return {"kind": "var", "id": 0}


def _bin(op: str, a, b) -> dict:
    return {"kind": "binary", "op": op, "a": a, "b": b, "dtype": "int32"}


def _cast(v, dtype: str) -> dict:
    return {"kind": "cast", "value": v, "dtype": dtype}


def _f(x: float) -> dict:
    return {"kind": "float", "value": x, "dtype": "float32"}


class FormGenerator:
    """Random int32 index expressions of DAG JSON over loop variable 0."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.used: set = set()  # "Idx", "X": the gathered tensors the expression reads

    def const(self) -> int:
        return int(self.rng.choice([0, 1, 2, 3, 7, 60, 100, 127, 199, 200, 1000, -1, -3, -64, -200]))

    def leaf(self):
        k = self.rng.integers(0, 6)
        if k <= 2:
            return _var()
        if k == 3:
            return self.const()
        if k == 4:
            self.used.add("Idx")
            return {"kind": "load", "tensor": "Idx", "indices": [_var()], "dtype": "int32"}
        self.used.add("X")
        x = {"kind": "load", "tensor": "X", "indices": [_var()], "dtype": "float32"}
        return _cast({"kind": "binary", "op": "mul", "a": x, "b": _f(float(self.rng.choice([100.0, 1000.0]))),
                      "dtype": "float32"}, "int32")

    def expr(self, depth: int):
        if depth == 0 or self.rng.random() < 0.25:
            return self.leaf()
        k = int(self.rng.integers(0, 10))
        a = self.expr(depth - 1)
        if k == 0:
            return _bin(str(self.rng.choice(["add", "sub"])), a, self.expr(depth - 1))
        if k == 1:
            return _bin("mul", a, self.const())
        if k == 2:
            d = self.const() or 5
            return _bin(str(self.rng.choice(["floordiv", "floormod"])), a, d)
        if k == 3:
            return _cast(_cast(a, str(self.rng.choice(["int8", "int16", "uint8"]))), "int32")
        if k == 4:
            return _bin(str(self.rng.choice(["min", "max"])), a, self.expr(depth - 1))
        if k == 5:
            return {"kind": "call", "name": "abs", "args": [a], "dtype": "int32"}
        if k == 6:
            return _bin("pow", a, 2)
        if k == 7:
            return _cast({"kind": "call", "name": "floor", "dtype": "float32",
                          "args": [{"kind": "binary", "op": "mul", "a": _cast(a, "float32"), "b": _f(0.5),
                                    "dtype": "float32"}]}, "int32")
        cond = {"kind": "cmp", "op": str(self.rng.choice(["lt", "ge"])), "a": a, "b": self.const()}
        return {"kind": "select", "cond": cond, "true_value": self.expr(depth - 1),
                "false_value": self.expr(depth - 1), "dtype": "int32"}


def _dag_json(index, used: set) -> dict:
    names = ["A"] + [t for t in ("Idx", "X") if t in used]
    dtypes = {"A": "float32", "Idx": "int32", "X": "float32"}
    ops = [{"kind": "placeholder", "name": t, "shape": [N], "dtype": dtypes[t]} for t in names]
    position = {t: k for k, t in enumerate(names)}

    def fix(e):  # tensor names -> [op, 0]
        if isinstance(e, dict):
            e = {k: fix(v) for k, v in e.items()}
            if e.get("kind") == "load" and isinstance(e["tensor"], str):
                e["tensor"] = [position[e["tensor"]], 0]
            return e
        if isinstance(e, list):
            return [fix(x) for x in e]
        return e

    body = {"kind": "load", "tensor": [0, 0], "indices": [fix(index)], "dtype": "float32"}
    ops.append({"kind": "compute", "name": "B", "shape": [N], "axis": [0], "attrs": {}, "tag": "", "body": body})
    return {"format": "autosched.compute_dag", "version": 1, "vars": [{"name": "i", "dtype": "int32"}],
            "ops": ops, "tensors": [[k, 0] for k in range(len(ops))]}


def _run_in_child(fn) -> tuple:
    """``fn()`` in a forked child: ``("ok", value)``, ``("raised", text)`` or ``("signal", n)``."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.close(r)
        try:
            out = ("ok", fn())
        except BaseException as err:  # noqa: BLE001 - reported to the parent
            out = ("raised", f"{type(err).__name__}: {err}")
        os.write(w, pickle.dumps(out))
        os._exit(0)
    os.close(w)
    data = b""
    while chunk := os.read(r, 1 << 16):
        data += chunk
    os.close(r)
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        return ("signal", os.WTERMSIG(status))
    return pickle.loads(data)


def _inputs(dag: ComputeDAG, rng) -> list:
    out = []
    for t in dag.inputs:
        if t.op.name == "A":
            out.append(rng.random(N, dtype="float32"))
        elif t.op.name == "Idx":
            out.append(rng.integers(-40, N + 40, N).astype("int32"))
        else:
            out.append(rng.uniform(-0.05, 0.25, N).astype("float32"))
    return out


@pytest.mark.skipif(not hasattr(os, "fork"), reason="runs each program in a forked child")
def test_random_index_forms_are_refused_or_stay_inside_their_buffers():
    counts = {"refused": 0, "ran": 0, "index errors": 0}
    rng = np.random.default_rng(1)
    for k in range(FORMS):
        gen = FormGenerator(int(os.environ.get("INDEX_FORM_SEED", "1000")) + k)
        index = gen.expr(3)
        obj = _dag_json(index, gen.used)
        try:
            dag = ComputeDAG.from_json(obj)
        except InvalidWorkloadError:
            counts["refused"] += 1
            continue
        state = State.from_dag(dag)
        check_bounds(run_passes(sc.lower(state, list(dag.tensors))))  # what every measured program passes
        module = sc.build(state, list(dag.tensors), "llvm")
        inputs = _inputs(dag, rng)
        try:
            want = evaluate(dag, [x.copy() for x in inputs])[0]
        except InvalidWorkloadError:
            want = None  # the reference found an index outside (only gathers get this far)
        for at_end in (True, False):
            def run(inputs=inputs, at_end=at_end, module=module):
                keep: list = []
                args = [next_to_guard_page(x, keep, at_end) if x.dtype == np.float32 and x.shape == (N,)
                        and j == 0 else x for j, x in enumerate(inputs)]
                out = np.zeros(N, "float32")
                module(*args, out)
                return out
            status, value = _run_in_child(run)
            assert status != "signal", f"form {k} faulted (signal {value}): {obj['ops'][-1]['body']}"
            if want is None:
                assert status == "raised" and IndexOutOfBoundsError.__name__ in value, (k, status, value)
            else:
                assert status == "ok", (k, value)
                np.testing.assert_allclose(value, want, rtol=1e-6, err_msg=f"form {k}")
        counts["ran"] += 1
        counts["index errors"] += want is None
    print(counts)
    # the generator reaches every outcome
    assert counts["refused"] >= 10 and counts["ran"] >= 10 and counts["index errors"] >= 3, counts
