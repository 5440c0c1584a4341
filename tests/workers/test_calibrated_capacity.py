"""A stored calibration is the capacity the planner counts replicas with, and the audit says so."""
from __future__ import annotations

from loophelpers import seed_steady
from warmup.calibration.store import CalibrationStore
from workers.steps import tick as plan


def _entry(ctx, tick: str) -> dict:
    return next(e for e in ctx.state.audit_log("simdep", kind="scale") if e["inputs"]["tick"] == tick)


def test_a_stored_calibration_changes_the_replica_count_and_the_audit_says_calibrated(ctx):
    seed_steady(ctx, "simdep", 350.0)
    declared = plan.step(ctx, "simdep", tick="T1", run_id="task-a")
    first = _entry(ctx, "T1")
    assert declared.desired == 4 and "100 req/min per replica, declared" in first["reason"]  # 350 / 100

    version = CalibrationStore(ctx.r, ctx.prefix).put("simdep", "day", {"capacity": {"rpm": 50.0, "rps": 0.833},
                                                                        "created_at": "2026-11-30T23:00:00Z"})
    calibrated = plan.step(ctx, "simdep", tick="T2", run_id="task-b")
    entry = _entry(ctx, "T2")
    assert version == 1 and calibrated.desired >= 7  # 350+ req/min / 50 (the backlog may add one)
    assert "50 req/min per replica, calibrated" in entry["reason"]
    assert entry["inputs"]["capacity_source"] == "calibrated" and entry["inputs"]["capacity_rpm"] == 50.0
    preview = ctx.state.get("plan-journal", "simdep")["plan"]
    assert preview[0]["capacity_source"] == "calibrated" and "calibrated" in preview[0]["reason"]
