"""The profile advisor: daily windows where the context-length distribution shifts (pure).

Input is the stored per-minute context statistics (requests, mean, median and P95 prompt
tokens) and ``now``; output is one or two daily windows, each with its statistics and the
reasons it was found (or why only one window is proposed).  The engine args per window are
``advisor_args``' job; the CLI and the API only feed this and print what it returns.

Method: minutes fold into 5-minute slots of the local day (the schedule's time zone); each
slot's level is the log of its request-weighted mean context.  Every pair of cut times
splits the day into two arcs; the pair with the least request-weighted squared error
wins.  Two windows are proposed only when that split explains most of the variation
(``MIN_EXPLAINED``) and the two arcs' mean contexts differ by ``MIN_RATIO`` or more: a
smaller shift is not worth a switch.  Less than ``MIN_COVERAGE_H`` hours of the day seen
means a daily shift cannot be seen: one window, and the reason says so.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime, timezone, tzinfo
from typing import Optional

SLOT_MIN = 5
SLOTS = 1440 // SLOT_MIN
MIN_WINDOW_MIN = 60      # a window shorter than an hour is not worth two switches
MIN_EXPLAINED = 0.5      # share of the slot-to-slot variation the two windows must explain
MIN_RATIO = 1.5          # mean context of the long window / the short one
MIN_COVERAGE_H = 20.0    # hours of the day with data needed to see a daily shift


@dataclass(frozen=True, slots=True)
class MinuteStat:
    """One stored minute: UTC start, requests, mean / median / P95 prompt tokens (NaN: unknown)."""

    at: datetime
    requests: float
    ctx_mean: float
    ctx_p50: float = math.nan
    ctx_p95: float = math.nan


@dataclass(frozen=True, slots=True)
class WindowStats:
    """A daily window [start_min, end_min) of the local day (may wrap) and its context statistics."""

    start_min: int
    end_min: int
    requests: float
    ctx_mean: float        # request-weighted mean over every day
    ctx_p50: float         # request-weighted geometric mean of the minutes' medians
    ctx_p95: float         # request-weighted mean of the minutes' P95
    ctx_current: float     # mean over the most recent day the window has data on

    @property
    def label(self) -> str:
        if self.start_min == self.end_min:
            return "all day"
        return f"{hhmm(self.start_min)}-{hhmm(self.end_min)}"

    @property
    def minutes(self) -> int:
        return (self.end_min - self.start_min) % 1440 or 1440


@dataclass(frozen=True, slots=True)
class Windows:
    """The advisor's windows (one or two), the hourly profile for the plot, and the reasons."""

    windows: tuple[WindowStats, ...]
    reasons: tuple[str, ...]
    hourly_mean: tuple[float, ...]          # 24 values, local hours, NaN where no data
    hourly_p95: tuple[float, ...]
    tz_name: str
    explained: float = 0.0
    has_tokens: bool = True
    days_seen: int = 0
    covered_h: float = 0.0
    notes: tuple[str, ...] = field(default_factory=tuple)


def hhmm(minute: int) -> str:
    minute %= 1440
    return f"{minute // 60:02d}:{minute % 60:02d}"


@dataclass
class _Slot:
    req: float = 0.0
    tokens: float = 0.0
    log_p50: float = 0.0   # sum of requests * log(p50)
    w_p50: float = 0.0
    p95: float = 0.0       # sum of requests * p95
    w_p95: float = 0.0


def _finite(x: float) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x)


def fold_slots(stats: tuple[MinuteStat, ...], tz: Optional[tzinfo]) -> tuple[list[_Slot], dict[int, dict[int, list[float]]]]:
    """Per 5-minute slot of the local day: sums over every day; and per local date ordinal,
    slot -> [requests, tokens] for the 'current' (latest day) figures."""
    slots = [_Slot() for _ in range(SLOTS)]
    by_day: dict[int, dict[int, list[float]]] = {}
    for s in stats:
        if not (_finite(s.requests) and s.requests > 0 and _finite(s.ctx_mean)):
            continue
        local = s.at.astimezone(tz or timezone.utc)
        i = (local.hour * 60 + local.minute) // SLOT_MIN
        sl = slots[i]
        sl.req += s.requests
        sl.tokens += s.requests * s.ctx_mean
        if _finite(s.ctx_p50) and s.ctx_p50 > 0:
            sl.log_p50 += s.requests * math.log(s.ctx_p50)
            sl.w_p50 += s.requests
        if _finite(s.ctx_p95):
            sl.p95 += s.requests * s.ctx_p95
            sl.w_p95 += s.requests
        acc = by_day.setdefault(local.toordinal(), {}).setdefault(i, [0.0, 0.0])
        acc[0] += s.requests
        acc[1] += s.requests * s.ctx_mean
    return slots, by_day


def _cost(w: list[float], wv: list[float], wvv: list[float], a: int, b: int) -> float:
    """Weighted squared error of slots [a, b) (prefix sums; b may exceed SLOTS to wrap)."""
    def seg(lo: int, hi: int) -> tuple[float, float, float]:
        if lo >= SLOTS:
            lo, hi = lo - SLOTS, hi - SLOTS
        if hi <= SLOTS:
            return w[hi] - w[lo], wv[hi] - wv[lo], wvv[hi] - wvv[lo]
        return (w[SLOTS] - w[lo] + w[hi - SLOTS], wv[SLOTS] - wv[lo] + wv[hi - SLOTS],
                wvv[SLOTS] - wvv[lo] + wvv[hi - SLOTS])
    sw, swv, swvv = seg(a, b)
    return swvv - swv * swv / sw if sw > 0 else 0.0


