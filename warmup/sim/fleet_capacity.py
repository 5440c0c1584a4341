"""Which capacity ``warmcast backtest fleet`` plans with, per profile, and the latency curve it reports.

A ``--calibration`` file is the calibration of the profile it was measured for (its ``profile``
key; a calibration made with ``--url`` alone names none and is taken as the default profile's);
``--stored-calibrations`` adds the deployment's current calibrations from Redis (the file wins
for its own profile).  Every other profile keeps its declared capacity.  :func:`resolve` is pure;
:func:`read_calibration` and :func:`stored_calibrations` are the edges.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from warmup.calibration.store import ProfileCapacity, capacities
from warmcast.errors import InputError
from warmup.sim.latency import LatencyCurve, curve_from_calibration, ttft_bound


@dataclass(frozen=True)
class FleetCapacity:
    capacity_rpm: float                                  # the default profile's (or the fleet's)
    source: str                                          # "calibrated" or "declared"
    profiles: Optional[dict[str, ProfileCapacity]]       # per profile, with a deployment
    latency: Optional[LatencyCurve]                      # None: no calibration curve to read
    note: str = ""                                       # why there is no curve, for the output
    curves: dict[str, LatencyCurve] = field(default_factory=dict)   # every profile's, or none (see _every_curve)

    def describe(self) -> str:
        if self.profiles is None:
            return f"capacity {self.capacity_rpm:g} req/min {self.source}"
        return "capacity " + ", ".join(f"{n} {c.capacity_rpm:g} req/min {c.source}" for n, c in self.profiles.items())


def read_calibration(path: Path) -> dict[str, Any]:
    """A ``warmcast calibrate`` calibration.json, checked for a positive capacity.rpm."""
    try:
        doc = json.loads(path.read_text())
        rpm = doc["capacity"]["rpm"]
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise InputError(f"--calibration {path}: not a calibration.json with capacity.rpm ({err})") from None
    if not isinstance(rpm, (int, float)) or rpm <= 0:
        raise InputError(f"--calibration {path}: capacity.rpm must be a positive number, got {rpm!r}")
    return doc


def stored_calibrations(dep: Any) -> dict[str, dict[str, Any]]:
    """The deployment's current calibration per profile, from the Redis the WARMCAST_* settings name."""
    from warmup.calibration.store import CalibrationStore
    from warmcast.runtime import redis_client
    from warmcast.config.settings import load_settings

    settings = load_settings()
    return CalibrationStore(redis_client(settings), settings.key_prefix).current(dep.name)


def resolve(dep: Any, flag_rpm: Optional[float], file_doc: Optional[dict[str, Any]],
            stored: Optional[dict[str, dict[str, Any]]] = None) -> FleetCapacity:
    """The capacities the simulation plans with (see the module docstring) and the curve of the
    calibration given (the file, else the default profile's stored one)."""
    if file_doc is not None and flag_rpm is not None:
        raise InputError("give --capacity-rpm or --calibration, not both: each sets the capacity")
    if dep is None:
        if stored is not None:
            raise InputError("--stored-calibrations needs --deployment (calibrations are stored per deployment)")
        if file_doc is not None:
            curve, note = _curve(file_doc, None)
            if curve is not None:
                check_covers(curve, float(file_doc["capacity"]["rpm"]), file_doc.get("profile") or "(none named)")
            return FleetCapacity(float(file_doc["capacity"]["rpm"]), "calibrated", None, curve, note)
        if flag_rpm is None:
            raise InputError("--capacity-rpm is required (or give --deployment or --calibration)")
        return FleetCapacity(float(flag_rpm), "declared", None, None)
    docs = dict(stored or {})
    if file_doc is not None:
        docs[_profile_of(file_doc, dep)] = file_doc
    caps = capacities(dep, docs)
    default = dep.default_profile
    if flag_rpm is not None:  # the flag stands in for the default profile's declared capacity
        caps[default] = ProfileCapacity(default, float(flag_rpm), "declared")
    doc = file_doc if file_doc is not None else docs.get(default)
    curve, note = _curve(doc, dep.slo) if doc is not None else (None, "no calibration given: no SLO attainment")
    curves = _every_curve(dep, docs, caps)
    return FleetCapacity(caps[default].capacity_rpm, caps[default].source, caps, curve, note, curves)


