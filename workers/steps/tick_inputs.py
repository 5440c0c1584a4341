"""What one tick reads, gathered before the core decides: the edge that turns Redis and the fleet
into a :class:`warmup.core.TickInput`.

- signals: the stored live signals (instances with state and profile, queue, P99), read again
  when older than ``signals_max_age_s`` at the tick's ``now``;
- load: the arrivals of the last whole minute: the signals' own count of it, else what the scrape
  rounds counted for it (scaled to the minute when its last round is not counted yet), else the load
  store (ingest, or the replay), else the signals' rate, and which it was;
- forecast: the stored forecast document, and its planned-quantile values at the buffer's lead
  recorded by the minute they are for (``<prefix>:fc-lead:<dep>``), so that later ticks can score it;
- recent errors: that record against the recorded arrivals, by the core's rule
  (:func:`warmup.core.buffer.lead_error_record`, which the simulator calls on its own record too);
- ready replicas per profile as the scaler sees them, and what the live context mix asks for.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, Optional

from warmup.core import CoreConfig, ForecastInput, Instance, TickInput
from warmup.core.buffer import LOOKBACK_WINDOWS, lead_error_record, minute_key
from warmup.core.inputs import level_value
from warmup.core.lead import Lead
from warmup.core.mix_trigger import MixAsk
from warmcast.errors import NotFoundError
from workers.context import Ctx
from workers.steps import forecast, signals

MIN_COUNTED_S = 20.0   # a minute counted for less than this is read as it stands, not scaled up


@dataclass(frozen=True)
class Gathered:
    """Everything the tick read, before the policy lease: the core's inputs and their sources."""

    now: datetime
    cfg: CoreConfig
    lead: Lead
    sig: dict[str, Any]
    instances: tuple[Instance, ...]
    queue: float
    p99_s: Optional[float]
    fdoc: Optional[dict[str, Any]]
    fc: Optional[ForecastInput]
    load_rpm: float
    load_source: str
    errors: tuple[float, ...]
    error_minutes: tuple[int, ...]
    ready: Optional[dict[str, int]]
    mix: Optional[MixAsk]

    def tick_input(self, active_profile: str, manual: bool) -> TickInput:
        """The core's input; a manual profile request wins over the live mix."""
        return TickInput(now=self.now, instances=self.instances, observed_rpm=self.load_rpm,
                         queue_depth=self.queue, p99_latency_s=self.p99_s, forecast=self.fc, active_profile=active_profile, recent_errors=self.errors,
                         error_minutes=self.error_minutes,
                         ready_by_profile=tuple(sorted(self.ready.items())) if self.ready is not None else (),
                         mix=None if manual else self.mix,
                         p99_by_profile=tuple(sorted((str(k), float(v)) for k, v in
                                                     (self.sig.get("p99_by_profile") or {}).items())))


def gather(ctx: Ctx, dep: str, now: datetime) -> Gathered:
    """Read every input of one tick at ``now`` (signals first, then the forecast, then the rest)."""
    from workers.steps.switch_inputs import live_mix, ready_by_profile, with_prewarm_lead

    sig = signals.latest(ctx, dep, now.timestamp())
    insts, queue = signals.instances_of(sig), signals.value(sig, "queue_depth", 0.0)
    p99 = None if sig.get("p99_s") is None else signals.value(sig, "p99_s")
    scraped = (signals.value(sig, "observed_rpm", math.nan), sig.get("observed_minute"), sig.get("source", "?"))
    fdoc, fc = forecast.stored(ctx, dep)
    cfg, used = with_prewarm_lead(ctx, dep)
    load, source = last_minute_load(ctx, dep, now, *scraped)
    minutes, errors = recent_errors(ctx, dep, cfg, now)
    return Gathered(now, cfg, used, sig, insts, queue, p99, fdoc, fc, load, source, errors, minutes,
                    ready_by_profile(ctx, dep), live_mix(ctx, dep, now))


