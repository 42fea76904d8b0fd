"""Small models for the graph tests: tensor programs in te, a numpy library function."""

from __future__ import annotations

import numpy as np

from scheduler_core import te
from scheduler_core.graph import Call, Graph, GraphVar, TensorType, register_func
from scheduler_core.graph.script import T


@register_func("test.relu", override=True)
def np_relu(x, out):
    np.maximum(np.asarray(x), 0, out=np.asarray(out))


@T.prim_func
def dense(X: T.Buffer((4, 32), "float32"), W: T.Buffer((32, 32), "float32"), Y: T.Buffer((4, 32), "float32")):
    k = te.reduce_axis((0, 32), name="k")
    return te.compute((4, 32), lambda i, j: te.sum(X[i, k] * W[j, k], axis=k), name="Y")


@T.prim_func
def add_bias(X: T.Buffer((4, 32), "float32"), B: T.Buffer((32,), "float32"), Y: T.Buffer((4, 32), "float32")):
    return te.compute((4, 32), lambda i, j: X[i, j] + B[j], name="Y")


@T.prim_func
def scale(X: T.Buffer((4, 32), "float32"), Y: T.Buffer((4, 32), "float32")):
    T.func_attr({"tir.noalias": True})
    return te.compute((4, 32), lambda i, j: X[i, j] * 0.5, name="Y")


def v(name: str, shape=(4, 32)) -> GraphVar:
    return GraphVar(name, TensorType(shape, "float32"))


def mlp_graph() -> Graph:
    """y = scale(dense_b(relu(add_bias(dense_a(x, w1), b1)), w2)); dense_a and dense_b are identical."""
    return Graph(
        inputs=(v("x"),),
        params=(v("w1", (32, 32)), v("b1", (32,)), v("w2", (32, 32))),
        calls=(Call("tir", "dense_a", ("x", "w1"), (v("h0"),)),
               Call("tir", "add_bias", ("h0", "b1"), (v("h1"),)),
               Call("library", "test.relu", ("h1",), (v("h2"),)),
               Call("tir", "dense_b", ("h2", "w2"), (v("h3"),)),
               Call("tir", "scale", ("h3",), (v("y"),))),
        outputs=("y",),
        functions={"dense_a": dense.with_attr("global_symbol", "dense_a"),
                   "dense_b": dense.with_attr("global_symbol", "dense_b"),
                   "add_bias": add_bias, "scale": scale})


def weights(seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    return {"w1": rng.standard_normal((32, 32)).astype("float32"),
            "b1": rng.standard_normal(32).astype("float32"),
            "w2": rng.standard_normal((32, 32)).astype("float32")}


def numpy_mlp(x: np.ndarray, p: dict) -> np.ndarray:
    h = np.maximum(x @ p["w1"].T + p["b1"], 0)
    return (h @ p["w2"].T) * 0.5
