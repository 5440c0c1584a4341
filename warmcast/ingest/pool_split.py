"""Per-pool load series: attribute each request of a log to the hot or cold pool and store
one per-minute series per pool in the load store, under ``DEPLOYMENT.hot`` / ``DEPLOYMENT.cold``
(:func:`warmcast.config.pools.pool_series_name`), through the store's ordinary upsert.

Attribution (``pools.attribution`` in the deployments file): a log column naming the
pool wins; otherwise the rules in order (an API key listed, or a prompt of at least N
tokens); otherwise the default pool.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from warmcast.errors import InputError
from warmcast.ingest.formats import PRESETS, detect_format
from warmcast.config.pools import Attribution, pool_series_name

POOLS = ("hot", "cold")


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


def store_pool_series(store, deployment: str, path: str | Path, rule: Attribution, fmt: str = "auto") -> dict[str, int]:
    """Attribute, aggregate and upsert; returns requests per pool."""
    extra = tuple(c for c in (rule.field, rule.api_key_field) if c)
    reqs = read_requests(path, fmt, extra)
    if reqs.empty:
        raise InputError(f"{path}: no requests")
    pools = attribute(reqs, rule, str(path))
    for name, frame in pool_frames(reqs, pools).items():
        store.upsert_frame(pool_series_name(deployment, name), frame)
    return {name: int((pools == name).sum()) for name in POOLS}