def last_minute_load(ctx: Ctx, dep: str, now: datetime, rate: float, minute: Optional[int],
                     source: str) -> tuple[float, str]:
    """(requests in the last whole minute, where it came from), as the simulator sees the minute before:
    the signals' own count when it is that minute's (the simulated fleet), else the arrivals the scrape
    rounds counted for it, else the load store (ingest, or the replay), else the signals' rate."""
    last = minute_key(now) - 1
    if minute == last:
        return rate, "the signals' count of the last whole minute"
    pipe = ctx.r.pipeline(transaction=False)
    pipe.hget(f"{ctx.prefix}:arrivals:{dep}", str(last))
    pipe.get(f"{ctx.prefix}:arrivals-until:{dep}")
    pipe.get(f"{ctx.prefix}:arrivals-since:{dep}")
    counted, until, since = pipe.execute()
    if counted is not None:
        return counted_load(float(counted), last, None if until is None else float(until),
                            None if since is None else float(since))
    t = _naive(now).replace(second=0, microsecond=0) - timedelta(minutes=1)
    try:
        s = ctx.store.series(dep, "requests", start=t, end=t + timedelta(minutes=1))
    except NotFoundError:
        s = None
    if s is not None and len(s) and math.isfinite(float(s.iloc[0])):
        return float(s.iloc[0]), "recorded arrivals of the last whole minute"
    return rate, f"live signals' rate ({source})"


def counted_load(counted: float, minute: int, until: Optional[float],
                 since: Optional[float] = None) -> tuple[float, str]:
    """The arrivals the scrape rounds counted for ``minute`` (epoch minutes), scaled to the whole minute
    when they cover only part of it: its last round not counted yet (``until``: the instant the rounds
    counted up to), or its first round ever inside it (``since``: counting began there).  The slot's
    tick and its scrape are sent together and the tick may run first; read as it stands, the minute
    would then be short by the part after the last round (a sixth at 10 s rounds)."""
    start = 60.0 * minute
    end = start + 60.0 if until is None else min(start + 60.0, until)
    seen = end - max(start, since if since is not None else start)
    if seen >= 60.0 - 1e-6:
        return counted, "arrivals counted for the last whole minute"
    if seen < MIN_COUNTED_S:
        return counted, f"arrivals counted for {max(seen, 0.0):.0f} s of the last minute (too little to scale)"
    return counted * 60.0 / seen, f"arrivals counted for {seen:.0f} s of the last minute, scaled to the minute"


def recent_errors(ctx: Ctx, dep: str, cfg: CoreConfig, now: datetime) -> tuple[tuple[int, ...], tuple[float, ...]]:
    """The warm buffer's recent forecast errors and their minutes: the stored record against the
    recorded arrivals."""
    sc = cfg.scaling
    if sc.buffer_level is None:
        return (), ()
    span = LOOKBACK_WINDOWS * sc.buffer_window_min
    end = _naive(now).replace(second=0, microsecond=0)
    try:
        s = ctx.store.series(dep, "requests", start=end - timedelta(minutes=span), end=end)
    except NotFoundError:
        return (), ()
    actual = {minute_key(t.to_pydatetime()): float(v) for t, v in s.items() if math.isfinite(float(v))}
    first = minute_key(end) - span
    raw = ctx.r.hmget(_record_key(ctx, dep), [str(first + k) for k in range(span)])
    planned = {}
    for k, v in enumerate(raw):
        if v is not None:
            levels, values = json.loads(v)
            if levels[0] <= sc.quantile <= levels[-1]:
                planned[first + k] = level_value(levels, values, sc.quantile)
    return lead_error_record(sc, planned, actual, now)


def record_forecast(pipe: Any, ctx: Ctx, dep: str, cfg: CoreConfig, fc: Optional[ForecastInput]) -> None:
    """Queue, on ``pipe``, the forecast's values at the buffer's lead (all levels) under the minute
    they are for; an older value for that minute is kept (the earliest forecast is the one made
    ``buffer_lead_min`` before it).  Old minutes leave with the key's expiry."""
    sc = cfg.scaling
    lead_min = int(sc.buffer_lead_min)
    if sc.buffer_level is None or fc is None or lead_min >= fc.horizon or not fc.usable():
        return
    key = _record_key(ctx, dep)
    at = [path[lead_min] for path in fc.values]
    pipe.hsetnx(key, str(minute_key(fc.origin) + lead_min), json.dumps([list(fc.levels), at]))
    pipe.expire(key, int((LOOKBACK_WINDOWS * sc.buffer_window_min + lead_min + 60) * 60))


def _record_key(ctx: Ctx, dep: str) -> str:
    return f"{ctx.prefix}:fc-lead:{dep}"


def _naive(t: datetime) -> datetime:
    """UTC without tzinfo: the load store's index is naive UTC."""
    return t.astimezone(timezone.utc).replace(tzinfo=None) if t.tzinfo else t
