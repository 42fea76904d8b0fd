"""cost_model imports only the compiler layer of scheduler_core (DESIGN.md, "Layers")."""

from __future__ import annotations

import ast
import pathlib
import subprocess
import sys

import cost_model

SEARCH_LAYER = ("scheduler_core.search.search_task", "scheduler_core.search.search_policy",
                "scheduler_core.search.task_scheduler", "scheduler_core.search.program_measurer")
FORBIDDEN = SEARCH_LAYER + ("sketch_rules", "workers", "api", "redis", "rq", "fastapi")


def _imports(path: pathlib.Path) -> set:
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.add(node.module)
            out.update(f"{node.module}.{a.name}" for a in node.names)
    return out


def test_cost_model_imports_only_the_compiler_layer():
    pkg = pathlib.Path(cost_model.__file__).parent
    for path in sorted(pkg.glob("*.py")):
        for name in _imports(path):
            assert not name.startswith(FORBIDDEN), f"{path.name} imports {name}"


def test_import_is_light():
    """lightgbm is loaded only when a model trains or loads."""
    code = "import sys, cost_model; assert 'lightgbm' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=pathlib.Path(cost_model.__file__).parents[1])
