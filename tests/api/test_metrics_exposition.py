"""/metrics speaks Prometheus' conventions: the real ``promtool check metrics`` finds nothing to say."""
from __future__ import annotations

import shutil
import subprocess

import pytest

from api_helpers import missing_tool, stored_forecast


def _promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        missing_tool("promtool (Debian package prometheus, scripts/setup-prometheus.sh)")
    return path


def test_exposition_passes_promtool_with_no_warnings(client, seeded, state):
    promtool = _promtool()
    state.put_forecast("other", stored_forecast(level=50), trained_at="2024-01-07 23:00:00")
    state.put("plan", "demo", {"desired": 4})
    state.set_paused("demo", True, reason="maintenance")
    text = client.get("/metrics").text
    assert "warmcast_forecast_requests_per_minute{" in text and "warmcast_desired_replicas{" in text
    run = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0 and not (run.stdout + run.stderr).strip(), run.stdout[-3000:] + run.stderr[-3000:]


def test_forecast_quantiles_are_labelled_level_with_their_values(client, seeded):
    text = client.get("/metrics").text
    fc = stored_forecast()
    for level, lead in ((0.1, 1), (0.5, 15), (0.9, 30)):
        line = f'warmcast_forecast_requests_per_minute{{deployment="demo",lead="{lead}",level="{level:g}"}}'
        value = [l for l in text.splitlines() if l.startswith(line)]
        assert value and float(value[0].split()[-1]) == pytest.approx(fc.quantiles[level][lead - 1], rel=1e-4)
