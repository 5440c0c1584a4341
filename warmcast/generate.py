"""A seeded synthetic request log with the shapes real LLM traffic has.

Rate (requests/min) = mean x daily cycle x weekly cycle x bursts, then Poisson
arrivals.  The daily cycle is low before dawn and peaks in the afternoon; weekend
days carry about 55% of a weekday; bursts (a few a day) multiply the rate 1.5-3x
for 5-30 minutes.  ``ramp=True`` replaces the smooth morning rise with a sharp one
(night level to day level in 10 minutes at 08:00), the case where reactive
autoscalers come late.

Context lengths follow a day/night mix: short chats (~500 tokens) by day, long
tickets (~8k tokens) dominating at night, so profile switching has something to
switch on.  ``night=("20:00", "07:30")`` replaces that smooth mix with a sharp shift at known
times (~75% long tickets inside the window, ~5% outside), the truth the profile advisor's
windows are checked against.  Everything depends only on the seed.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import numpy as np
import pandas as pd


@dataclass(frozen=True)
class WorkloadSpec:
    days: int = 7
    start: str = "2024-01-01"  # a Monday
    mean_rpm: float = 300.0
    seed: int = 0
    ramp: bool = False
    bursts_per_day: float = 3.0
    chat_tokens: float = 500.0
    ticket_tokens: float = 8000.0
    night: tuple[str, str] | None = None  # ("HH:MM", "HH:MM") UTC: sharp long-context window
    clients: int = 0  # > 0: each request names its client (``client`` column), each with its own habits

    def __post_init__(self) -> None:
        if self.night is not None:
            _minute_of(self.night[0]), _minute_of(self.night[1])  # refuse a bad time before writing


def _minute_of(hhmm: str) -> int:
    try:
        h, m = (int(x) for x in hhmm.split(":"))
    except ValueError:
        raise ValueError(f"context-shift time {hhmm!r} must be HH:MM") from None
    if not (0 <= h < 24 and 0 <= m < 60):
        raise ValueError(f"context-shift time {hhmm!r} must be HH:MM within a day")
    return h * 60 + m


def _daily(minute_of_day: np.ndarray, ramp: bool) -> np.ndarray:
    h = minute_of_day / 60.0
    smooth = 0.62 + 0.38 * np.cos(2 * np.pi * (h - 14.0) / 24.0) + 0.08 * np.cos(4 * np.pi * (h - 11.0) / 24.0)
    if not ramp:
        return smooth
    # Night plateau, then from 08:00 a 10-minute climb to the day plateau.
    night, day = 0.35, 1.25
    climb = np.clip((h - 8.0) * 6.0, 0.0, 1.0)
    evening = np.clip((h - 21.0) / 2.0, 0.0, 1.0)
    return night + (day - night) * climb * (1 - evening)


def rate_per_minute(spec: WorkloadSpec, rng: np.random.Generator) -> pd.Series:
    """Expected requests per minute over the whole span (before Poisson noise)."""
    idx = pd.date_range(spec.start, periods=spec.days * 1440, freq="min", name="time")
    mod = (idx.hour * 60 + idx.minute).to_numpy()
    weekly = np.where(idx.day_of_week.to_numpy() >= 5, 0.55, 1.0)
    rate = spec.mean_rpm * _daily(mod, spec.ramp) * weekly
    rate *= _bursts(len(idx), spec.bursts_per_day * spec.days, rng)
    # Scale so the mean is what was asked for, whatever the shape.
    return pd.Series(rate * spec.mean_rpm / rate.mean(), index=idx, name="rate")


def _bursts(n: int, expected: float, rng: np.random.Generator) -> np.ndarray:
    mult = np.ones(n)
    for _ in range(rng.poisson(expected)):
        at, length = rng.integers(0, n), rng.integers(5, 31)
        mult[at: at + length] *= rng.uniform(1.5, 3.0)
    return mult


def _ticket_share(minute_of_day: np.ndarray) -> np.ndarray:
    """Share of long-context requests: ~70% in the small hours, ~10% mid-afternoon."""
    h = minute_of_day / 60.0
    return 0.4 + 0.3 * np.cos(2 * np.pi * (h - 3.0) / 24.0)


def iter_request_days(spec: WorkloadSpec) -> Iterator[pd.DataFrame]:
    """Per-request rows (timestamp, input_tokens, output_tokens), one day per frame."""
    rng = np.random.default_rng(spec.seed)
    rate = rate_per_minute(spec, rng)
    for day in range(spec.days):
        part = rate.iloc[day * 1440:(day + 1) * 1440]
        counts = rng.poisson(part.to_numpy())
        starts = np.repeat(part.index.as_unit("ns").asi8, counts)
        ts = np.sort(starts + rng.integers(0, 60_000_000_000, len(starts)))
        frame = _tokens(ts, rng, spec)
        if spec.clients > 0:  # drawn from a stream of their own: a log without clients stays as it was
            frame["client"] = client_of(ts, spec.clients, np.random.default_rng([spec.seed, day, 1]))
        yield frame


def client_of(ts: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """Each request's client (``tenant-1`` .. ``tenant-N``): the tenants' busy hours are spread over the
    day, and with three or more the last is a nightly batch (02:00-03:00 UTC and little else), the rise
    an aggregate model does not see coming and a client series makes plain."""
    h = ((ts // 60_000_000_000) % 1440)[:, None] / 60.0
    peaks = 8.0 + 24.0 * np.arange(n) / n
    w = 1.0 + 0.8 * np.cos(2 * np.pi * (h - peaks[None, :]) / 24.0)
    if n >= 3:
        w[:, -1] = np.where((h[:, 0] >= 2.0) & (h[:, 0] < 3.0), 6.0 * n, 0.02)
    cum = np.cumsum(w / w.sum(axis=1, keepdims=True), axis=1)
    pick = np.minimum((rng.random(len(ts))[:, None] > cum).sum(axis=1), n - 1)
    return np.array([f"tenant-{i + 1}" for i in range(n)])[pick]


def _shift_share(minute_of_day: np.ndarray, night: tuple[str, str]) -> np.ndarray:
    """Share of long-context requests with a sharp night window (it may wrap past midnight)."""
    a, b = _minute_of(night[0]), _minute_of(night[1])
    inside = (minute_of_day >= a) & (minute_of_day < b) if a < b else (minute_of_day >= a) | (minute_of_day < b)
    return np.where(inside, 0.75, 0.05)


def _tokens(ts: np.ndarray, rng: np.random.Generator, spec: WorkloadSpec) -> pd.DataFrame:
    mod = (ts // 60_000_000_000) % 1440
    share = _ticket_share(mod) if spec.night is None else _shift_share(mod, spec.night)
    ticket = rng.random(len(ts)) < share
    median = np.where(ticket, spec.ticket_tokens, spec.chat_tokens)
    inp = np.maximum(1, rng.lognormal(np.log(median), 0.6)).astype(np.int64)
    out = np.maximum(1, rng.lognormal(np.log(np.where(ticket, 400, 200)), 0.7)).astype(np.int64)
    return pd.DataFrame({"timestamp": ts.astype("datetime64[ns]").astype("datetime64[ms]"),
                         "input_tokens": inp, "output_tokens": out})


def write_request_log(path: str | Path, spec: WorkloadSpec) -> int:
    """Write the log as CSV (or Parquet by suffix), a day at a time; returns rows written."""
    import pyarrow as pa
    import pyarrow.csv as pv
    import pyarrow.parquet as pq

    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    rows, writer = 0, None
    try:
        for frame in iter_request_days(spec):
            table = pa.Table.from_pandas(frame, preserve_index=False)
            if writer is None:
                writer = pq.ParquetWriter(p, table.schema) if p.suffix in (".parquet", ".pq") \
                    else pv.CSVWriter(p, table.schema)
            writer.write_table(table)
            rows += len(frame)
    finally:
        if writer is not None:
            writer.close()
    return rows


def generate_minute_frame(days: int = 7, seed: int = 0, start: str = "2024-01-01",
                          mean_rpm: float = 300.0, ramp: bool = False,
                          bursts_per_day: float = 3.0) -> pd.DataFrame:
    """The generator's log already aggregated per minute (same seed, same numbers as the
    request log would give after ingestion)."""
    from warmcast.ingest.accumulate import MinuteAccumulator, regular

    spec = WorkloadSpec(days=days, start=start, mean_rpm=mean_rpm, seed=seed, ramp=ramp,
                        bursts_per_day=bursts_per_day)
    acc = MinuteAccumulator()
    for frame in iter_request_days(spec):
        ts = frame["timestamp"].to_numpy().astype("datetime64[ns]").astype(np.int64)
        acc.add(ts // 60_000_000_000, np.ones(len(ts)), frame["input_tokens"].to_numpy(float),
                frame["output_tokens"].to_numpy(float), with_hist=True)
    acc.fill_request_span()
    return regular(acc.frame(has_tokens=True))