def best_split(slots: list[_Slot]) -> tuple[int, int, float]:
    """(first slot of arc A, first slot of arc B, share of variation explained) of the best two-arc split."""
    w, wv, wvv = [0.0], [0.0], [0.0]
    for sl in slots:
        v = math.log(sl.tokens / sl.req) if sl.req > 0 and sl.tokens > 0 else 0.0
        wt = sl.req if sl.req > 0 and sl.tokens > 0 else 0.0
        w.append(w[-1] + wt)
        wv.append(wv[-1] + wt * v)
        wvv.append(wvv[-1] + wt * v * v)
    total = _cost(w, wv, wvv, 0, SLOTS)
    if total <= 0:
        return 0, 0, 0.0
    min_len = MIN_WINDOW_MIN // SLOT_MIN
    best = (total, 0, 0)
    for a in range(SLOTS):
        for length in range(min_len, SLOTS - min_len + 1):
            b = a + length
            c = _cost(w, wv, wvv, a, b) + _cost(w, wv, wvv, b, a + SLOTS)
            if c < best[0]:
                best = (c, a, b % SLOTS)
    return best[1], best[2], 1.0 - best[0] / total


def window_stats(slots: list[_Slot], by_day: dict[int, dict[int, list[float]]], a: int, b: int) -> WindowStats:
    """Statistics of slots [a, b) (wrapping when b <= a)."""
    idx = [i % SLOTS for i in range(a, b if b > a else b + SLOTS)]
    req = sum(slots[i].req for i in idx)
    tokens = sum(slots[i].tokens for i in idx)
    w50 = sum(slots[i].w_p50 for i in idx)
    w95 = sum(slots[i].w_p95 for i in idx)
    p50 = math.exp(sum(slots[i].log_p50 for i in idx) / w50) if w50 > 0 else math.nan
    p95 = sum(slots[i].p95 for i in idx) / w95 if w95 > 0 else math.nan
    mean = tokens / req if req > 0 else math.nan
    current = mean
    for day in sorted(by_day, reverse=True):  # the most recent local day with data in the window
        got = [by_day[day][i] for i in idx if i in by_day[day]]
        if sum(g[0] for g in got) > 0:
            current = sum(g[1] for g in got) / sum(g[0] for g in got)
            break
    return WindowStats(a * SLOT_MIN, (b * SLOT_MIN) % 1440, req, mean, p50, p95, current)


def _hourly(slots: list[_Slot]) -> tuple[tuple[float, ...], tuple[float, ...]]:
    per = 60 // SLOT_MIN
    mean, p95 = [], []
    for h in range(24):
        part = slots[h * per:(h + 1) * per]
        req, w95 = sum(s.req for s in part), sum(s.w_p95 for s in part)
        mean.append(sum(s.tokens for s in part) / req if req > 0 else math.nan)
        p95.append(sum(s.p95 for s in part) / w95 if w95 > 0 else math.nan)
    return tuple(mean), tuple(p95)


def find_windows(stats: tuple[MinuteStat, ...], now: datetime, tz: Optional[tzinfo] = None) -> Windows:
    """The daily windows of the stored minutes before ``now``: two when the context length shifts
    enough between them, else one, with the reasons either way."""
    tz_name = getattr(tz, "key", None) or (tz.tzname(now) if tz else "UTC")
    seen = tuple(s for s in stats if s.at < now)
    slots, by_day = fold_slots(seen, tz)
    hourly = _hourly(slots)
    covered_h = sum(1 for s in slots if s.req > 0) * SLOT_MIN / 60.0
    base = dict(hourly_mean=hourly[0], hourly_p95=hourly[1], tz_name=tz_name, days_seen=len(by_day),
                covered_h=covered_h)
    if not any(s.req > 0 for s in slots):
        return Windows((), ("the stored minutes carry no prompt-token counts (ctx_mean): the log had no "
                            "input-token column, so context length cannot be seen",), has_tokens=False, **base)
    whole = window_stats(slots, by_day, 0, 0)
    if covered_h < MIN_COVERAGE_H:
        return Windows((whole,), (f"the stored minutes cover only {covered_h:.1f} h of the day "
                                  f"(< {MIN_COVERAGE_H:.0f} h on {len(by_day)} day(s)): a daily shift cannot be "
                                  f"seen, so one window for the whole day (mean context {whole.ctx_mean:,.0f} "
                                  "tokens)",), **base)
    return _split_or_whole(slots, by_day, whole, base)


def _split_or_whole(slots: list[_Slot], by_day: dict[int, dict[int, list[float]]], whole: WindowStats,
                    base: dict) -> Windows:
    a, b, explained = best_split(slots)
    if explained <= 0:
        return Windows((whole,), ("the context length does not vary over the day: one window",), **base)
    one, two = window_stats(slots, by_day, a, b), window_stats(slots, by_day, b, a)
    short, long_ = sorted((one, two), key=lambda w: w.ctx_mean)
    ratio = long_.ctx_mean / short.ctx_mean if short.ctx_mean > 0 else math.inf
    found = (f"best two-window split {short.label} (mean context {short.ctx_mean:,.0f} tokens) / "
             f"{long_.label} ({long_.ctx_mean:,.0f} tokens) explains {explained:.0%} of the variation "
             f"of log mean context between 5-minute slots, ratio {ratio:.1f}x")
    if explained < MIN_EXPLAINED or ratio < MIN_RATIO:
        why = (f"{found}; below the bar for a switch ({MIN_EXPLAINED:.0%} explained and {MIN_RATIO:.1f}x), "
               f"so one window for the whole day (mean context {whole.ctx_mean:,.0f} tokens)")
        return Windows((whole,), (why,), explained=explained, **base)
    return Windows((short, long_), (f"{found}: two windows",), explained=explained, **base)
