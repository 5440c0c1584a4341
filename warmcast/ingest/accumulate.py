"""Per-minute sums held in one block per UTC day, so sparse spans stay small.

Signals per minute: ``requests``, ``input_tokens``, ``output_tokens``, ``ctx_mean``
(mean input tokens per request) and ``ctx_p95`` (95th percentile of input tokens, from a
log-spaced histogram: within about 5% of the exact value).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

SIGNALS = ("requests", "input_tokens", "output_tokens", "ctx_mean", "ctx_p95", "coverage")
MAX_TOKENS = 10_000_000  # a single request above this is not a real request
_CTX_RATIO = 1.1  # log-spaced histogram bins: p95 within ~5%
_CTX_BINS = int(np.ceil(np.log(MAX_TOKENS + 1) / np.log(_CTX_RATIO))) + 1


class MinuteAccumulator:
    """Sums per minute, held in one block per UTC day so sparse spans stay small."""

    def __init__(self) -> None:
        self.days: dict[int, dict[str, np.ndarray]] = {}
        self.any_count_nan: dict[int, np.ndarray] = {}

    def _block(self, day: int, with_hist: bool) -> dict[str, np.ndarray]:
        b = self.days.get(day)
        if b is None:
            b = {s: np.zeros(1440) for s in ("requests", "input_tokens", "output_tokens", "seen", "ctx_max")}
            if with_hist:
                b["hist"] = np.zeros((1440, _CTX_BINS), dtype=np.uint32)
            self.days[day] = b
        return b

    def add(self, minutes: np.ndarray, requests: np.ndarray, inp: np.ndarray | None,
            out: np.ndarray | None, with_hist: bool) -> None:
        days = minutes // 1440
        for day in np.unique(days):
            sel = days == day
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

    def fill_request_span(self) -> None:
        """In a request log, a minute inside the log's span with no request had zero load."""
        if not self.days:
            return
        first, last = min(self.days), max(self.days)
        lo, hi = self._span()
        for day in range(first, last + 1):
            b = self._block(day, "hist" in next(iter(self.days.values())))
            idx = np.arange(1440) + day * 1440
            b["seen"][(idx >= lo) & (idx <= hi) & (b["seen"] == 0)] = -1  # -1: observed zero

    def _span(self) -> tuple[int, int]:
        firsts = [d * 1440 + int(np.flatnonzero(b["seen"] > 0)[0]) for d, b in self.days.items() if (b["seen"] > 0).any()]
        lasts = [d * 1440 + int(np.flatnonzero(b["seen"] > 0)[-1]) for d, b in self.days.items() if (b["seen"] > 0).any()]
        return min(firsts), max(lasts)

    def frame(self, has_tokens: bool) -> pd.DataFrame:
        parts = []
        for day in sorted(self.days):
            b = self.days[day]
            keep = b["seen"] != 0
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
        cols["ctx_p95"] = _hist_quantile(b["hist"][keep], 0.95)
    return cols


def _hist_quantile(hist: np.ndarray, q: float) -> np.ndarray:
    """Quantile per row of a log-binned histogram (geometric middle of the bin)."""
    total = hist.sum(axis=1)
    cum = np.cumsum(hist, axis=1)
    pos = np.argmax(cum >= np.ceil(q * total)[:, None], axis=1)
    value = np.expm1((pos + 0.5) * np.log(_CTX_RATIO))
    return np.where(total > 0, np.round(value), np.nan)


def regular(frame: pd.DataFrame) -> pd.DataFrame:
    """Reindex to every minute between the first and last; missing minutes become NaN."""
    if frame.empty:
        return frame
    idx = pd.date_range(frame.index[0], frame.index[-1], freq="min", name="time")
    return frame.reindex(idx)
