"""Per-pool load series: attribute each request of a log to the hot or cold pool and store
one per-minute series per pool in the load store, under ``DEPLOYMENT.hot`` / ``DEPLOYMENT.cold``
(:func:`warmcast.config.pools.pool_series_name`), through the store's ordinary upsert.

Attribution (``pools.attribution`` in the deployments file): a log column naming the
pool wins; otherwise the rules in order (an API key listed, or a prompt of at least N
tokens); otherwise the default pool.

A count series (``time,requests`` per interval) holds no request to attribute: it is split as the
user says (:class:`CountSplit`), a share of each bin to the hot pool, or the file's own per-pool
count columns, and stored at the series' own resolution (issue 46).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from dataclasses import dataclass

from warmcast.errors import InputError
from warmcast.ingest.formats import PRESETS, detect_format
from warmcast.config.pools import Attribution, pool_series_name

POOLS = ("hot", "cold")
HOW = ("give the split: --hot-share 0.8 (80% of each bin to the hot pool, the rest to cold), or "
       "--pool-columns HOT,COLD (the file's per-pool count columns, e.g. --pool-columns hot_requests,cold_requests)")


@dataclass(frozen=True)
class CountSplit:
    """How a count series divides between the pools: ``hot_share`` of each bin, or per-pool count columns."""

    hot_share: float | None = None
    columns: tuple[str, str] | None = None    # (hot, cold)

    def __post_init__(self) -> None:
        if (self.hot_share is None) == (self.columns is None):
            raise InputError("a count series is split by --hot-share or by --pool-columns, one of them")
        if self.hot_share is not None and not 0.0 <= self.hot_share <= 1.0:
            raise InputError(f"--hot-share must be in [0, 1], not {self.hot_share}")

    @property
    def described(self) -> str:
        if self.columns is not None:
            return f"columns {self.columns[0]!r} (hot) and {self.columns[1]!r} (cold)"
        return f"{self.hot_share:.0%} of each bin to hot, {1 - self.hot_share:.0%} to cold"


def pool_columns(text: str) -> tuple[str, str]:
    """``HOT,COLD`` as two column names, or a refusal naming the form."""
    cols = tuple(c.strip() for c in text.split(","))
    if len(cols) != 2 or not all(cols):
        raise InputError(f"--pool-columns takes HOT,COLD (two count columns, hot first), not {text!r}")
    return cols  # type: ignore[return-value]


def read_requests(path: str | Path, fmt: str = "auto", extra: tuple[str, ...] = ()) -> pd.DataFrame:
    """A per-request log as columns time (UTC, ns), input_tokens, output_tokens and ``extra`` when present."""
    p = Path(path)
    if not p.is_file():
        raise InputError(f"{p}: no such file")
    preset = PRESETS[detect_format(p) if fmt == "auto" else fmt]
    if preset.kind != "requests":
        raise InputError(f"{p}: per-pool series need one row per request, not counts")
    suffix = p.suffix.lower()
    df = pd.read_parquet(p) if suffix in (".parquet", ".pq") else \
        pd.read_json(p, lines=True) if suffix in (".jsonl", ".json", ".ndjson") else pd.read_csv(p)
    if preset.time not in df.columns:
        raise InputError(f"{p}: no column {preset.time!r} (the request time)")
    raw = df[preset.time]
    if preset.time_unit == "datetime":
        t = pd.to_datetime(raw, utc=True, errors="coerce", format="mixed")
    else:
        t = pd.to_datetime(pd.to_numeric(raw, errors="coerce"), unit=preset.time_unit, utc=True)
    if t.isna().any():
        line = int(np.flatnonzero(t.isna().to_numpy())[0]) + (2 if suffix == ".csv" else 1)
        raise InputError(f"{p}:{line}: column {preset.time!r}: not a time")
    out = pd.DataFrame({"time": t.dt.tz_localize(None)})
    for name, col in (("input_tokens", preset.input), ("output_tokens", preset.output)):
        out[name] = pd.to_numeric(df[col], errors="coerce") if col in df.columns else np.nan
    for col in extra:
        if col in df.columns:
            out[col] = df[col].fillna("").astype(str)
    return out


def attribute(requests: pd.DataFrame, rule: Attribution, source: str = "log") -> pd.Series:
    """The pool of each request ("hot" or "cold")."""
    pool = pd.Series(rule.default, index=requests.index, dtype=object)
    for r in reversed(rule.rules):  # the first matching rule wins, so apply the last first
        hit = pd.Series(False, index=requests.index)
        if r.api_keys and rule.api_key_field in requests:
            hit |= requests[rule.api_key_field].isin(r.api_keys)
        if r.min_prompt_tokens is not None:
            hit |= requests["input_tokens"].fillna(-1) >= r.min_prompt_tokens
        pool[hit] = r.pool
    if rule.field and rule.field in requests:
        named = requests[rule.field].str.strip().str.lower()
        bad = ~named.isin(POOLS) & ~named.isin(["", "nan", "none"])
        if bad.any():
            i = int(np.flatnonzero(bad.to_numpy())[0])
            raise InputError(f"{source}: row {i + 1}: column {rule.field!r}: {requests[rule.field].iloc[i]!r} "
                             f"is not a pool; use one of {list(POOLS)} or leave it empty")
        pool[named.isin(POOLS)] = named[named.isin(POOLS)]
    return pool


def pool_frames(requests: pd.DataFrame, pools: pd.Series) -> dict[str, pd.DataFrame]:
    """Per pool: requests and token sums per minute over the whole log's span (no request = 0)."""
    minutes = requests["time"].dt.floor("min")
    span = pd.date_range(minutes.min(), minutes.max(), freq="min", name="time")
    out = {}
    for name in POOLS:
        sel = (pools == name).to_numpy()
        g = requests.loc[sel, ["input_tokens", "output_tokens"]].groupby(minutes[sel])
        frame = pd.DataFrame({"requests": g.size().astype(float),
                              "input_tokens": g["input_tokens"].sum(min_count=1),
                              "output_tokens": g["output_tokens"].sum(min_count=1)})
        frame = frame.reindex(span)
        frame["requests"] = frame["requests"].fillna(0.0)
        out[name] = frame.dropna(axis=1, how="all")
    return out


