"""What the core is told each tick: the instances, the load, the forecast.

Everything here is an immutable value: the core never reads a clock, a file or a
socket; ``now`` arrives in :class:`TickInput`.  Times are ``datetime`` values.
Naive datetimes are read as UTC; aware ones are converted, so callers may mix the two.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timezone
from enum import Enum
from typing import Optional, Sequence, TypeVar

V = TypeVar("V")


def first_value(pairs: tuple[tuple[str, V], ...], key: str, default: V) -> V:
    """The value paired with ``key`` (the first such pair), else ``default``: the core keeps
    name -> value maps as tuples of pairs so that its values stay hashable and frozen."""
    return next((v for k, v in pairs if k == key), default)


def as_utc(t: datetime) -> datetime:
    """A tz-aware UTC copy of ``t`` (naive values are taken to be UTC already)."""
    if t.tzinfo is None:
        return t.replace(tzinfo=timezone.utc)
    return t.astimezone(timezone.utc)


class InstanceState(str, Enum):
    BOOTING = "booting"          # launched, loading weights / compiling; serves nothing
    WAKING = "waking"            # waking from sleep mode; serves nothing yet
    ASLEEP = "asleep"            # in sleep mode: holds its GPU, serves nothing, wakes in ``wake_s``
    READY_IDLE = "ready_idle"    # serving, no real traffic right now
    READY_BUSY = "ready_busy"    # serving real traffic with room to spare
    SATURATED = "saturated"      # serving at its limit (running == max-num-seqs or queue building)

    @property
    def ready(self) -> bool:
        return self in (InstanceState.READY_IDLE, InstanceState.READY_BUSY, InstanceState.SATURATED)


def level_value(levels: Sequence[float], values: Sequence[float], q: float) -> float:
    """The value at level ``q`` from values at ascending ``levels``: linear between the two around it,
    as :meth:`ForecastInput.path` reads a path (one arithmetic, so both sides of the record agree)."""
    if q in levels:
        return float(values[list(levels).index(q)])
    if not levels[0] <= q <= levels[-1]:
        raise ValueError(f"level {q} is outside the stored levels {list(levels)}")
    j = next(i for i in range(1, len(levels)) if levels[i] >= q)
    lo, hi = levels[j - 1], levels[j]
    w = 0.0 if hi == lo else (q - lo) / (hi - lo)
    return float(values[j - 1] + w * (values[j] - values[j - 1]))



@dataclass(frozen=True, slots=True)
class Instance:
    id: str
    state: InstanceState
    profile: str = ""
    load_rpm: float = 0.0             # real requests/min it serves now
    warmed: bool = False              # has it had its warmup already?
    launched_at: Optional[datetime] = None


@dataclass(frozen=True, slots=True)
class ForecastInput:
    """Forecast of requests/min per minute starting at ``origin`` (lead 1 = origin).

    ``levels`` are the quantile levels, ``values[i]`` the path for ``levels[i]``.
    ``extra`` carries optional other forecast signals as (name, path) pairs, for
    example ``("long_context_share", (...))`` for the context-length mix.
    """

    origin: datetime
    levels: tuple[float, ...]
    values: tuple[tuple[float, ...], ...]
    model: str = ""
    extra: tuple[tuple[str, tuple[float, ...]], ...] = ()

    def __post_init__(self) -> None:
        if len(self.levels) != len(self.values) or not self.levels:
            raise ValueError("forecast needs one path per quantile level and at least one level")
        n = {len(v) for v in self.values}
        if len(n) != 1:
            raise ValueError("forecast paths differ in length")
        if list(self.levels) != sorted(self.levels):
            raise ValueError("forecast levels must be ascending")

    @property
    def horizon(self) -> int:
        return len(self.values[0])

    def covers(self, q: float) -> bool:
        """Is level q stored, or between two stored levels?"""
        return self.levels[0] <= q <= self.levels[-1]

    def path(self, q: float) -> tuple[float, ...]:
        """The path at level q: a stored level exactly, else linearly interpolated between the
        stored levels around it.  A level outside the stored ones is refused (ValueError), never
        clamped to the nearest: a P95 policy must not run on a P90 path."""
        if not self.covers(q):
            raise ValueError(f"forecast {self.model or ''} has levels {list(self.levels)}: level {q} is outside them")
        if q in self.levels:
            return self.values[self.levels.index(q)]
        return tuple(level_value(self.levels, col, q) for col in zip(*self.values))

    def usable(self) -> bool:
        """All values finite and non-negative (a broken forecast must not drive scaling)."""
        return all(math.isfinite(v) and v >= 0 for path in self.values for v in path)

    def offset(self, now: datetime) -> int:
        """The index of ``now``'s minute in the paths: whole minutes since the origin (a tiny
        tolerance keeps a float just under a minute boundary on it), never negative."""
        age_min = (as_utc(now) - as_utc(self.origin)).total_seconds() / 60.0
        return max(0, int(math.floor(age_min + 1e-9)))

    def extra_path(self, name: str) -> Optional[tuple[float, ...]]:
        return first_value(self.extra, name, None)


@dataclass(frozen=True, slots=True)
class MixAsk:
    """What the live context mix asks for now (``mix_trigger.decide_mix``): ``profile`` ("" =
    nothing, the clock decides) and why."""

    profile: str
    why: str
    share_now: Optional[float] = None


@dataclass(frozen=True, slots=True)
class TickInput:
    now: datetime
    instances: tuple[Instance, ...]
    observed_rpm: float                       # arrivals per minute over the last minute
    queue_depth: float = 0.0                  # requests waiting (all instances)
    p99_latency_s: Optional[float] = None     # recent P99 latency (None: unknown)
    forecast: Optional[ForecastInput] = None
    active_profile: str = ""
    recent_errors: tuple[float, ...] = ()     # actual minus planned-quantile forecast at the buffer's short
    #                                           lead, req/min, oldest first (warmup/core/buffer.py)
    error_minutes: tuple[int, ...] = ()       # their minutes (buffer.minute_key); () : the buffer does not adapt
    ready_by_profile: tuple[tuple[str, int], ...] = ()   # () : counted from the instances' profiles
    mix: Optional[MixAsk] = None            # what the live context mix asks for (None: not configured)
    p99_by_profile: tuple[tuple[str, float], ...] = ()   # each profile's own instances' P99 (() : unknown)
