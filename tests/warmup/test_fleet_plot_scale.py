"""Issue 46 item 9: fleet.png's title is cut on neither side and the queue's warm capacity (100 replicas)
no longer stretches the demand panel's y-axis to 200,000 req/min: the axis follows the demand, and the
picture says which lines run off its top."""
from __future__ import annotations

import numpy as np

from warmup.sim.plot import HEADROOM, demand_ylim, title_text


def test_the_demand_panel_follows_the_demand_and_names_what_it_clips():
    demand = np.array([1000.0, 2000.0, 1500.0])
    caps = {"oracle": np.array([1200.0, 2100.0, 1800.0]), "queue": np.array([300.0, 200_000.0, 200_000.0])}
    top, note = demand_ylim(demand, caps)
    assert top == HEADROOM * 2000.0
    assert "clipped at 1.5x the peak demand" in note and "queue to 200,000" in note and "oracle" not in note
    top, note = demand_ylim(demand, {"oracle": caps["oracle"]})
    assert note == "" and top >= 2100.0


def test_the_title_puts_two_policies_on_a_line():
    rows = {n: {"gpu_hours_vs_oracle": 1.234, "late_pct": 0.0123, "slo_on_test": "met"}
            for n in ("oracle", "reactive", "queue", "predictive")}
    rows["static"] = {"gpu_hours_vs_oracle": 1.5, "late_pct": 0.0, "hindsight": True}
    text = title_text(rows, "azure, test from 2024-05-17")
    lines = text.splitlines()
    assert lines[0] == "azure, test from 2024-05-17" and len(lines) == 4
    assert max(len(x) for x in lines) < 120 and "static (hindsight)" in lines[-1]
