"""Shared helpers of the API tests: synthetic load and a forecast shaped like the workers' one.

The "stored" forecast is written through ``StateStore.put_forecast`` exactly as the
workers do, so the routes are tested on the same documents they serve live.
"""
from __future__ import annotations

import signal
import subprocess
import time

import numpy as np
import pandas as pd

from warmcast.forecast import Forecast

WRITE = "write-token-123"
AUTH = {"Authorization": f"Bearer {WRITE}"}
END = pd.Timestamp("2024-01-08 00:00")  # first minute after the synthetic history


def synthetic_frame(days: int = 7, end: pd.Timestamp = END, seed: int = 0) -> pd.DataFrame:
    idx = pd.date_range(end - pd.Timedelta(days=days), end - pd.Timedelta(minutes=1), freq="min")
    m = (idx.hour * 60 + idx.minute).to_numpy()
    base = 300 + 200 * np.sin(2 * np.pi * (m - 360) / 1440)
    y = np.random.default_rng(seed).poisson(np.maximum(base, 5)).astype(float)
    return pd.DataFrame({"requests": y}, index=pd.DatetimeIndex(idx, name="time"))


def stored_forecast(origin: pd.Timestamp = END, level: float = 600.0) -> Forecast:
    ramp = np.linspace(level, level * 1.5, 30)
    return Forecast(origin=origin, mean=ramp, model="lstm", version="demo/v0001",
                    quantiles={0.1: ramp * 0.8, 0.5: ramp, 0.9: ramp * 1.2})




def missing_tool(what: str) -> None:
    """A tool a test needs is absent: a skip, which tests/conftest.py turns into a failure on CI."""
    import pytest

    pytest.skip(f"{what} is not installed (bash scripts/test installs it)")


# A served API stops within uvicorn's graceful timeout (3 s, warmcast/cli/api.py) and its own exit; the rest
# is margin for a loaded CI machine (a niced test process beside three vLLM servers took 8.3 s).  A server that
# waited on its open requests would take as long as they do: this bounds that, it measures no speed.
STOP_BOUND_S = 15.0


def sigterm_stop_seconds(proc: subprocess.Popen, wait_s: float) -> float:
    """Send SIGTERM to a served API and return how long it took to exit (at most ``wait_s``)."""
    proc.send_signal(signal.SIGTERM)
    t0 = time.monotonic()
    proc.wait(timeout=wait_s)
    return time.monotonic() - t0


def kill_if_alive(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.kill()
        proc.wait()
