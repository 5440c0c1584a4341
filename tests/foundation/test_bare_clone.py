"""Issue 32 item 2: on a bare clone (no ../shared beside it) the tests that read the real traces skip
with their reason when env CI is unset, and fail naming the missing traces when it is set; the run's
last lines say which.  The checkout's own conftest and a real-trace test file are laid out
in a directory whose parent has no shared/, and run there by a child pytest."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TRACE_TESTS = "tests/foundation/test_ingest_real_traces.py"


def _bare(tmp_path: Path) -> Path:
    clone = tmp_path / "x"
    for rel in ("pyproject.toml", "tests/conftest.py", TRACE_TESTS):
        (clone / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / rel, clone / rel)
    return clone


def _run(clone: Path, ci: bool) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env["PYTHONPATH"] = str(ROOT)  # the project's code; the tests and their conftest are the bare clone's
    if ci:
        env["CI"] = "true"
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-ra", "-p", "no:cacheprovider", TRACE_TESTS],
                          capture_output=True, text=True, env=env, cwd=clone, timeout=300)


def test_a_bare_clone_skips_the_real_trace_tests_outside_ci_and_fails_them_on_ci(tmp_path):
    clone = _bare(tmp_path)
    missing = tmp_path / "shared" / "data"
    local = _run(clone, ci=False)
    assert local.returncode == 0, local.stdout[-3000:]
    assert f"real traces: not found at {missing}" in local.stdout and "they are skipped" in local.stdout
    assert "5 skipped" in local.stdout and f"SKIPPED [1] {TRACE_TESTS}" in local.stdout
    assert f"real traces not found at {missing}" in local.stdout  # each skip says why
    on_ci = _run(clone, ci=True)
    assert on_ci.returncode == 1, on_ci.stdout[-3000:]
    assert "they FAIL (env CI is set)" in on_ci.stdout and "5 error" in on_ci.stdout
    assert f"real traces not found at {missing}" in on_ci.stdout


def test_the_summary_names_the_traces_when_they_are_there(tmp_path):
    clone = _bare(tmp_path)
    (tmp_path / "shared" / "data").mkdir(parents=True)  # present (empty here): the summary names the path
    res = _run(clone, ci=False)
    assert f"real traces: {tmp_path / 'shared' / 'data'}" in res.stdout, res.stdout[-2000:]
