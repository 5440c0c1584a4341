"""The warm buffer and the asleep tier: headroom paid for only when the forecast's own errors ask.

- ``stage_buffer``: extra replicas over the forecast need, sized from the forecast's recent
  short-lead errors (actual load minus the planned quantile's forecast made ``buffer_lead_min``
  before).  The buffer covers the ``buffer_level`` quantile of the errors of the last
  ``buffer_window_min`` minutes; when the forecast has recently been at or above the load it is
  zero, so it costs nothing on days the forecast sees coming.
- the asleep tier (issue 19): an instance in sleep mode holds its GPU (it costs
  ``sleep_cost_share`` of a GPU-hour) and wakes in ``wake_s`` seconds instead of a cold start.
  ``buffer_tier`` says whether the buffer is kept ready or asleep; ``plan_wakes`` takes asleep
  instances before cold launches on a scale-up whenever a wake is faster, and says why.
"""
from __future__ import annotations

import math
from datetime import datetime
from typing import Mapping, Optional, Sequence

from warmup.core.config import ScalingConfig
from warmup.core.inputs import Instance, InstanceState, as_utc
from warmup.core.stats import quantile


def forecast_errors(actual: Sequence[float], forecast: Sequence[float]) -> tuple[float, ...]:
    """Pairwise ``actual - forecast`` for the minutes where both are finite (req/min), oldest first."""
    if len(actual) != len(forecast):
        raise ValueError(f"forecast_errors: {len(actual)} actual minutes but {len(forecast)} forecasts")
    return tuple(a - f for a, f in zip(actual, forecast) if math.isfinite(a) and math.isfinite(f))


LOOKBACK_WINDOWS = 4  # minutes with no error (a gap in the record) are skipped this many windows back


def minute_key(t: datetime) -> int:
    """A minute as whole minutes since the epoch (UTC): the key of the error record on both sides."""
    return int(as_utc(t).timestamp() // 60)


def lead_errors(cfg: ScalingConfig, planned: Mapping[int, float], actual: Mapping[int, float],
                now: datetime) -> tuple[float, ...]:
    """The warm buffer's recent errors at ``now``, oldest first: for each whole minute before ``now``
    (newest first, at most the last ``buffer_window_min`` with both sides), its recorded load less the
    planned quantile's forecast for it made ``buffer_lead_min`` before.  ``planned`` and ``actual`` are
    keyed by :func:`minute_key`.  The simulator and the live tick both call this, on their own records."""
    if cfg.buffer_level is None:
        return ()
    m = minute_key(now) - 1
    out: list[float] = []
    for k in range(m, m - LOOKBACK_WINDOWS * cfg.buffer_window_min, -1):
        a, f = actual.get(k), planned.get(k)
        if a is not None and f is not None and math.isfinite(a) and math.isfinite(f):
            out.append(a - f)
            if len(out) >= cfg.buffer_window_min:
                break
    return tuple(reversed(out))


def stage_buffer(cfg: ScalingConfig, errors: Sequence[float], capacity_rpm: float) -> tuple[int, str]:
    """(buffer replicas, why) from the last ``buffer_window_min`` short-lead errors."""
    if cfg.buffer_level is None:
        return 0, ""
    recent = [e for e in errors[-cfg.buffer_window_min:] if math.isfinite(e)]
    if len(recent) < min(10, cfg.buffer_window_min):
        return 0, f"warm buffer off: {len(recent)} recent forecast errors are too few to size it"
    gap = quantile(recent, cfg.buffer_level)
    tag = (f"P{cfg.buffer_level * 100:g} of the last {len(recent)} lead-{cfg.buffer_lead_min} forecast "
           f"errors is {gap:+,.0f} req/min")
    if gap <= 0:
        return 0, f"warm buffer 0: {tag} (the forecast has been high enough)"
    n = int(math.ceil(gap / capacity_rpm - 1e-9))
    return n, f"warm buffer {n}: {tag}"


def buffer_tier(cfg: ScalingConfig) -> tuple[str, str]:
    """('ready' | 'asleep', why): where the warm buffer is kept."""
    if not cfg.buffer_asleep or cfg.wake_s is None:
        return "ready", "buffer kept ready"
    lead_s = cfg.cold_start_min * 60.0
    if cfg.wake_s >= lead_s:
        return "ready", (f"buffer kept ready: a wake ({cfg.wake_s:g} s) is no faster than a cold start "
                         f"({cfg.cold_start_min:g} min)")
    return "asleep", (f"buffer kept asleep at {cfg.sleep_cost_share:.0%} of a GPU-hour each: wakes in "
                      f"{cfg.wake_s:g} s instead of a {cfg.cold_start_min:g}-min cold start")


def split_asleep(instances: tuple[Instance, ...]) -> tuple[tuple[Instance, ...], tuple[Instance, ...]]:
    """(awake instances, asleep instances)."""
    awake = tuple(i for i in instances if i.state is not InstanceState.ASLEEP)
    asleep = tuple(i for i in instances if i.state is InstanceState.ASLEEP)
    return awake, asleep


def plan_wakes(cfg: ScalingConfig, asleep: tuple[Instance, ...], adding: int) -> tuple[tuple[str, ...], str]:
    """(asleep instance ids to wake, why) when ``adding`` replicas are asked for: wakes before launches."""
    if adding <= 0 or not asleep or cfg.wake_s is None:
        return (), ""
    lead_s = cfg.cold_start_min * 60.0
    if cfg.wake_s >= lead_s:
        return (), (f"{len(asleep)} asleep but a wake ({cfg.wake_s:g} s) is no faster than a launch "
                    f"({cfg.cold_start_min:g} min): launching")
    ids = tuple(sorted(i.id for i in asleep))[:adding]
    launched = adding - len(ids)
    why = (f"wakes {len(ids)} asleep (ready in {cfg.wake_s:g} s) rather than launching "
           f"(ready in {cfg.cold_start_min:g} min)")
    if launched:
        why += f"; launches {launched} more"
    return ids, why


def asleep_target(cfg: ScalingConfig, buffer: int) -> int:
    """How many instances to keep asleep: the buffer where it is kept asleep, else none."""
    tier, _ = buffer_tier(cfg)
    return buffer if tier == "asleep" else 0


def apply_buffer(forecast_need: Optional[int], buffer: int, cfg: ScalingConfig) -> Optional[int]:
    """The forecast need with the ready buffer on top (an asleep buffer is held apart)."""
    if forecast_need is None or buffer <= 0 or buffer_tier(cfg)[0] == "asleep":
        return forecast_need
    return forecast_need + buffer
