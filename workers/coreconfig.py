"""Build the decision core's configuration from a deployment (plus optional overrides).

The deployments file says what a deployment is (bounds, cold start, profiles,
schedule); tuning of the policies themselves (quantile, cooldowns, warmup tiers)
keeps the core's defaults unless an operator stores overrides in Redis under
``<prefix>:policy-config:<deployment>`` as ``{"scaling": {...}, "warmup": {...}, "switch": {...}}``.
"""
from __future__ import annotations

from dataclasses import fields, replace
from typing import Any
from zoneinfo import ZoneInfo

from warmcast.deployments import Deployment
from warmcast.errors import InputError
from warmup.core import CoreConfig, ScalingConfig, ScheduleWindow, SwitchConfig, WarmupConfig, WarmupTier


def _override(obj, values: dict[str, Any], what: str):
    known = {f.name for f in fields(obj)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise InputError(f"policy-config {what}: unknown key(s) {unknown}; known: {sorted(known)}")
    if "tiers" in values:
        values = {**values, "tiers": tuple(WarmupTier(**t) if isinstance(t, dict) else t for t in values["tiers"])}
    try:
        return replace(obj, **values)
    except (TypeError, ValueError) as err:
        raise InputError(f"policy-config {what}: {err}") from None


def core_config(dep: Deployment, dry_run: bool = False, overrides: dict[str, Any] | None = None) -> CoreConfig:
    """The core configuration for ``dep``; ``dry_run`` is forecast-only mode."""
    prof = dep.profiles[dep.default_profile]
    scaling = ScalingConfig(capacity_rpm=prof.capacity_rpm, min_replicas=dep.min_replicas,
                            max_replicas=dep.max_replicas, gpus_per_replica=dep.gpus_per_replica,
                            cold_start_min=dep.cold_start_min)
    windows = tuple(ScheduleWindow(w.profile, w.start, w.end) for w in dep.schedule.windows)
    switch = SwitchConfig(enabled=bool(windows) and len(dep.profiles) > 1, default_profile=dep.default_profile,
                          profile_capacity=tuple((n, p.capacity_rpm) for n, p in dep.profiles.items()),
                          windows=windows, tz=ZoneInfo(dep.schedule.timezone))
    warmup = WarmupConfig()
    ov = overrides or {}
    unknown = sorted(set(ov) - {"scaling", "warmup", "switch"})
    if unknown:
        raise InputError(f"policy-config: unknown section(s) {unknown}; use scaling, warmup, switch")
    scaling = _override(scaling, ov.get("scaling", {}), "scaling")
    warmup = _override(warmup, ov.get("warmup", {}), "warmup")
    switch = _override(switch, ov.get("switch", {}), "switch")
    return CoreConfig(scaling=scaling, warmup=warmup, switch=switch, dry_run=dry_run)
