"""The core's values from the rest of warmcast's (pure, duck-typed: nothing imported from outside the core).

- :func:`core_config_from_values` takes a deployment's plain values
  (``Deployment.model_dump()``) and builds the core's :class:`CoreConfig`; the time
  zone object is passed in (the deployments file's model builds it from the tz database).
- :func:`core_config` does the same from a :class:`warmcast.config.deployments.Deployment`.
- :func:`forecast_input` turns a :class:`forecaster.base.Forecast` into the core's
  :class:`ForecastInput`.
"""
from __future__ import annotations

from datetime import time, timezone, tzinfo
from typing import Any, Mapping, Optional, Sequence

from warmup.core import CoreConfig, ForecastInput, ScalingConfig, ScheduleWindow, SwitchConfig, WarmupConfig


def _as_time(v: Any) -> time:
    if isinstance(v, time):
        return v
    return time.fromisoformat(str(v))


def core_config_from_values(values: Mapping[str, Any], tz: Optional[tzinfo] = None, *,
                            scaling: Optional[Mapping[str, Any]] = None,
                            warmup: Optional[WarmupConfig] = None,
                            switch: Optional[Mapping[str, Any]] = None,
                            dry_run: bool = False,
                            capacities: Optional[Mapping[str, tuple[float, str]]] = None) -> CoreConfig:
    """Pure mapping of a deployment's plain values to the core config.

    ``scaling`` / ``switch`` hold overrides of the core's own knobs (quantile,
    target utilisation, stabilisation, prewarm, hold...).  ``capacities`` (profile ->
    (capacity_rpm, source)) replaces the declared capacity of the profiles it names,
    e.g. with a stored calibration (:func:`warmup.calibration.store.load_capacities`).
    """
    profiles: Mapping[str, Mapping[str, Any]] = values.get("profiles") or {}
    default = values.get("default_profile") or (next(iter(profiles)) if profiles else "default")
    caps = {name: (float(p["capacity_rpm"]), "declared") for name, p in profiles.items()} | dict(capacities or {})
    cap = caps[default][0] if default in profiles else 300.0
    sc = _scaling(values, cap, scaling)
    sched = values.get("schedule") or {}
    windows = tuple(ScheduleWindow(w["profile"], _as_time(w["start"]), _as_time(w["end"]))
                    for w in sched.get("windows", []))
    sw = SwitchConfig(
        enabled=len(profiles) > 1 and (bool(windows) or bool(sched.get("mix_trigger"))),
        default_profile=default,
        profile_capacity=tuple((name, float(caps[name][0])) for name in profiles),
        capacity_source=tuple((name, caps[name][1]) for name in profiles),
        trigger="schedule",
        windows=windows,
        tz=tz,
        max_replicas=sc.max_replicas,
        min_replicas=sc.min_replicas,
        routing="weights" if values.get("route") else "replicas",
        **dict(switch or {}),
    )
    return CoreConfig(scaling=sc, warmup=warmup or WarmupConfig(), switch=sw, dry_run=dry_run)


def _scaling(values: Mapping[str, Any], cap: float, scaling: Optional[Mapping[str, Any]]) -> ScalingConfig:
    """The scaling knobs in layers: the core's defaults, the deployment's values and its ``policy:``
    knobs, then ``scaling`` (the stored overrides: the re-tune's, an operator's, an alert's floor)."""
    policy = {k: v for k, v in (values.get("policy") or {}).items() if v is not None}
    return ScalingConfig(
        capacity_rpm=cap,
        min_replicas=int(values.get("min_replicas", 1)),
        max_replicas=int(values.get("max_replicas", 8)),
        gpus_per_replica=int(values.get("gpus_per_replica", 1)),
        cold_start_min=float(values.get("cold_start_min", 15.0)),
        **{**_sleep_fields(values.get("sleep")), **policy, **dict(scaling or {})},
    )


def _sleep_fields(sleep: Optional[Mapping[str, Any]]) -> dict[str, Any]:
    """ScalingConfig fields of the deployment's asleep tier (none without a ``sleep:`` key)."""
    if not sleep:
        return {}
    return {"wake_s": float(sleep["wake_s"]), "sleep_cost_share": float(sleep.get("cost_share", 1.0)),
            "buffer_asleep": bool(sleep.get("buffer_asleep", False))}


def core_config(deployment, *, dry_run: bool = False, capacities: Optional[Mapping[str, Any]] = None,
                **overrides: Any) -> CoreConfig:
    """CoreConfig for a :class:`warmcast.config.deployments.Deployment` (its schedule's time zone object comes from the deployments file's model); ``capacities``:
    profile -> :class:`warmup.calibration.store.ProfileCapacity` (calibrated or declared), else declared."""
    values = deployment.model_dump()
    tz = deployment.schedule.tzinfo
    caps = {n: (c.capacity_rpm, c.source) for n, c in (capacities or {}).items()}
    return core_config_from_values(values, tz, dry_run=dry_run, capacities=caps, **overrides)


def forecast_input(forecast, levels: Optional[Sequence[float]] = None) -> ForecastInput:
    """The core's view of a :class:`forecaster.base.Forecast` (plain tuples, UTC origin)."""
    sorted_levels = tuple(sorted(levels if levels is not None else forecast.quantiles))
    values = tuple(tuple(float(x) for x in forecast.quantile(q)) for q in sorted_levels)
    origin = forecast.origin
    origin = origin.to_pydatetime() if hasattr(origin, "to_pydatetime") else origin  # a pandas Timestamp
    if origin.tzinfo is None:
        origin = origin.replace(tzinfo=timezone.utc)
    extra = tuple((k, tuple(float(x) for x in v)) for k, v in (forecast.extra or {}).items())
    return ForecastInput(origin=origin, levels=sorted_levels, values=values,
                         model=f"{forecast.model}:{forecast.version}", extra=extra)
