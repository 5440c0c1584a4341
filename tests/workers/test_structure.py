"""The shape of the code: no import cycle anywhere in the tree, and the size limits of every package.

Every ``import`` counts, also the ones inside functions: an import deferred into a function to
dodge a cycle is still a cycle in the design.
"""
from __future__ import annotations

import ast
from pathlib import Path

from loophelpers import ROOT

PACKAGES = ("warmcast", "forecaster", "warmup", "workers", "api")


def _modules() -> dict[str, Path]:
    mods = {}
    for pkg in PACKAGES:
        for f in (ROOT / pkg).rglob("*.py"):
            parts = f.relative_to(ROOT).with_suffix("").parts
            mods[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = f
    return mods


def _imported(mod: str, path: Path, mods: dict[str, Path]) -> set[str]:
    """Modules of the tree that ``mod`` imports (a name is resolved to its longest module prefix)."""

    def resolve(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out.update(filter(None, (resolve(a.name) for a in node.names)))
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                pkg = mod.split(".") if path.name == "__init__.py" else mod.split(".")[:-1]
                base = ".".join(pkg[:len(pkg) - node.level + 1] + ([base] if base else []))
            out.update(filter(None, (resolve(f"{base}.{a.name}") for a in node.names)))
    out.discard(mod)
    return out


def import_cycles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = set()
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.add(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    cycles.append(frozenset(comp))
    return cycles


def test_import_cycles_are_found():
    """The walker itself: a cycle through three modules is found, a chain is not."""
    assert import_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [frozenset("abc")]
    assert import_cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []


def test_no_import_cycle_in_the_tree():
    mods = _modules()
    assert {"workers.tasks", "workers.steps.tick", "warmup.core", "api.app"} <= set(mods)
    graph = {m: _imported(m, p, mods) for m, p in mods.items()}
    assert "workers.steps.signals" in graph["workers.steps.tick_inputs"]  # the walker sees the package's imports
    cycles = [sorted(c) for c in import_cycles(graph)]
    assert cycles == [], f"import cycles: {cycles}"


MAX_MODULE_LINES, MAX_FUNCTION_LINES, MAX_CORE_FUNCTION_LINES = 400, 60, 40
# Generated code is not ours to split: the protobuf modules and the vendored KEDA stubs.
NOT_SIZED = ("api/keda/vendor/",)


def _sized_files() -> list[Path]:
    files = []
    for pkg in PACKAGES:
        for f in sorted((ROOT / pkg).rglob("*.py")):
            rel = f.relative_to(ROOT).as_posix()
            if "_pb2" not in f.name and not rel.startswith(NOT_SIZED):
                files.append(f)
    return files


def too_long(rel: str, text: str) -> list[str]:
    """Size-limit breaches of one module: its lines, then each function's, ``def`` to its end
    (decorators not counted); a function of ``warmup/core`` (a decision stage) has the tighter limit."""
    out = []
    if len(text.splitlines()) > MAX_MODULE_LINES:
        out.append(f"{rel}: {len(text.splitlines())} lines")
    limit = MAX_CORE_FUNCTION_LINES if rel.startswith("warmup/core/") else MAX_FUNCTION_LINES
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            n = node.end_lineno - node.lineno + 1
            if n > limit:
                out.append(f"{rel}:{node.lineno} {node.name}: {n} lines (limit {limit})")
    return out


def test_the_size_limits_are_counted_as_documented():
    """Decorators do not count, the body does, and the core's limit is 40."""
    body = "\n".join(["@decorator", "@another", "def f():"] + ["    x = 1"] * 59)
    assert too_long("warmcast/x.py", body) == []                      # 60 lines from def
    assert too_long("warmcast/x.py", body + "\n    x = 1") == ["warmcast/x.py:3 f: 61 lines (limit 60)"]
    assert too_long("warmup/core/x.py", body) == ["warmup/core/x.py:3 f: 60 lines (limit 40)"]
    assert too_long("api/x.py", "\n" * 401) == ["api/x.py: 401 lines"]


def test_modules_and_functions_are_small_in_every_package():
    files = _sized_files()
    assert {"workers/tasks.py", "warmup/core/prescale.py", "api/app.py", "forecaster/base.py",
            "warmcast/cli/__init__.py"} <= {f.relative_to(ROOT).as_posix() for f in files}
    assert not any("vendor" in f.parts or "_pb2" in f.name for f in files)
    breaches = [b for f in files for b in too_long(f.relative_to(ROOT).as_posix(), f.read_text())]
    assert breaches == []


def test_every_step_module_exposes_one_typed_step():
    steps = sorted(p.stem for p in (ROOT / "workers" / "steps").glob("*.py") if p.stem not in ("__init__", "outcome"))
    assert steps == ["alert_responses", "alerts", "expire", "fleet", "forecast", "ingest", "retrain", "retune", "signals",
                     "switch_inputs", "tick", "tick_inputs", "warmup", "warmup_run"]
    helpers = ("_inputs", "_responses")  # what the tick reads; what the alert step applies
    for name in (s for s in steps if not s.endswith(helpers)):
        tree = ast.parse((ROOT / "workers" / "steps" / f"{name}.py").read_text())
        funcs = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "step"]
        assert len(funcs) == 1 and funcs[0].returns is not None, name  # one typed step
