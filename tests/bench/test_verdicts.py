"""The fleet bench's verdict rule (issue 42): MET only for the target that applies; "least late" is
strict and counts only at no more than 1.05x the GPU-hours of the policy it beats."""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from fleet_slo import verdict  # noqa: E402

from warmcast.config.slo import SLO  # noqa: E402

SLO_ = SLO(late_share=0.0005, late_wait_s=5.0)


def _row(late: float, gpu: float) -> dict:
    return {"late_share": late, "late_pct": late * 100, "gpu_hours": gpu}


def test_least_late_by_a_hair_at_156x_the_gpu_hours_is_not_met() -> None:
    rows = {"predictive": _row(0.238456, 156.0), "reactive": _row(0.238469, 100.0), "queue": _row(0.5, 90.0)}
    v = verdict(rows, SLO_)
    assert v.startswith("no policy meets the SLO; NOT MET") and "only at 1.56x its GPU-hours" in v, v


def test_an_exact_tie_is_not_least_late() -> None:
    rows = {"predictive": _row(0.025687, 100.0), "reactive": _row(0.025687, 100.0), "queue": _row(0.3, 80.0)}
    v = verdict(rows, SLO_)
    assert "NOT MET" in v and "tied with reactive" in v, v


def test_strictly_least_late_within_105x_is_met() -> None:
    rows = {"predictive": _row(0.0023, 104.0), "reactive": _row(0.0024, 100.0), "queue": _row(0.01, 101.0)}
    assert "MET: predictive is the least late" in verdict(rows, SLO_)
    # both meet the SLO: the 0.90x target applies, not least late
    rows = {"predictive": _row(0.0001, 95.0), "reactive": _row(0.0002, 100.0), "queue": _row(0.0, 120.0)}
    assert verdict(rows, SLO_).startswith("NOT MET: both meet the SLO; predictive at 0.950x")
