"""Arrivals counted from per-instance readings, surviving the fleet changing under them (pure).

A fleet-wide sum of finished-request counters is wrong whenever the set of answering instances
changes: a scale-in or a failed scrape reads as a drop, the instance coming back as a spike, a
saturated fleet finishes no more than its capacity, and warmcast's own warmup requests count as
traffic.  Here each instance is counted on its own, between two of its own readings:

    arrivals = finished delta + (running + waiting now - running + waiting then) - warmups done

The finished counter is reset-aware as Prometheus' ``increase()`` is: a counter lower than its
previous reading restarted at zero, so its whole value is the delta (and what was in flight
before the restart was already counted when it arrived).  An instance that does not answer keeps
its last reading, so its next answer counts the whole gap: nothing is lost, and the minutes of the
gap are marked incomplete (``coverage`` < 1) rather than zero.  While warmcast warms an instance
its span is held the same way, and counted, less the warmup requests the instance completed,
once the warmup run has recorded them.  Completed, not sent: a warmup request cancelled at the
run's deadline never reaches the finished counter (vLLM counts only requests that end with a
finish reason), so what it added to running/waiting and took away again already nets to zero.
"""
from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

import numpy as np


WARMING = "being warmed: counted when the run ends"


@dataclass(frozen=True)
class InstanceReading:
    """One instance's numbers at ``ts``: its cumulative finished-requests counter, what it runs
    and queues now, and the cumulative warmup requests of warmcast's it had completed by then."""

    ts: float
    finished: float
    running: float = 0.0
    waiting: float = 0.0
    warmup_done: float = 0.0

    @property
    def in_flight(self) -> float:
        return self.running + self.waiting


@dataclass(frozen=True)
class Span:
    """Arrivals of one instance between two of its readings (``start`` None: since it started)."""

    instance: str
    start: float | None
    end: float
    arrivals: float
    reason: str


@dataclass(frozen=True)
class Count:
    """One counting round: the spans counted, the instances that did not answer (or are being
    warmed) with why, and the readings to pass as ``prev`` next round."""

    spans: tuple[Span, ...]
    uncounted: Mapping[str, str]
    expected: int
    carry: Mapping[str, InstanceReading] = field(default_factory=dict)

    @property
    def missed(self) -> int:
        """Instances whose numbers this round are unknown (an instance being warmed is not: its
        span is exact, only held until the run's completed warmups are known)."""
        return sum(1 for why in self.uncounted.values() if why != WARMING)

    @property
    def coverage(self) -> float:
        """Share of the expected instances whose numbers this round are known."""
        return 1.0 if self.expected == 0 else 1.0 - self.missed / self.expected

    @property
    def held_since(self) -> float | None:
        """The oldest reading an uncounted instance is held at: minutes from there on may still
        receive that instance's arrivals (None: nothing held)."""
        held = [self.carry[i].ts for i in self.uncounted if i in self.carry]
        return min(held) if held else None

    @property
    def arrivals(self) -> float:
        return float(sum(s.arrivals for s in self.spans))


def count(prev: Mapping[str, InstanceReading] | None, current: Mapping[str, InstanceReading | None],
          warming: Collection[str] = ()) -> Count:
    """Count one round.  ``current``: every instance the scaler runs now (None: its scrape failed);
    an instance of ``prev`` absent from it has left (not a drop).  ``prev`` None: the first round
    ever, which only sets the baseline (counters already there are history, not this minute's)."""
    carry: dict[str, InstanceReading] = {}
    spans: list[Span] = []
    uncounted: dict[str, str] = {}
    for inst, cur in sorted(current.items()):
        before = (prev or {}).get(inst)
        if cur is None or inst in warming:
            uncounted[inst] = "scrape failed" if cur is None else WARMING
            if before is not None:
                carry[inst] = before
            continue
        carry[inst] = cur
        if prev is None:
            uncounted[inst] = "first reading: baseline only"
            continue
        spans.append(_span(inst, before, cur))
    return Count(tuple(spans), uncounted, len(current), carry)


def _span(inst: str, before: InstanceReading | None, cur: InstanceReading) -> Span:
    ours = cur.warmup_done - (before.warmup_done if before else 0.0)
    if before is None:  # joined since the last round: its counters started at zero
        return Span(inst, None, cur.ts, max(0.0, cur.finished + cur.in_flight - ours), "joined")
    if cur.finished < before.finished:  # restarted: increase() semantics
        return Span(inst, before.ts, cur.ts, max(0.0, cur.finished + cur.in_flight - ours), "counter reset")
    arrivals = cur.finished - before.finished + cur.in_flight - before.in_flight - ours
    return Span(inst, before.ts, cur.ts, max(0.0, arrivals), "counted")


def by_minute(spans: Collection[Span], default_start: float) -> dict[int, float]:
    """Arrivals per epoch minute, each span's spread over the minutes it covers in proportion to
    their overlap (a span with no start, an instance that joined, is spread from ``default_start``)."""
    out: dict[int, float] = {}
    for s in spans:
        start = s.start if s.start is not None else min(default_start, s.end)
        if s.end <= start:
            out[int(s.end // 60)] = out.get(int(s.end // 60), 0.0) + s.arrivals
            continue
        edges = np.unique(np.r_[start, np.arange(np.floor(start / 60) * 60 + 60, s.end, 60.0), s.end])
        widths = np.diff(edges)
        for lo, w in zip(edges[:-1], widths):
            m = int(lo // 60)
            out[m] = out.get(m, 0.0) + s.arrivals * float(w) / float(s.end - start)
    return out

