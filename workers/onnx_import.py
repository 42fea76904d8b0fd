"""An uploaded ONNX model -> graph JSON, imported in a child process (POST /models, multipart).

    import_onnx_file(path, shapes, timeout_s) -> (graph JSON, weights as .npz bytes)
        --``python -m workers.onnx_import``--> frontend.from_onnx(path, shapes) --> Graph.to_json()
        <-- stdout: {"graph": ...} | {"error": class name, "detail": message, "path": ...}
            <path>.params.npz: the graph's bound params (the initializers it keeps as weights)

The import runs in its own process so that the API process never loads torch and onnx (the
extra ``.[onnx]``), a hostile file that crashes the protobuf parser or the checker takes down
only the child, and a slow import is killed after ``timeout_s``.  The graph carries the
structure and the DAGs (the service tunes from them); the weights come back beside it and go
into the model's artifact.

Errors (the route maps them to HTTP answers):
    OnnxImportError       the model is malformed or not covered: the message names the node and
                          its op type (from_onnx's InvalidWorkloadError), 422
    OnnxImportUnavailable torch or onnx is not installed where the service runs, or the child
                          died or passed ``timeout_s``, 503
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from scheduler_core import frontend
from scheduler_core.base.errors import InvalidWorkloadError

from .model_store import encode_params

__all__ = ["OnnxImportError", "OnnxImportUnavailable", "import_onnx_file"]

_MISSING_EXTRA = 3  # the child's exit status when torch or onnx cannot be imported


class OnnxImportError(InvalidWorkloadError):
    """The uploaded model is not an ONNX model the importer reads; the message says which node."""


class OnnxImportUnavailable(RuntimeError):
    """The service cannot import ONNX models now (extra missing, child crashed or timed out)."""


def import_onnx_file(path: str | os.PathLike, shapes: dict[str, list[int]] | None = None,
                     timeout_s: float = 300.0) -> tuple[dict[str, Any], bytes]:
    """``(graph JSON, weights)`` of the ONNX model at ``path``, imported by ``frontend.from_onnx``
    in a child process of this interpreter: ``Graph.to_json()`` and its bound params as ``.npz``
    bytes (``workers.model_store.encode_params``).

    shapes: {input name: dims} for inputs with symbolic dims (from_onnx's ``shape_dict``).
    Raises OnnxImportError (a malformed or unsupported model; the message names the node and
    op type) or OnnxImportUnavailable (torch/onnx missing, the child died, or it ran past
    ``timeout_s`` seconds and was killed).
    """
    params_path = Path(f"{os.fspath(path)}.params.npz")
    cmd = [sys.executable, "-m", "workers.onnx_import", os.fspath(path), json.dumps(shapes or {}), str(params_path)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("AUTOSCHED_")}  # nothing secret
    try:
        done = subprocess.run(cmd, capture_output=True, timeout=timeout_s, env=env,
                              cwd=str(Path(__file__).resolve().parent.parent))
    except subprocess.TimeoutExpired:
        raise OnnxImportUnavailable(f"importing the ONNX model took over {timeout_s:g} s and was stopped") from None
    if done.returncode == _MISSING_EXTRA:
        raise OnnxImportUnavailable("this service cannot read ONNX models: torch and onnx are not installed "
                                    "where it runs (pip install 'autosched[onnx]'); send the graph JSON "
                                    f"instead (autosched submit-model --import-here): {_last_line(done.stderr)}")
    try:
        answer = json.loads(done.stdout)
    except ValueError:
        raise OnnxImportUnavailable(f"the ONNX import process ended with status {done.returncode}: "
                                    f"{_last_line(done.stderr)}") from None
    if "graph" in answer:
        try:
            return answer["graph"], params_path.read_bytes()
        except OSError as err:
            raise OnnxImportUnavailable(f"the ONNX import process wrote no weights: {err}") from None
        finally:
            params_path.unlink(missing_ok=True)
    raise OnnxImportError(answer["detail"], answer.get("path") or "model")


def _last_line(data: bytes) -> str:
    lines = data.decode("utf-8", "replace").strip().splitlines()
    return lines[-1][:500] if lines else "no message"


def _main(argv: list[str]) -> int:
    """The child: import argv[1] with shapes argv[2] (JSON), answer on stdout, the weights to argv[3]."""
    try:
        from_onnx = frontend.from_onnx  # loads torch and onnx
    except ImportError as err:
        print(f"{type(err).__name__}: {err}", file=sys.stderr)
        return _MISSING_EXTRA
    try:
        shapes = {str(k): tuple(int(d) for d in v) for k, v in json.loads(argv[2]).items()}
        graph = from_onnx(argv[1], shapes or None)
    except InvalidWorkloadError as err:
        detail = str(err)
        path = err.path or ""
        if path and detail.startswith(f"{path}: "):
            detail = detail[len(path) + 2:]
        json.dump({"error": type(err).__name__, "detail": detail, "path": f"model.{path}" if path else "model"},
                  sys.stdout)
        return 2
    except Exception as err:  # the importer failed on this model: still an answer about the model, not a crash
        json.dump({"error": type(err).__name__, "detail": f"the importer failed on this model: "
                                                          f"{type(err).__name__}: {str(err)[:500]}", "path": "model"},
                  sys.stdout)
        return 2
    Path(argv[3]).write_bytes(encode_params(graph.bound))
    json.dump({"graph": graph.to_json()}, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv))
