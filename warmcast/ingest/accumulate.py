"""Per-minute sums held in one block per UTC day, so sparse spans stay small.

Signals per minute: ``requests``, ``input_tokens``, ``output_tokens``, ``ctx_mean``
(mean input tokens per request), ``ctx_p50`` and ``ctx_p95`` (median and 95th percentile of
input tokens, from a log-spaced histogram: within about 5% of the exact value; the profile
advisor reads where the context-length distribution shifts from them), and ``long_share``
(share of requests whose prompt is long, from live vLLM prompt-token histograms; the
context-mix trigger reads it).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

SIGNALS = ("requests", "input_tokens", "output_tokens", "ctx_mean", "ctx_p95", "coverage", "ctx_p50",
           "long_share")
MAX_TOKENS = 10_000_000  # a single request above this is not a real request
_CTX_RATIO = 1.1  # log-spaced histogram bins: p95 within ~5%
_CTX_BINS = int(np.ceil(np.log(MAX_TOKENS + 1) / np.log(_CTX_RATIO))) + 1


MAX_ZERO_GAP_MIN = 1440  # a longer silence in a request log is read as the log not covering it


class MinuteAccumulator:
    """Sums per minute, held in one block per UTC day that has rows, so sparse spans stay small:
    work and memory grow with the days that hold rows, never with the span between them."""

    def __init__(self) -> None:
        self.days: dict[int, dict[str, np.ndarray]] = {}
        self.origin: dict[int, str] = {}  # day -> "file:line" of its first row, for errors

    def _block(self, day: int, with_hist: bool) -> dict[str, np.ndarray]:
        b = self.days.get(day)
        if b is None:
            b = {s: np.zeros(1440) for s in ("requests", "input_tokens", "output_tokens", "seen", "blank")}
            if with_hist:
                b["hist"] = np.zeros((1440, _CTX_BINS), dtype=np.uint32)
            self.days[day] = b
        return b

    def add(self, minutes: np.ndarray, requests: np.ndarray, inp: np.ndarray | None,
            out: np.ndarray | None, with_hist: bool, where=None) -> None:
        """Fold rows in; ``where(i)`` names row i ("file:line") for the first row of a new day."""
        days = minutes // 1440
        for day in np.unique(days):
            sel = days == day
            if where is not None and int(day) not in self.origin:
                self.origin[int(day)] = where(int(np.argmax(sel)))
            mod = (minutes[sel] - day * 1440).astype(np.int64)
            b = self._block(int(day), with_hist)
            b["seen"] += np.bincount(mod, minlength=1440)
            b["requests"] += np.bincount(mod, weights=requests[sel], minlength=1440)
            if inp is not None:
                b["input_tokens"] += np.bincount(mod, weights=inp[sel], minlength=1440)
                if with_hist:
                    bins = np.minimum((np.log1p(inp[sel]) / np.log(_CTX_RATIO)).astype(np.int64), _CTX_BINS - 1)
                    np.add.at(b["hist"], (mod, bins), 1)
            if out is not None:
                b["output_tokens"] += np.bincount(mod, weights=out[sel], minlength=1440)

    def mark_blank(self, minutes: np.ndarray) -> None:
        """A blank sub-interval leaves its whole minute missing: a partial sum is not the minute's load."""
        days = minutes // 1440
        for day in np.unique(days):
            mod = (minutes[days == day] - day * 1440).astype(np.int64)
            self._block(int(day), False)["blank"] += np.bincount(mod, minlength=1440)

    def fill_request_span(self) -> int:
        """In a request log, a minute with no request between two that have one had zero load, if
        the silence lasts at most a day; a longer one is read as the log not covering it (kept
        missing).  Returns the number of such long gaps."""
        seen = self._seen_minutes()
        if len(seen) < 2:
            return 0
        for day, b in self.days.items():
            idx = np.arange(1440) + day * 1440
            pos = np.searchsorted(seen, idx)
            inside = (pos > 0) & (pos < len(seen))
            gap = np.zeros(1440, np.int64)
            gap[inside] = seen[pos[inside]] - seen[pos[inside] - 1]
            b["seen"][inside & (gap <= MAX_ZERO_GAP_MIN) & (b["seen"] == 0)] = -1  # -1: observed zero
        return int((np.diff(seen) > MAX_ZERO_GAP_MIN).sum())

    def _seen_minutes(self) -> np.ndarray:
        parts = [np.flatnonzero(self.days[d]["seen"] > 0) + d * 1440 for d in sorted(self.days)]
        return np.concatenate(parts) if parts else np.array([], np.int64)

    def first_minute(self) -> int | None:
        seen = self._seen_minutes()
        return int(seen[0]) if len(seen) else None

    def last_minute(self) -> int | None:
        seen = self._seen_minutes()
        return int(seen[-1]) if len(seen) else None

    def drop_minute(self, minute: int) -> float:
        """Forget one minute; returns the requests it held."""
        b = self.days[minute // 1440]
        m = minute % 1440
        held = float(b["requests"][m])
        for key in b:
            b[key][m] = 0
        return held

    def minute_values(self, minute: int) -> tuple[float, float, float, dict[int, int]]:
        """Requests, input and output tokens and the context histogram (bin -> requests) of one minute."""
        b, m = self.days[minute // 1440], minute % 1440
        hist = {int(i): int(b["hist"][m, i]) for i in np.flatnonzero(b["hist"][m])} if "hist" in b else {}
        return float(b["requests"][m]), float(b["input_tokens"][m]), float(b["output_tokens"][m]), hist

    def add_minute(self, minute: int, requests: float, inp: float, out: float, hist: dict[int, int]) -> None:
        """Add one minute's sums of requests (a part of it read before: warmcast.ingest.parts.Carry)."""
        b, m = self._block(minute // 1440, True), minute % 1440
        for key, value in (("seen", requests), ("requests", requests), ("input_tokens", inp), ("output_tokens", out)):
            b[key][m] += value
        if "hist" in b:
            for i, n in hist.items():
                b["hist"][m, i] += n

    def move_minute(self, src: int, dst: int) -> None:
        """Move what minute ``src`` holds to minute ``dst`` (a count series' stamp off its grid, moved
        to its bin: warmcast.ingest.interval); ``dst`` holds nothing yet."""
        a, i = self.days[src // 1440], src % 1440
        b, j = self._block(dst // 1440, "hist" in a), dst % 1440
        for key in a:
            if key in b:
                b[key][j] += a[key][i]
                a[key][i] = 0

    def drop_days_through(self, cutoff_day: int) -> tuple[int, str | None]:
        """Forget every day up to cutoff_day; returns the rows they held and the first one's place."""
        old = sorted(d for d in self.days if d <= cutoff_day)
        rows = sum(int(self.days[d]["seen"].clip(0).sum()) for d in old)
        where = self.origin.get(old[0]) if old else None
        for d in old:
            del self.days[d]
        return rows, where

    def frame(self, has_tokens: bool) -> pd.DataFrame:
        parts = []
        for day in sorted(self.days):
            b = self.days[day]
            keep = (b["seen"] != 0) & (b["blank"] == 0)
            if not keep.any():
                continue
            idx = (np.flatnonzero(keep) + day * 1440).astype("int64") * 60_000_000_000
            cols = {"requests": b["requests"][keep]}
            if has_tokens:
                cols.update(_token_columns(b, keep))
            parts.append(pd.DataFrame(cols, index=pd.DatetimeIndex(idx.astype("datetime64[ns]"), name="time")))
        if not parts:
            return pd.DataFrame(columns=["requests"], index=pd.DatetimeIndex([], name="time"), dtype=float)
        return pd.concat(parts)


def _token_columns(b: dict[str, np.ndarray], keep: np.ndarray) -> dict[str, np.ndarray]:
    req = b["requests"][keep]
    inp = b["input_tokens"][keep]
    with np.errstate(invalid="ignore", divide="ignore"):
        ctx_mean = np.where(req > 0, inp / np.maximum(req, 1), np.nan)
    cols = {"input_tokens": inp, "output_tokens": b["output_tokens"][keep], "ctx_mean": ctx_mean}
    if "hist" in b:
        cols["ctx_p50"] = _hist_quantile(b["hist"][keep], 0.50)
        cols["ctx_p95"] = _hist_quantile(b["hist"][keep], 0.95)
    return cols


def _hist_quantile(hist: np.ndarray, q: float) -> np.ndarray:
    """Quantile per row of a log-binned histogram (geometric middle of the bin)."""
    total = hist.sum(axis=1)
    cum = np.cumsum(hist, axis=1)
    pos = np.argmax(cum >= np.ceil(q * total)[:, None], axis=1)
    value = np.expm1((pos + 0.5) * np.log(_CTX_RATIO))
    return np.where(total > 0, np.round(value), np.nan)


def regular(frame: pd.DataFrame, resolution_min: int = 1) -> pd.DataFrame:
    """Reindex to every bin (minute, or ``resolution_min`` minutes) between the first and last;
    missing bins become NaN."""
    if frame.empty:
        return frame
    freq = "min" if resolution_min == 1 else f"{resolution_min}min"
    idx = pd.date_range(frame.index[0], frame.index[-1], freq=freq, name="time")
    return frame.reindex(idx)