def store_pool_series(store, deployment: str, path: str | Path, rule: Attribution, fmt: str = "auto",
                      split: CountSplit | None = None) -> dict[str, float]:
    """Attribute, aggregate and upsert; returns requests per pool.  A count series needs ``split``."""
    kind = PRESETS[detect_format(Path(path)) if fmt == "auto" else fmt].kind if Path(path).is_file() else ""
    if kind == "counts":
        if split is None:
            raise InputError(f"{path} is a count series: it holds no request to attribute to a pool; {HOW}")
        return store_pool_counts(store, deployment, path, split, fmt)
    if split is not None:
        raise InputError(f"{path} is a request log: each request goes to its pool by pools.attribution in the "
                         "deployments file; --hot-share and --pool-columns are for count series")
    extra = tuple(c for c in (rule.field, rule.api_key_field) if c)
    reqs = read_requests(path, fmt, extra)
    if reqs.empty:
        raise InputError(f"{path}: no requests")
    pools = attribute(reqs, rule, str(path))
    for name, frame in pool_frames(reqs, pools).items():
        store.upsert_frame(pool_series_name(deployment, name), frame)
    return {name: int((pools == name).sum()) for name in POOLS}


def store_pool_counts(store, deployment: str, path: str | Path, split: CountSplit,
                      fmt: str = "auto") -> dict[str, float]:
    """A count series split between the pools as ``split`` says, each stored at the series' resolution;
    returns requests per pool.  Rows are checked as ingest checks them (bad ones name file, line, column)."""
    from warmcast.ingest import load_minute_frame
    from warmcast.resolution import resolution_of

    fmt = "counts" if fmt == "auto" else fmt
    if split.columns is not None:
        frames = dict(zip(POOLS, (load_minute_frame(path, fmt, count_col=c)[["requests"]] for c in split.columns)))
    else:
        whole = load_minute_frame(path, fmt)
        share = {"hot": split.hot_share, "cold": 1.0 - split.hot_share}
        frames = {name: whole * share[name] for name in POOLS}   # tokens divide as the requests do
    for name, frame in frames.items():
        store.upsert_frame(pool_series_name(deployment, name), frame, resolution_min=resolution_of(frame))
    return {name: float(frame["requests"].sum()) for name, frame in frames.items()}
