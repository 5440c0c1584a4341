"""Stable names for a pool's instances, for the replay's signals (issue 42).

The fleet model counts instances (``Pool``: a ready count, the ready-minute of each booting one in
launch order), and the simulator names them by position (``r<i>``, ``b<i>``): the booting ``b0`` of
one minute is ``r3`` the next.  The live loop measures its lead from launches it saw: an instance
seen booting under one id and later ready under the same id (``workers/lead.py``).  A ledger
follows each instance from launch to removal under one id (``<prefix>i<n>``) and its launch time,
by the fleet model's own order of events between two looks: launches join the end of the booting
list, scale-in cancels the newest booting ones first and then ready ones, booting ones whose
ready-minute has come turn ready in launch order, and a woken instance turns ready unbooted.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Sequence


@dataclass
class Ledger:
    prefix: str = ""
    ready: list[str] = field(default_factory=list)              # ids of the ready instances
    booting: list[tuple[str, int, Optional[float]]] = field(default_factory=list)  # (id, ready-minute, launched at)
    serial: int = 0

    def _next(self) -> str:
        self.serial += 1
        return f"{self.prefix}i{self.serial - 1}"

    def update(self, ready: int, booting: Sequence[int], t: int, launched_at: Optional[float]) -> None:
        """The pool as it is at the start of minute ``t`` (``ready`` instances, ``booting`` their
        ready-minutes in launch order); instances new since the last look were launched at
        ``launched_at`` (the minute of that look, whose decision launched them)."""
        booting = list(booting)
        kept = self.booting[:self._kept(booting, t)]
        self.ready += [iid for iid, at, _ in kept if at <= t]
        still = [e for e in kept if e[1] > t]
        self.booting = still + [(self._next(), at, launched_at) for at in booting[len(still):]]
        del self.ready[max(0, ready):]        # ready ones removed (scale-in, or put to sleep)
        while len(self.ready) < ready:        # ready ones that never booted here: woken, or there at the start
            self.ready.append(self._next())

    def _kept(self, booting: list[int], t: int) -> int:
        """How many of the booting list's oldest survived since the last look: the most for which
        the ones still booting are the head of ``booting`` (a scale-in that cut the rest launched
        nothing in the same decision)."""
        for k in range(len(self.booting), -1, -1):
            still = [at for _, at, _ in self.booting[:k] if at > t]
            if booting[:len(still)] == still and (k == len(self.booting) or len(booting) == len(still)):
                return k
        return 0

    def position(self, iid: str) -> Optional[str]:
        """The simulator's positional id of ``iid`` (``b<i>`` for the i-th booting, ``r0`` for any
        ready one: the warmup charge rule reads only which), or None when it is not in this pool."""
        for i, (bid, _, _) in enumerate(self.booting):
            if bid == iid:
                return f"{self.prefix}b{i}"
        return f"{self.prefix}r0" if iid in self.ready else None
