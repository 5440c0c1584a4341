"""The asleep tier in the fleet simulator (issue 19).

An asleep instance holds its GPU (it costs ``sleep_cost_share`` of a GPU-hour per hour) and
serves nothing; woken, it serves after ``wake_s`` seconds instead of a cold start.  A policy
that exposes ``asleep_target()`` keeps that many asleep: the pool is filled first with
instances a scale-in would have removed (putting a ready instance to sleep is taken as
instant), then with cold launches that go to sleep once booted; a scale-up wakes asleep
instances before launching any.  Wakes shorter than a minute take effect inside the minute
at the log's own resolution.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field


@dataclass
class SleepPool:
    wake_s: float
    boot_minutes: int
    asleep: int = 0
    to_sleep: list[int] = field(default_factory=list)   # ready-minute of each launch that will go to sleep
    wakes: int = 0
    launches: int = 0

    def settle(self, t: int) -> None:
        """Launches for the pool whose cold start has finished go to sleep."""
        done = sum(1 for r in self.to_sleep if r <= t)
        if done:
            self.to_sleep = [r for r in self.to_sleep if r > t]
            self.asleep += done

    def wake(self, n: int) -> int:
        """Wake up to ``n`` asleep instances; how many."""
        w = min(n, self.asleep)
        self.asleep -= w
        self.wakes += w
        return w

    def wake_steps(self, steps_per_minute: int) -> int:
        """Sub-minute steps after which an instance woken at the start of a minute serves."""
        dt = 60.0 / steps_per_minute
        return int(math.ceil(self.wake_s / dt - 1e-9))

    def absorb(self, removed: int, target: int) -> int:
        """Put up to ``removed`` instances that a scale-in drops to sleep (up to the target); how many."""
        room = max(0, target - self.asleep - len(self.to_sleep))
        n = min(removed, room)
        self.asleep += n
        return n

    def fill(self, target: int, t: int) -> None:
        """Release asleep instances over the target, or launch towards it (they sleep once booted)."""
        have = self.asleep + len(self.to_sleep)
        if have > target:
            cut = min(have - target, len(self.to_sleep))
            if cut:
                del self.to_sleep[len(self.to_sleep) - cut:]
            self.asleep -= have - target - cut
        elif have < target:
            n = target - have
            self.launches += n
            if self.boot_minutes <= 0:
                self.asleep += n
            else:
                self.to_sleep.extend([t + self.boot_minutes] * n)

    def held(self, cost_share: float) -> float:
        """GPU-equivalents held by the pool this minute: asleep at their share, booting in full."""
        return self.asleep * cost_share + len(self.to_sleep)
