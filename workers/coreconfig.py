"""Build the decision core's configuration from a deployment (plus optional overrides).

The deployments file says what a deployment is (bounds, cold start, profiles,
schedule); tuning of the policies themselves (quantile, cooldowns, warmup tiers)
keeps the core's defaults unless an operator stores overrides in Redis under
``<prefix>:policy-config:<deployment>`` as ``{"scaling": {...}, "warmup": {...}, "switch": {...}}``.
"""
from __future__ import annotations

from dataclasses import fields, replace
from typing import Any

from warmcast.forecast import DEFAULT_QUANTILES
from warmcast.config.deployments import Deployment
from warmcast.errors import InputError
from warmup.core import adapters
from warmup.core import CoreConfig, WarmupTier


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


def core_config(dep: Deployment, dry_run: bool = False, overrides: dict[str, Any] | None = None,
                capacities: dict[str, Any] | None = None) -> CoreConfig:
    """The core configuration for ``dep`` (``warmup.core.adapters.core_config``) with the operator's
    stored overrides applied; ``dry_run`` is forecast-only mode; ``capacities``: the stored
    calibrations' capacity per profile (``warmup.calibration.store.load_capacities``)."""
    base = adapters.core_config(dep, dry_run=dry_run, capacities=capacities)
    ov = overrides or {}
    unknown = sorted(set(ov) - {"scaling", "warmup", "switch"})
    if unknown:
        raise InputError(f"policy-config: unknown section(s) {unknown}; use scaling, warmup, switch")
    scaling = _override(base.scaling, ov.get("scaling", {}), "scaling")
    lo, hi = min(DEFAULT_QUANTILES), max(DEFAULT_QUANTILES)
    if not lo <= scaling.quantile <= hi:  # between two stored levels the core interpolates the path; outside, none
        raise InputError(f"policy-config scaling.quantile: {scaling.quantile:g} is outside the levels the live "
                         f"forecast carries ({lo:g}..{hi:g}); a level between two of them is interpolated")
    return replace(base, scaling=scaling, warmup=_override(base.warmup, ov.get("warmup", {}), "warmup"),
                   switch=_override(base.switch, ov.get("switch", {}), "switch"))


def live_core_config(r: Any, prefix: str, dep: Deployment, dry_run: bool = False) -> CoreConfig:
    """The configuration the live planner decides with: ``dep``'s, with the operator's (or the nightly
    re-tune's) stored ``policy-config`` and the stored calibrations.  The workers and the API both
    plan with it, so a re-tuned margin or stabilisation reaches the API's plans too."""
    from warmup.calibration.store import load_capacities
    from warmcast.state import StateStore

    return core_config(dep, dry_run=dry_run, overrides=StateStore(r, prefix).get("policy-config", dep.name),
                       capacities=load_capacities(r, prefix, dep))
