"""`warmcast setup vllm` finds a ready .venv-vllm; the engine-arg constraints shipped in
warmcast/config/vllm_args.json are what that vLLM's parser says (scripts/dump-vllm-args.py writes the same file)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
VLLM_PY = ROOT / ".venv-vllm" / "bin" / "python"

pytestmark = [
    pytest.mark.integration,
    # on CI a missing vLLM venv is a failure, not a skip
    pytest.mark.skipif(not VLLM_PY.exists() and not os.environ.get("CI"),
                       reason=f"no vLLM virtualenv at {VLLM_PY}: run scripts/setup-vllm.sh"),
]


def test_recorded_constraints_match_the_installed_vllm_parser(tmp_path):
    out = tmp_path / "vllm_args.json"
    r = subprocess.run([str(VLLM_PY), str(ROOT / "scripts" / "dump-vllm-args.py"), "--out", str(out)],
                       capture_output=True, text=True, timeout=600,
                       env={**os.environ, "VLLM_LOGGING_LEVEL": "ERROR"})
    assert r.returncode == 0, r.stderr[-2000:]
    live = json.loads(out.read_text())
    shipped = json.loads((ROOT / "warmcast" / "config" / "vllm_args.json").read_text())
    assert live == shipped, "vLLM changed: rerun .venv-vllm/bin/python scripts/dump-vllm-args.py"
    assert live["options"]["dtype"]["choices"] and live["options"]["block-size"]["type"] == "int"


def test_setup_vllm_finds_the_ready_environment_and_does_nothing():
    r = subprocess.run([sys.executable, "-m", "warmcast.cli", "setup", "vllm"], capture_output=True, text=True,
                       timeout=600, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "already has vllm; nothing to do" in r.stdout
