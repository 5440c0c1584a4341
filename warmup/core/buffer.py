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
from dataclasses import dataclass
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
ADAPT_CATCH_UP = 30   # record minutes kept beyond the window, so the adaptation catches up after missed ticks
SHIFT_WINDOW = 30     # the adaptation's recent outcomes kept, and the span a shift is judged on
SHIFT_FACTOR = 3.0    # a shift: misses over SHIFT_WINDOW at this multiple of the nominal miss rate (and >= 3)


@dataclass(frozen=True, slots=True)
class BufferState:
    """The warm buffer's adaptation (adaptive conformal inference, Gibbs and Candes 2021): the miss
    rate aimed at, ``alpha``, moves after every minute by ``buffer_adapt * (nominal - missed)``, so
    a run of minutes above the planned level raises the level the buffer covers and a run below
    lowers it.  Their theorem: over any T minutes the miss rate is within
    ``(max(a1, 1 - a1) + gamma) / (gamma T)`` of nominal where the buffer at alpha <= 0 covers every
    error; here it covers the window's largest (a finite buffer), and alpha is kept >= -nominal so a
    long shift does not leave the buffer at its largest for longer than 1/gamma minutes after it."""

    alpha: Optional[float] = None      # None: not started (the nominal 1 - buffer_level)
    through: int = -1                  # minute key of the newest error counted
    outcomes: tuple[bool, ...] = ()    # the last SHIFT_WINDOW minutes counted: True where missed

    def level(self, cfg: ScalingConfig) -> float:
        """The level of the recent errors the buffer covers now (0.5 .. 1; 1 is the window's largest)."""
        nominal = float(cfg.buffer_level or 0.0)
        if cfg.buffer_adapt is None or self.alpha is None:
            return nominal
        return min(1.0, max(0.5, 1.0 - self.alpha))

    def misses(self) -> int:
        return sum(self.outcomes)

    def shift(self, cfg: ScalingConfig) -> str:
        """The evidence of a level shift the forecast missed ("" : none seen)."""
        n, k = len(self.outcomes), self.misses()
        nominal = 1.0 - float(cfg.buffer_level or 0.0)
        if n < 10 or k < 3 or k < SHIFT_FACTOR * nominal * n:
            return ""
        return (f"forecast shift: load above the planned level in {k} of the last {n} minutes "
                f"(nominal {nominal:.0%}); warm buffer raised to P{self.level(cfg) * 100:.3g} of its errors")

    def evidence(self, cfg: ScalingConfig) -> str:
        return (f"adaptive, nominal P{float(cfg.buffer_level or 0) * 100:g}: above the planned level in "
                f"{self.misses()} of the last {len(self.outcomes)} minutes")


def adapt(cfg: ScalingConfig, st: BufferState, keys: Sequence[int], errors: Sequence[float]) -> BufferState:
    """The adaptation after every minute of the record newer than ``st.through``: was its error
    above the buffer the tick before it sized (from the window of errors before it, at the level
    then)?  Pure: the simulator and the live tick call it on their own records."""
    if cfg.buffer_level is None or cfg.buffer_adapt is None or not keys:
        return st
    nominal = 1.0 - cfg.buffer_level
    a = nominal if st.alpha is None else st.alpha
    outcomes, through = list(st.outcomes), st.through
    for i, k in enumerate(keys):
        if k <= st.through:
            continue
        through = k
        before = [e for e in errors[max(0, i - cfg.buffer_window_min):i] if math.isfinite(e)]
        if len(before) < min(10, cfg.buffer_window_min) or not math.isfinite(errors[i]):
            continue
        missed = errors[i] > max(0.0, quantile(before, BufferState(a).level(cfg)))
        a = max(-nominal, a + cfg.buffer_adapt * (nominal - missed))
        outcomes.append(missed)
    return BufferState(a, through, tuple(outcomes[-SHIFT_WINDOW:]))


def minute_key(t: datetime) -> int:
    """A minute as whole minutes since the epoch (UTC): the key of the error record on both sides."""
    return int(as_utc(t).timestamp() // 60)


def lead_error_record(cfg: ScalingConfig, planned: Mapping[int, float], actual: Mapping[int, float],
                      now: datetime) -> tuple[tuple[int, ...], tuple[float, ...]]:
    """(minute keys, errors), oldest first: for each whole minute before ``now`` (newest first, at most
    the last ``buffer_window_min + ADAPT_CATCH_UP`` with both sides), its recorded load less the planned
    quantile's forecast for it made ``buffer_lead_min`` before.  ``planned`` and ``actual`` are keyed by
    :func:`minute_key`.  The simulator and the live tick both call this, on their own records."""
    if cfg.buffer_level is None:
        return (), ()
    m = minute_key(now) - 1
    keys: list[int] = []
    out: list[float] = []
    for k in range(m, m - LOOKBACK_WINDOWS * cfg.buffer_window_min, -1):
        a, f = actual.get(k), planned.get(k)
        if a is not None and f is not None and math.isfinite(a) and math.isfinite(f):
            keys.append(k)
            out.append(a - f)
            if len(out) >= cfg.buffer_window_min + ADAPT_CATCH_UP:
                break
    return tuple(reversed(keys)), tuple(reversed(out))


def stage_buffer(cfg: ScalingConfig, errors: Sequence[float], capacity_rpm: float,
                 adapted: Optional[BufferState] = None) -> tuple[int, str]:
    """(buffer replicas, why) from the last ``buffer_window_min`` short-lead errors, at the level
    the adaptation has reached (``adapted``; None: the configured ``buffer_level``)."""
    if cfg.buffer_level is None:
        return 0, ""
    recent = [e for e in errors[-cfg.buffer_window_min:] if math.isfinite(e)]
    if len(recent) < min(10, cfg.buffer_window_min):
        return 0, f"warm buffer off: {len(recent)} recent forecast errors are too few to size it"
    level = cfg.buffer_level if adapted is None else adapted.level(cfg)
    gap = quantile(recent, level)
    tag = (f"P{level * 100:.3g} of the last {len(recent)} lead-{cfg.buffer_lead_min} forecast "
           f"errors is {gap:+,.0f} req/min")
    if adapted is not None and cfg.buffer_adapt is not None:
        tag += f" ({adapted.evidence(cfg)})"
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
