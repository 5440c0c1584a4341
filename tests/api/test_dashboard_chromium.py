"""The dashboard in a real headless Chromium against a real uvicorn with data in real Redis.

Checks the chart rendered (the page writes the number of points it drew into
``body[data-rendered]``) and keeps a screenshot in test-artifacts/dashboard.png; then,
over the DevTools protocol, which deployment it opens, the y axis it chose and the laid-out
boxes of the axis labels.
"""
from __future__ import annotations

import json
import re

import numpy as np
import pandas as pd
import pytest

from api_helpers import END, stored_forecast, synthetic_frame
from browser import ROOT, Page, chromium, run_chromium, serve_api

ARTIFACTS = ROOT / "test-artifacts"
FLEET = """deployments:
  - name: zeta-live
    cold_start_min: 15
    scaler: {kind: dryrun}
    default_profile: day
    profiles: {day: {capacity_rpm: 300}}
  - name: beta-batch
    cold_start_min: 15
    scaler: {kind: dryrun}
    default_profile: day
    profiles: {day: {capacity_rpm: 300}}
"""


@pytest.fixture
def server(settings, tmp_path):
    yield from serve_api(settings, tmp_path)


def _seed(store, state) -> None:
    store.upsert_frame("demo", synthetic_frame(days=2))
    state.put_forecast("demo", stored_forecast(level=110), trained_at="2024-01-07 23:00:00")
    for i in range(240, 0, -1):  # four hours of planner ticks; actual follows desired after a 15-min cold start
        t = END - pd.Timedelta(minutes=i)
        state.record_fleet("demo", t, 1 + (i <= 120) + (i <= 45), 1 + (i <= 105) + (i <= 30))
    # the planner's stored plan for the next 30 minutes (the workers write this key)
    state.put("plan", "demo", {"desired": 3, "steps": [
        {"time": (END + pd.Timedelta(minutes=k)).strftime("%Y-%m-%d %H:%M:%S"), "desired": 3 + (k >= 15)}
        for k in range(30)]})
    state.audit("demo", "scale", "up 1->2", "forecast P90 needs 2", True, ts=END - pd.Timedelta(minutes=120))
    state.audit("demo", "warmup", "start medium", "queue depth 12 > 10", True, ts=END - pd.Timedelta(minutes=90))
    state.audit("demo", "switch", "prewarm night", "schedule window night starts 22:00", True,
                ts=END - pd.Timedelta(minutes=60))
    state.audit("demo", "scale", "up 2->3", "forecast P90 needs 3", True, ts=END - pd.Timedelta(minutes=45))
    state.audit("demo", "scale", "hold", "no change", False, ts=END - pd.Timedelta(minutes=30))
    state.audit("demo", "alert-response", "primary report", "alert_opened: WarmcastTTFTHigh firing", True,
                ts=END - pd.Timedelta(minutes=20))
    state.audit("demo", "alert", "firing primary: nothing", "alert_duplicate: already handled", False,
                ts=END - pd.Timedelta(minutes=19))


def test_dashboard_renders_band_replicas_and_events(server, store, state, tmp_path):
    chrome = chromium()
    _seed(store, state)
    page = f"{server}/?deployment=demo&refresh=2"
    dom = run_chromium(chrome, tmp_path, "--virtual-time-budget=15000", "--dump-dom", page)
    m = re.search(r'data-rendered="([^"]*)"', dom.stdout)
    assert m and m.group(1), f"chart not rendered:\n{dom.stdout[-2000:]}\n{dom.stderr[-2000:]}"
    counts = json.loads(m.group(1).replace("&quot;", '"'))
    assert counts["load"] == 240  # the four hours before the forecast origin (the window asked for)
    assert counts["band"] == 30 and counts["p50"] == 30
    assert counts["desired"] == 240 and counts["actual"] == 240 and counts["planned"] == 30
    # two scale actions, a warmup, a switch, an alert response; neither the "hold" nor the duplicate alert
    assert counts["events"] == 5
    assert 'class="marker marker-alert"' in dom.stdout
    refreshes = int(re.search(r'data-refreshes="(\d+)"', dom.stdout).group(1))
    assert refreshes >= 3  # it polls by itself: 15 s of page time at a 2 s refresh
    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / "dashboard.png"
    shot.unlink(missing_ok=True)
    run_chromium(chrome, tmp_path, "--virtual-time-budget=15000", "--window-size=1280,900", f"--screenshot={shot}", page)
    assert shot.is_file() and shot.stat().st_size > 10_000


# Boxes of every text in each chart's axes: the tick labels, and the axis title by class.
_AXIS_BOXES = """[...document.querySelectorAll('svg:not([hidden])')].map(svg => [...svg.querySelectorAll('g.axes text')].map(t => {
  const b = t.getBoundingClientRect();
  return {cls: t.getAttribute('class'), text: t.textContent, l: b.left, r: b.right, t: b.top, b: b.bottom};
}))"""


def _overlap(a: dict, b: dict) -> bool:
    return a["l"] < b["r"] and b["l"] < a["r"] and a["t"] < b["b"] and b["t"] < a["b"]


def test_dashboard_opens_the_live_deployment_with_axes_from_the_data(settings, store, state, tmp_path):
    chrome = chromium()
    fleet = tmp_path / "deployments.yaml"
    fleet.write_text(FLEET)
    for name, peak in (("aaa-stored-only", 900.0), ("beta-batch", 700.0), ("zeta-live", 5300.0)):
        frame = synthetic_frame(days=1)
        frame["requests"] = np.linspace(0.5, 1.0, len(frame)) * peak  # the peak is the last minute shown
        store.upsert_frame(name, frame)
        state.put_forecast(name, stored_forecast(level=peak * 0.5), trained_at="2024-01-07 23:00:00")
    for url in serve_api(settings, tmp_path, deployments_file=fleet):
        with Page(chrome, tmp_path, url + "/") as page:
            page.wait_for("document.body.dataset.rendered")
            assert page.eval("document.body.dataset.deployment") == "zeta-live"  # the first configured one
            options = page.eval("[...document.querySelectorAll('#deployment option')].map(o => o.value)")
            assert options == ["zeta-live", "beta-batch", "aaa-stored-only"]  # file order, then stored only
            charts = page.eval(_AXIS_BOXES)
    load_ticks = [float(t["text"]) for t in charts[0] if t["cls"] == "ytick"]
    assert 5300 <= max(load_ticks) <= 6000, load_ticks  # the next round tick above the data, not 10,000
    for labels in charts:
        assert sum(t["cls"] == "ytitle" for t in labels) == 1
        for i, a in enumerate(labels):
            for b in labels[i + 1:]:
                assert not _overlap(a, b), f"{a} overlaps {b}"
