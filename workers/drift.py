"""Hook of the signals step: does the active profile's calibration still hold? (issue 15)

Folds the newest reading (fleet TTFT P99 at the load per ready instance) into the
correction factor of :func:`warmup.calibration.drift.check_drift`, stores it as
``<prefix>:calibration-drift:<deployment>``, exports it on the workers' /metrics and writes
an audit entry (kind ``calibration``) when the drift flag turns on or off.
"""
from __future__ import annotations

import math
from typing import Any, Optional

from warmup.calibration.store import CalibrationStore
from warmup.calibration.drift import DriftCheck, check_drift, curve_of
from workers import metrics, policy
from workers.context import Ctx


def _profile(ctx: Ctx, deployment: str) -> str:
    """The profile serving now: the switch machine's active one, else the default."""
    ps, _ = policy.load(ctx.state, deployment)
    return ps.switch.active_profile or ctx.dep(deployment).default_profile


def check(ctx: Ctx, deployment: str, sig: dict[str, Any]) -> Optional[DriftCheck]:
    """None when the active profile has no stored calibration (nothing to drift from)."""
    profile = _profile(ctx, deployment)
    doc = CalibrationStore(ctx.r, ctx.prefix).get(deployment, profile)
    if doc is None:
        return None
    ready, rpm, p99_s = sig.get("ready") or 0, sig.get("observed_rpm"), sig.get("p99_s")
    per = rpm / 60.0 / ready if ready and isinstance(rpm, (int, float)) else math.nan
    prev = ctx.state.get("calibration-drift", deployment) or {}
    same = prev.get("profile") == profile and prev.get("version") == doc.get("version")
    res = check_drift(curve_of(doc), per, None if p99_s is None else float(p99_s) * 1000.0,
                      prev.get("factor") if same else None)
    ctx.state.put("calibration-drift", deployment, {"profile": profile, "version": doc.get("version"),
                                                    "factor": res.factor, "drifted": res.drifted,
                                                    "reason": res.reason, "ts": sig.get("ts")})
    metrics.CALIBRATION_FACTOR.labels(deployment).set(math.nan if res.factor is None else res.factor)
    metrics.CALIBRATION_DRIFT.labels(deployment).set(int(res.drifted))
    if res.drifted != bool(same and prev.get("drifted")):
        ctx.state.audit(deployment, "calibration", "drift" if res.drifted else "calibration holds", res.reason,
                        False, "recalibrate: warmcast calibrate" if res.drifted else "",
                        {"profile": profile, "version": doc.get("version"), "factor": res.factor,
                         "per_instance_rps": None if math.isnan(per) else per, "p99_s": p99_s})
    return res
