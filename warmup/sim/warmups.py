"""What warmups cost the simulated fleet: requests taken from serving capacity, as a live fleet pays them.

The live sender (``workers.actuation.send_live_warmup``) warms a target only once it answers
/health and only within the warmup's duration.  So a ready target is warmed at once, a booting one
in the minute it becomes ready, and one still booting at the deadline never.  The simulator (the
predictive policy) and the replay of the workers' tick (``workers.replay``) both charge warmups
through this one rule.  Charging a warmup sent to booting instances to the ready fleet at once made
the tuned predictive policy later than the reactive one on a x3 shift (three warmups: 2.5859% vs
2.5687% late; with warmups off the two were equal).
"""
from __future__ import annotations

import math
import re
from typing import Mapping, Sequence

# the simulator's instance ids: r<i> ready, b<i> booting; with profile pools <profile>-r<i>, <profile>-b<i>
_ID = re.compile(r"^(?:(.+)-)?([rb])(\d+)$")


class WarmupCharges:
    """Warmups started, and the requests they take in each minute once their targets are ready."""

    def __init__(self) -> None:
        self.started: dict[int, tuple[float, tuple[str, ...], int]] = {}
        self.load: dict[int, float] = {}

    def start(self, t: int, requests_per_instance: float, targets: Sequence[str], duration_s: float) -> None:
        self.started[t] = (float(requests_per_instance), tuple(targets), max(1, math.ceil(duration_s / 60.0 - 1e-9)))

    def take(self, t: int, booting: Sequence[int] | Mapping[str, Sequence[int]] = ()) -> float:
        """Requests warmups take in minute ``t``; called once a minute after the minute's launches,
        ``booting`` the booting instances' ready minutes in launch order (``b<i>`` is the i-th), or
        with profile pools those of each profile (``<profile>-b<i>``: the i-th of that profile's)."""
        started = self.started.pop(t, None)
        if started is not None:
            per, targets, minutes = started
            for tid in targets:
                m = _ID.search(tid)
                if m is None:
                    continue
                pool = booting.get(m.group(1) or "", ()) if isinstance(booting, Mapping) else booting
                i = int(m.group(3))
                at = t if m.group(2) == "r" else (pool[i] if i < len(pool) else None)
                if at is not None and at < t + minutes:
                    self.load[at] = self.load.get(at, 0.0) + per
        return self.load.pop(t, 0.0)