def _every_curve(dep: Any, docs: dict[str, dict[str, Any]], caps: dict[str, ProfileCapacity]) -> dict[str, LatencyCurve]:
    """Each profile's curve when every profile has one (a switch's two sides need both), each checked
    to cover the capacity the simulator plans that profile with: these are read at a replica's
    absolute rate (``warmup.sim.mixed_latency``), where the single curve of SLO attainment is read at
    the load's share of capacity."""
    curves = {p: _curve(docs[p], dep.slo)[0] for p in dep.profiles if p in docs}
    for p, c in curves.items():
        if c is not None:
            check_covers(c, caps[p].capacity_rpm, p)
    return curves if len(curves) == len(dep.profiles) and all(curves.values()) and len(curves) > 1 else {}


def check_covers(curve: LatencyCurve, capacity_rpm: float, profile: str) -> None:
    """A curve must reach the per-replica load the simulator plans up to (10% short at most: the
    search's step): beyond its last rate there is no measured TTFT to read."""
    top = curve.points[-1][0] * 60.0
    if capacity_rpm > top * 1.1:
        raise InputError(f"profile {profile!r}: the calibration's curve (scenarios.{curve.scenario}.curve) was measured "
                         f"up to {top:g} req/min per replica, but the simulator plans that profile with "
                         f"{capacity_rpm:g} req/min (capacity.rpm or --capacity-rpm): re-run warmcast calibrate "
                         "for it, or plan with a capacity the curve covers")


def _profile_of(doc: dict[str, Any], dep: Any) -> str:
    """The profile a calibration file was measured for, checked against the deployment."""
    measured_for = doc.get("deployment")
    if measured_for not in (None, dep.name):
        raise InputError(f"--calibration was measured for deployment {measured_for!r}, not {dep.name!r}")
    profile = doc.get("profile") or dep.default_profile  # made with --url alone: no profile named
    if profile not in dep.profiles:
        raise InputError(f"--calibration was measured for profile {profile!r}, which {dep.name!r} does not have "
                         f"(profiles: {', '.join(dep.profiles)})")
    return profile


def _curve(doc: dict[str, Any], dep_slo: Any) -> tuple[Optional[LatencyCurve], str]:
    """The calibration's curve against the deployment's TTFT bound, or why there is none (an older or
    hand-made file with a capacity only still sets the capacity)."""
    bound, source = ttft_bound(doc, dep_slo)
    try:
        return curve_from_calibration(doc, bound, source), ""
    except (ValueError, KeyError, TypeError) as err:
        return None, f"no latency curve in the calibration ({err}): no SLO attainment"


def for_backtest(dep: Any, capacity_rpm: Optional[float], calibration: Optional[Path], stored: bool,
                 overrides: Optional[dict[str, Any]] = None) -> tuple[Any, FleetCapacity]:
    """(the deployment's core config planning with the resolved capacities, or None without a
    deployment; the capacities): ``calibration`` a calibration.json, ``stored`` the deployment's
    calibrations in Redis, ``overrides`` a stored policy-config (``scaling``/``switch``)."""
    from warmup.core.adapters import core_config

    if stored and dep is None:
        raise InputError("--stored-calibrations and --stored-policy need --deployment (both are stored per deployment)")
    caps = resolve(dep, capacity_rpm, read_calibration(calibration) if calibration is not None else None,
                   stored_calibrations(dep) if stored else None)
    ov = overrides or {}
    core = (core_config(dep, capacities=caps.profiles, scaling=ov.get("scaling"), switch=ov.get("switch"))
            if dep is not None else None)
    return core, caps
