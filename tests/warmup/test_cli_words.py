"""Issue 46 item 9: what the console says matches the series it read.

- ``backtest fleet`` on a 5-minute series printed "resolution 60 s" beside "series resolution 5 min".
- ``--log`` help said "per-minute" though coarse count series work."""
from __future__ import annotations

import os
import subprocess
import sys

from warmcast.cli.backtest import header_lines


def _meta(resolution_s: int, series_min: int) -> dict:
    return {"test_minutes": 2880, "test_start": "2024-01-03 00:00:00", "requests": 1000,
            "resolution_s": resolution_s, "series_resolution_min": series_min}


def test_a_coarse_series_is_not_said_to_have_a_60_s_resolution():
    coarse = "\n".join(header_lines(_meta(60, 5)))
    assert "resolution 60 s" not in coarse and "series resolution 5 min" in coarse
    assert "resolution 10 s" in "\n".join(header_lines(_meta(10, 1)))
    assert "resolution 60 s" in "\n".join(header_lines(_meta(60, 1)))


def test_log_help_names_coarse_count_series():
    env = {**os.environ, "COLUMNS": "250", "TERM": "dumb"}
    for cmd in (["backtest", "fleet"], ["backtest", "forecast"], ["replay"]):
        out = subprocess.run([sys.executable, "-m", "warmcast.cli", *cmd, "--help"], capture_output=True, text=True,
                             env=env, timeout=120).stdout
        out = " ".join(out.replace("│", " ").split())   # the help box wraps lines; words are what count
        assert "Per-minute or finer" not in out and "per-minute count series" not in out, cmd
        assert "5 or 10 min" in out, (cmd, out[:800])
