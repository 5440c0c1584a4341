"""Pre-scaling: how many replicas to hold so that capacity is *ready* when demand arrives.

The recommendation is the larger of
- the reactive need: current load (plus the queue backlog drained over
  ``queue_drain_s``, by default the lead time: replicas launched now help only once
  they are ready, and draining a backlog faster would overshoot) at
  ``reactive_utilisation``; and
- the forecast need: the highest forecast (at ``quantile``) over the lead window
  ``[now, now + cold_start + margin]`` at ``target_utilisation``.  An instance
  launched now is ready at the end of that window, and an instance removed now
  could not be back before its end, so the forecast over the whole window is a
  floor for scale-in as well as the target for scale-up.

Then the guardrails (:mod:`warmup.core.guardrails`) run as small staged functions, each of
which may change the number and says why: stabilisation (scale-in only), max step, cooldowns,
the reactive guard, min/max replicas, GPU budget.  Bounds and budget run last, so they always hold.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Optional, Sequence

from warmup.core.buffer import BufferState, adapt, apply_buffer, asleep_target, plan_wakes, split_asleep, stage_buffer
from warmup.core.config import ScalingConfig
from warmup.core.decisions import ScaleAction, ScaleDecision
from warmup.core.guardrails import GuardrailContext, apply_guardrails
from warmup.core.hpa import follow_hpa
from warmup.core.inputs import ForecastInput, Instance, InstanceState, as_utc
from warmup.core.reasons import Reason, ReasonCode
from warmup.core.state import PolicyState

_EPS = 1e-9


def replicas_for(rpm: float, capacity_rpm: float, utilisation: float) -> int:
    """Replicas that serve ``rpm`` at ``utilisation`` of ``capacity_rpm`` each (0 for no load)."""
    if not (rpm > 0):
        return 0
    return int(math.ceil(rpm / (capacity_rpm * utilisation) - _EPS))


def _fmt(x: float) -> str:
    return f"{x:,.0f}"


# --------------------------------------------------------------------------- recommendations


def reactive_need(cfg: ScalingConfig, observed_rpm: float, queue_depth: float,
                  capacity_rpm: float) -> tuple[int, float, bool]:
    """(replicas, load used, queue dominated) for the current load and backlog."""
    obs = observed_rpm if math.isfinite(observed_rpm) and observed_rpm > 0 else 0.0
    q = queue_depth if math.isfinite(queue_depth) and queue_depth > 0 else 0.0
    drain = cfg.drain_s
    backlog_rpm = q * 60.0 / drain if drain > 0 else 0.0
    load = obs + backlog_rpm
    n = replicas_for(load, capacity_rpm, cfg.reactive_utilisation)
    queue_dominated = backlog_rpm > 0 and n > replicas_for(obs, capacity_rpm, cfg.reactive_utilisation)
    return n, load, queue_dominated


def _smooth(path: tuple[float, ...], k: int) -> tuple[float, ...]:
    if k <= 1:
        return path
    n = len(path)
    out = []
    half = k // 2
    for i in range(n):
        lo, hi = max(0, i - half), min(n, i - half + k)
        seg = path[lo:hi]
        out.append(sum(seg) / len(seg))
    return tuple(out)


def forecast_need(cfg: ScalingConfig, fc: Optional[ForecastInput], now: datetime,
                  capacity_rpm: float) -> tuple[Optional[int], Optional[Reason], float, int]:
    """(replicas or None, why None, peak rpm, minutes from now to the peak).

    The window is the minutes ``now .. now + lead`` (inclusive); a forecast whose
    origin lies ``k`` minutes before ``now`` is read from index ``k``.
    """
    if fc is None:
        return None, Reason(ReasonCode.NO_FORECAST, "no forecast available: reactive scaling only"), 0.0, 0
    if not fc.usable():
        return None, Reason(ReasonCode.NO_FORECAST, f"forecast from {fc.model or 'model'} has non-finite "
                            "or negative values: ignored, reactive scaling only"), 0.0, 0
    if not fc.covers(cfg.quantile):
        return None, Reason(ReasonCode.NO_FORECAST, f"forecast from {fc.model or 'model'} has levels "
                            f"{list(fc.levels)}, not P{cfg.quantile * 100:g}: reactive scaling only"), 0.0, 0
    age_s = (as_utc(now) - as_utc(fc.origin)).total_seconds()
    if age_s > cfg.max_forecast_age_s:
        return None, Reason(ReasonCode.STALE_FORECAST, f"forecast is {age_s / 60:.0f} min old "
                            f"(limit {cfg.max_forecast_age_s / 60:.0f}): reactive scaling only"), 0.0, 0
    offset = fc.offset(now)
    path = planning_path(cfg, fc)
    if offset >= len(path):
        return None, Reason(ReasonCode.STALE_FORECAST, "forecast does not reach the present: reactive only"), 0.0, 0
    peak, at, _ = peak_over_lead(cfg, path, offset)
    return replicas_for(peak, capacity_rpm, cfg.target_utilisation), None, peak, at


def planning_path(cfg: ScalingConfig, fc: ForecastInput) -> tuple[float, ...]:
    """The forecast path the pre-scaler plans on: the configured quantile, smoothed."""
    return _smooth(fc.path(cfg.quantile), cfg.forecast_smoothing_min)


def lead_steps(cfg: ScalingConfig) -> int:
    """Whole minutes of the lead window after the minute planned for."""
    return int(math.ceil(cfg.lead_min - _EPS))


def peak_over_lead(cfg: ScalingConfig, path: tuple[float, ...], offset: int) -> tuple[float, int, bool]:
    """(peak, minutes from ``offset`` to it, window cut by the horizon) over ``path[offset .. offset + lead]``."""
    last = offset + lead_steps(cfg)
    window = path[offset:min(last, len(path) - 1) + 1]
    peak = max(window)
    return peak, window.index(peak), last > len(path) - 1


# --------------------------------------------------------------------------- scale-in order


_REMOVE_ORDER = {
    InstanceState.BOOTING: 0, InstanceState.WAKING: 1, InstanceState.READY_IDLE: 2,
    InstanceState.READY_BUSY: 3, InstanceState.SATURATED: 4, InstanceState.ASLEEP: -1,
}


def scale_in_order(instances: tuple[Instance, ...]) -> tuple[str, ...]:
    """Which instances to remove first: booting (newest first), waking, idle, least loaded busy."""
    def key(i: Instance):
        launched = -as_utc(i.launched_at).timestamp() if i.launched_at is not None else 0.0
        return (_REMOVE_ORDER[i.state], i.load_rpm, launched, i.id)
    return tuple(i.id for i in sorted(instances, key=key))


# --------------------------------------------------------------------------- the decision's stages


@dataclass(frozen=True, slots=True)
class ScaleNeeds:
    """What the current load and the forecast ask for, before stabilisation and guardrails."""

    reactive: int                       # replicas for the load and backlog (``current`` when the load is unknown)
    load_rpm: float                     # the load those replicas serve: current load plus the backlog term
    queue_dominated: bool               # the backlog, not the load, sets ``reactive``
    load_known: bool
    forecast: Optional[int]             # replicas for the forecast peak over the lead window (None: no forecast)
    no_forecast: Optional[Reason]       # why ``forecast`` is None
    peak_rpm: float
    peak_in_min: int
    buffer: int = 0                     # warm-buffer replicas from the forecast's recent errors
    buffer_why: str = ""

    @property
    def raw(self) -> int:
        return self.reactive if self.forecast is None else max(self.reactive, self.forecast)


def scale_needs(cfg: ScalingConfig, now: datetime, current: int, observed_rpm: float, queue_depth: float,
                forecast: Optional[ForecastInput], capacity_rpm: float, errors: Sequence[float] = (),
                adapted: Optional[BufferState] = None) -> ScaleNeeds:
    """The reactive and the forecast need (with a ready warm buffer on top, at the level its
    adaptation reached); an unknown load never asks for scale-in."""
    load_known = math.isfinite(observed_rpm)
    reactive, load, queue_dominated = reactive_need(cfg, observed_rpm, queue_depth, capacity_rpm)
    if not load_known:
        reactive = current
    f_need, no_forecast, peak, peak_at = forecast_need(cfg, forecast, now, capacity_rpm)
    buffer, buffer_why = stage_buffer(cfg, errors, capacity_rpm, adapted) if f_need is not None else (0, "")
    return ScaleNeeds(reactive, load, queue_dominated, load_known, apply_buffer(f_need, buffer, cfg), no_forecast,
                      peak, peak_at, buffer, buffer_why)


def need_reason(cfg: ScalingConfig, needs: ScaleNeeds, capacity_rpm: float, observed_rpm: float,
                queue_depth: float) -> Reason:
    """Why the raw recommendation is what it is: forecast, queue backlog, no forecast, or the load."""
    n, lead = needs.reactive, cfg.lead_min
    if needs.forecast is not None and needs.forecast > n:
        why = Reason(ReasonCode.FORECAST_PRESCALE,
                     f"forecast P{cfg.quantile * 100:.0f} peaks at {_fmt(needs.peak_rpm)} req/min in "
                     f"{needs.peak_in_min} min (lead window {lead:.0f} min); at {_fmt(capacity_rpm)} req/min per "
                     f"replica and {cfg.target_utilisation:.0%} utilisation that needs {needs.forecast}; "
                     f"current load needs {n}")
    elif needs.queue_dominated:
        why = Reason(ReasonCode.QUEUE_BACKLOG,
                     f"load {_fmt(observed_rpm)} req/min plus a backlog of {queue_depth:.0f} queued requests "
                     f"({_fmt(needs.load_rpm)} req/min) needs {n}")
    elif needs.no_forecast is not None:
        why = Reason(needs.no_forecast.code,
                     f"{needs.no_forecast.text}; current load {_fmt(needs.load_rpm)} req/min needs {n}")
    else:
        why = Reason(ReasonCode.REACTIVE_LOAD,
                     f"current load {_fmt(needs.load_rpm)} req/min needs {n} at "
                     f"{cfg.reactive_utilisation:.0%} utilisation; the forecast over the next "
                     f"{lead:.0f} min needs {needs.forecast}")
    if not needs.load_known:
        why = Reason(why.code, why.text + " (current load unknown: no scale-in on it)")
    return why


def scale_action(desired: int, current: int) -> ScaleAction:
    if desired > current:
        return ScaleAction.UP
    if desired < current:
        return ScaleAction.DOWN
    return ScaleAction.HOLD


def hold_reason(cfg: ScalingConfig, needs: ScaleNeeds, current: int) -> Reason:
    """Why nothing changes when no guardrail held the number: the forecast, no forecast, or a match."""
    n, lead = needs.reactive, cfg.lead_min
    if n < current and needs.forecast is not None and needs.forecast >= current:
        return Reason(ReasonCode.FORECAST_BLOCKS_SCALE_IN,
                      f"current load needs only {n}, but the forecast needs {needs.forecast} within "
                      f"the next {lead:.0f} min (a removed replica could not be back in time)")
    if needs.no_forecast is not None:
        return Reason(needs.no_forecast.code, f"{needs.no_forecast.text}; holding {current}: current load needs {n}")
    return Reason(ReasonCode.NO_CHANGE,
                  f"{current} {'replica matches' if current == 1 else 'replicas match'} the "
                  f"need: load needs {n}, forecast over {lead:.0f} min needs {needs.forecast}")


def next_scale_state(cfg: ScalingConfig, state: PolicyState, now: datetime, raw: int,
                     action: ScaleAction) -> PolicyState:
    """The stabilisation history (this tick's raw recommendation added) and the last scale times."""
    window_start = now - timedelta(seconds=cfg.stabilisation_s)
    history = tuple((as_utc(t), r) for t, r in state.history if as_utc(t) > window_start) + ((now, raw),)
    return replace(
        state,
        history=history,
        last_scale_up=now if action is ScaleAction.UP else state.last_scale_up,
        last_scale_down=now if action is ScaleAction.DOWN else state.last_scale_down,
        scale_actions=state.scale_actions + (action is not ScaleAction.HOLD),
    )


def with_tiers(reason: Reason, needs: ScaleNeeds, wake_why: str, shift: str = "") -> Reason:
    """The reason with a detected forecast shift, the warm buffer's and the asleep tier's part
    appended where they acted."""
    extra = [t for t in (shift, needs.buffer_why if needs.buffer > 0 else "", wake_why) if t]
    return Reason(reason.code, "; ".join([reason.text] + extra)) if extra else reason


def decide_scale(cfg: ScalingConfig, now: datetime, instances: tuple[Instance, ...], observed_rpm: float,
                 queue_depth: float, forecast: Optional[ForecastInput], state: PolicyState,
                 capacity_rpm: Optional[float] = None, errors: Sequence[float] = (),
                 error_minutes: Sequence[int] = ()) -> tuple[ScaleDecision, PolicyState]:
    """Needs -> why -> guardrails -> action -> reason -> new state, each a stage above.  Asleep
    instances are not counted as provisioned; a scale-up wakes them before launching.  The warm
    buffer's level adapts to its record's recent misses where ``error_minutes`` date the errors."""
    now = as_utc(now)
    cap = capacity_rpm if capacity_rpm is not None and capacity_rpm > 0 else cfg.capacity_rpm
    instances, asleep = split_asleep(instances)
    current = len(instances)
    adapted = adapt(cfg, state.buffer, error_minutes, errors) if len(error_minutes) == len(errors) else state.buffer
    needs = scale_needs(cfg, now, current, observed_rpm, queue_depth, forecast, cap, errors, adapted)
    raw = needs.raw
    hpa = follow_hpa(cfg, state.hpa, current, observed_rpm, cap)
    guard = hpa.replicas if cfg.reactive_guard is not None else None
    desired, steps, held_by = apply_guardrails(raw, GuardrailContext(cfg, now, current, state, raw, guard))
    action = scale_action(desired, current)
    if held_by is not None:
        reason = held_by
    elif action is ScaleAction.HOLD:
        reason = hold_reason(cfg, needs, current)
    else:
        reason = need_reason(cfg, needs, cap, observed_rpm, queue_depth)
    wake, wake_why = plan_wakes(cfg, asleep, desired - current)
    remove = scale_in_order(instances)[: current - desired] if action is ScaleAction.DOWN else ()
    ready = sum(1 for i in instances if i.state.ready)
    shift = adapted.shift(cfg) if needs.forecast is not None else ""
    return ScaleDecision(current=current, ready=ready, desired=desired, action=action,
                         reason=with_tiers(reason, needs, wake_why, shift), reactive_replicas=needs.reactive,
                         forecast_replicas=needs.forecast, raw=raw, steps=steps, remove=remove, wake=wake,
                         buffer=needs.buffer, asleep=len(asleep), asleep_target=asleep_target(cfg, needs.buffer),
                         shift=shift), replace(next_scale_state(cfg, state, now, raw, action), hpa=hpa, buffer=adapted)
