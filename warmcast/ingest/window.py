"""Which times may be stored: the one rule shared by log ingest and every store write.

A time later than now + 1 day is a clock or parsing error, and one such row used to
become the newest stored day, from which retention counted back and deleted the real
history.  A time more than ``retention_days`` before the newest accepted one (stored or
arriving) is what retention would delete at once.  A time before 1970 is no request log
warmcast can have seen.  Refused rows are never stored, so retention never counts from
them.  Retention works in whole UTC days, so the cut-off here is the same day boundary.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import pandas as pd

from warmcast.errors import InputError

NS_PER_MIN = 60_000_000_000
NS_PER_DAY = 1440 * NS_PER_MIN
FUTURE_SLACK_NS = NS_PER_DAY
EARLIEST_NS = 0  # 1970-01-01 UTC


class TimeWindowError(InputError):
    """A time outside the window; ``when`` is the first offending time."""

    def __init__(self, msg: str, when: pd.Timestamp) -> None:
        super().__init__(msg)
        self.when = when


@dataclass(frozen=True)
class TimeWindow:
    latest_ns: int  # now + 1 day
    retention_days: int | None = None
    stored_newest_day: int | None = None  # newest day already stored (days since the epoch)

    @classmethod
    def around(cls, now_ns: int | None = None, retention_days: int | None = None,
               stored_newest_day: int | None = None) -> "TimeWindow":
        now_ns = time.time_ns() if now_ns is None else now_ns
        return cls(now_ns + FUTURE_SLACK_NS, retention_days, stored_newest_day)

    def outside(self, ns: np.ndarray) -> np.ndarray:
        """Rows refused whatever else arrives: in the future or before 1970."""
        return (ns > self.latest_ns) | (ns < EARLIEST_NS)

    def why(self, ns: int) -> str:
        if ns > self.latest_ns:
            return f"later than now + 1 day ({_show(self.latest_ns)} UTC): check the clock or the time column"
        return "before 1970-01-01: not a request time (check --time-unit and --start)"

    def cutoff_day(self, newest_day: int) -> int | None:
        """Rows on this day or earlier are refused (retention would drop them); None: no limit."""
        if not self.retention_days:
            return None
        newest = max(newest_day, self.stored_newest_day if self.stored_newest_day is not None else newest_day)
        return newest - self.retention_days

    def too_old_reason(self, newest_day: int) -> str:
        newest = max(newest_day, self.stored_newest_day or newest_day)
        return (f"more than retention_days={self.retention_days} days before the newest data "
                f"({_show(newest * NS_PER_DAY)[:10]}): retention would delete it")

    def check_minutes(self, minutes: np.ndarray) -> None:
        """Refuse a whole write (minutes since the epoch) if any minute is outside the window."""
        if not len(minutes):
            return
        ns = minutes.astype(np.int64) * NS_PER_MIN
        bad = np.flatnonzero(self.outside(ns))
        if len(bad):
            first = int(ns[bad[0]])
            raise TimeWindowError(f"time {_show(first)}: {self.why(first)}; nothing was stored", pd.Timestamp(first))
        days = minutes // 1440
        cut = self.cutoff_day(int(days.max()))
        if cut is not None and (days <= cut).any():
            first = int(ns[np.flatnonzero(days <= cut)[0]])
            raise TimeWindowError(f"time {_show(first)}: {self.too_old_reason(int(days.max()))}; nothing was stored",
                                  pd.Timestamp(first))


def _show(ns: int) -> str:
    return pd.Timestamp(ns).strftime("%Y-%m-%d %H:%M")
