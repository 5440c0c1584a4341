"""What the fleet model's instances would show a scrape: per-instance /metrics-shaped readings (pure).

Live, arrivals are never read from a log: the scrape reads each vLLM instance's cumulative
finished-requests counter and its waiting and running gauges every round (10 s) and counts the
arrivals between two of an instance's own readings (``warmup.actuators.arrivals``).  The replay
(``--scrape-rounds``) and ``run --simulate``'s fleet count them the same way (issue 42), from the
readings this module keeps for the fluid model's instances (the replay's from each served minute,
:class:`MinuteTrace`; the simulated fleet's step by step):

- the minute's arrivals reach its ready instances in equal shares (round robin);
- the fleet's FIFO backlog is shown as waiting, in equal shares where it can be, on the instances
  that were routed those requests: an instance never shows more waiting than it was routed and has not
  finished, so its finished counter only grows (a vLLM counter does; a lower reading would be read as
  a restart), and what no instance can show waits at the router, unseen;
- an instance's finished counter is what it was routed less what it shows waiting.

An instance's finished counter and waiting gauge then always add up to what it was routed, so a
round counts exactly the arrivals between two rounds, as a scrape of instances that never fail
would; the one thing left for the replay to show is *when* a round is counted against the tick.
Requests that arrive while no instance is ready reach no instance's counters, as live.
Within a step of the log, arrivals and the backlog move linearly (the fluid model's own rule).
"""
from __future__ import annotations

from dataclasses import dataclass, field

SCRAPE_EVERY_S = 10.0   # the live scrape's round (WorkerOptions.scrape_every_s's default)


@dataclass(frozen=True)
class MinuteTrace:
    """One served minute of the fluid model: the backlog at its start, the arrivals of each step, the
    backlog after each step, and the instances that served it per pool (``(pool, ready)``)."""

    t: int
    q0: float
    arrivals: tuple[float, ...]
    queue: tuple[float, ...]
    ready: tuple[tuple[str, int], ...]


def ready_ids(ready: tuple[tuple[str, int], ...]) -> list[str]:
    """The ready instances' ids, as the replay's fleet names them (``r<i>``; ``<pool>-r<i>`` with profiles)."""
    return [f"{pool}-r{i}" if pool else f"r{i}" for pool, n in ready for i in range(n)]


def _at(trace: MinuteTrace, offset_s: float) -> tuple[float, float]:
    """(arrivals since the minute began, backlog) ``offset_s`` into the minute, linear within a step."""
    k = len(trace.arrivals)
    dt = 60.0 / k
    done, q_before = 0.0, trace.q0
    for j in range(k):
        end = (j + 1) * dt
        if offset_s < end - 1e-9:
            share = (offset_s - j * dt) / dt
            return done + share * trace.arrivals[j], q_before + share * (trace.queue[j] - q_before)
        done, q_before = done + trace.arrivals[j], trace.queue[j]
    return done, trace.queue[-1]


@dataclass
class Meter:
    """Each ready instance's counters across minutes: requests routed to it, its finished counter and
    what it shows waiting."""

    routed: dict[str, float] = field(default_factory=dict)
    finished: dict[str, float] = field(default_factory=dict)
    waiting: dict[str, float] = field(default_factory=dict)
    read: bool = False   # whether a round was read yet

    def rounds(self, trace: MinuteTrace, start_s: float,
               every_s: float = SCRAPE_EVERY_S) -> list[tuple[float, dict[str, dict[str, float]]]]:
        """The readings of every scrape round inside the minute that began at ``start_s`` (epoch
        seconds), its last round at the minute's end: ``[(ts, {id: {finished, running, waiting}})]``;
        the first minute metered has one more at its start."""
        ids = ready_ids(trace.ready)
        out, seen = [], 0.0
        n_rounds = max(1, int(round(60.0 / every_s)))
        # the first minute metered opens with a round at its start: the live scrape's first round only
        # sets the baseline, and it ran before the replay's first minute
        first = [] if self.read else [0.0]
        self.read = True
        for offset in first + [60.0 * r / n_rounds for r in range(1, n_rounds + 1)]:
            cum, q = _at(trace, offset)
            self.serve(ids, cum - seen, q)
            out.append((start_s + offset, self.readings()))
            seen = cum
        return out

    def serve(self, ids: list[str], arrived: float, q: float) -> None:
        """One interval: ``arrived`` requests routed to the ready instances ``ids`` (the others have
        left: their counters go), ``q`` the fleet's backlog at its end."""
        for gone in [i for i in self.routed if i not in ids]:
            del self.routed[gone]
            self.finished.pop(gone, None)
            self.waiting.pop(gone, None)
        for i in ids:   # with none ready, the interval's arrivals reach no counter
            self.routed[i] = self.routed.get(i, 0.0) + arrived / len(ids)
        self.waiting = fill(q, {i: self.routed[i] - self.finished.get(i, 0.0) for i in ids})
        for i in ids:
            self.finished[i] = self.routed[i] - self.waiting[i]

    def readings(self) -> dict[str, dict[str, float]]:
        """What each ready instance's /metrics shows now."""
        return {i: {"finished": self.finished[i], "running": 0.0, "waiting": self.waiting[i]} for i in self.routed}


def fill(q: float, caps: dict[str, float]) -> dict[str, float]:
    """``q`` spread in equal shares over ``caps``' keys, none above its cap (water filling); what
    does not fit is left out."""
    out, left = {}, q
    order = sorted(caps, key=lambda i: caps[i])
    for k, i in enumerate(order):
        share = min(max(caps[i], 0.0), left / (len(order) - k))
        out[i] = share
        left -= share
    return out
