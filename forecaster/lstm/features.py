"""LSTM inputs: per-series scaled windows and per-lead seasonal features.

Every value is taken as ``log1p(requests)`` (``logv``; an impossible zero is missing:
:func:`outage_zeros`) minus the origin's *level*
``l = log1p(mean of the last level_window observed minutes)``, so one global
model serves deployments of any size.  See :func:`build_features`.

Positions are the series' steps (``cfg.step_min`` minutes each, set by ``fit`` from the
series): a day back is 1440 steps on a per-minute series and 288 on a 5-minute one.
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from forecaster.base import DAY, WEEK, InsufficientHistory, minute_series, per_step, resolution, tokens_series
from forecaster.lstm.config import LSTMConfig

N_SEQ = 8  # channels per window step
OUTAGE_FLOOR = 20.0  # requests a step: a series whose non-zero steps are this high has no zero load
OUTAGE_SHARE = 0.01  # in such a series, a step below this share of its median is part of an outage too
MAX_ZERO_SHARE = 0.5  # a series at zero more often than this is an intermittent client: its zeros are load
_STATIC_FIXED = 14  # non-lead static features
_EWM_HALF_LIVES = (2.0, 5.0, 15.0, 45.0)  # steps: recent levels relative to l
RECENT_COL = 10  # static column of the first (shortest) of them: the load just seen (forecaster.lstm.anchor)


def n_static(horizon: int) -> int:
    return _STATIC_FIXED + 5 * horizon + 1


def days(cfg: LSTMConfig) -> tuple[int, int]:
    """A day and a week in the series' steps."""
    return per_step(DAY, cfg.step_min), per_step(WEEK, cfg.step_min)


def lookback(cfg: LSTMConfig) -> int:
    """Steps (minutes on a per-minute series) before an origin that its features can read."""
    return days(cfg)[1] + max(cfg.level_window, cfg.smooth + 1, cfg.profile_smooth + 1, cfg.window) + 1


def take(v: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """v[idx] with NaN where idx is out of range."""
    ok = (idx >= 0) & (idx < len(v))
    return np.where(ok, v[np.clip(idx, 0, max(len(v) - 1, 0))], np.nan)


class _Sums:
    """Prefix sums of a series with NaN: the mean of any window in O(1)."""

    def __init__(self, v: np.ndarray) -> None:
        ok = np.isfinite(v)
        self.n = len(v)
        self.c = np.zeros(self.n + 1)
        # the positions with no value, sorted: a window's count is its width less those inside it
        # (a second prefix sum, of the mask, cost as much as the first: most of predict_many's features)
        self.missing = np.flatnonzero(~ok)
        np.cumsum(np.where(ok, v, 0.0) if len(self.missing) else v, out=self.c[1:])

    def count(self, p: np.ndarray) -> np.ndarray:
        """Observed values before position p (0 <= p <= n)."""
        return p - np.searchsorted(self.missing, p)

    def mean(self, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        """nanmean of v[lo:hi] (clipped to the series), NaN where nothing is observed."""
        lo = np.clip(lo, 0, self.n)
        hi = np.clip(hi, 0, self.n)
        cnt = self.count(hi) - self.count(lo)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(cnt > 0, (self.c[hi] - self.c[lo]) / np.maximum(cnt, 1), np.nan)

    def smooth_at(self, p: np.ndarray, k: int) -> np.ndarray:
        """Centred moving average (width 2k+1) at positions p; NaN where p is outside the series."""
        return np.where((p >= 0) & (p < self.n), self.mean(p - k, p + k + 1), np.nan)


def series_arrays(history, known_before: pd.Timestamp | None = None) -> tuple[pd.Series, np.ndarray, np.ndarray | None]:
    """(minute series, log1p load, log1p tokens or None) of a history.  ``known_before``: the first
    origin that will be forecast from it; the outage rule then reads only the steps that end by it."""
    s = minute_series(history)
    known = None
    if known_before is not None and len(s):
        step_ns = resolution(s) * 60 * 10**9
        known = int(np.searchsorted(s.index.as_unit("ns").asi8 + step_ns, pd.Timestamp(known_before).value,
                                    side="right"))
    logv = np.log1p(outage_zeros(np.clip(s.to_numpy(dtype=float), 0, None), known))
    tok = tokens_series(history) if isinstance(history, pd.DataFrame) else None
    logtok = None
    if tok is not None:
        tok = tok.reindex(s.index) if len(tok) != len(s) else tok
        logtok = np.log1p(np.clip(tok.to_numpy(dtype=float), 0, None))
    return s, logv, logtok


def outage_zeros(y: np.ndarray, known: int | None = None) -> np.ndarray:
    """Counts with their zero steps read as missing (NaN, as a blank in a log is) where a zero
    cannot be load: in a series whose 1% quantile of non-zero steps is ``OUTAGE_FLOOR`` or more (a
    Poisson count of mean 20 is zero with probability 2e-9).  ServeGen m-mid (a million requests per
    10 min, zero runs of 1-4 hours) taught the heads log-space jumps from nothing to a million:
    a P50 MAE 4.6x persistence's and P10..P90 bands from 0.5% to 10x the load.  A low-volume
    deployment's zeros are load and stay.  While an outage runs, the model forecasts from the
    steps before it (the fleet stays ready for the traffic's return).

    In such a series a step below ``OUTAGE_SHARE`` of the median step is missing too: the step an
    outage ends in (ServeGen: 5,000-9,000 requests after each zero run, under 0.8% of the median) and a
    trickle while a service is down (500-4,900 a step for two hours on 2025-01-15, inside the held-back
    validation slice, where it widened the calibrated P95 band to the P99's).  No daily cycle
    swings a hundredfold within a step; a low-volume deployment (zeros that can be load) is left
    as it is.

    ``known``: the rule's quantile and median come from the first ``known`` steps only (those before
    every origin forecast from ``y``), so nothing at or after an origin sets them (issue 42); None:
    all of ``y`` (training, and a live history that ends at its origin).

    A series at zero in more than ``MAX_ZERO_SHARE`` of its observed steps is left as it is: an API
    client that sends large batches now and then (issue 43: ServeGen's client series split cleanly
    into busy ones at zero in 0.4-20% of their training steps, shared outages, and intermittent ones
    at 58-99.9%, whose 1% quantile of non-zero steps is also above the floor).  Read as outages,
    such a client's zeros left it nothing but its bursts: no level, no forecast."""
    zero = y == 0
    if not zero.any():
        return y
    seen = y if known is None else y[:known]
    observed = np.isfinite(seen).sum()
    if observed and (seen == 0).sum() > MAX_ZERO_SHARE * observed:
        return y
    nonzero = seen[seen > 0]
    if not len(nonzero) or np.quantile(nonzero, 0.01) < OUTAGE_FLOOR:
        return y
    return np.where(zero | (y < OUTAGE_SHARE * np.median(nonzero)), np.nan, y)


class _Levels:
    """The origin's level and the levels it is compared with, one per origin."""

    def __init__(self, S: _Sums, ends: np.ndarray, L: int, day: int = DAY, week: int = WEEK) -> None:
        self.level = S.mean(ends - L, ends)
        miss = ~np.isfinite(self.level)  # no minute in the level window: the last day's observed mean
        if miss.any():
            self.level[miss] = S.mean(ends[miss] - day, ends[miss])
        self.day = S.mean(ends - day - L, ends - day)
        self.week = S.mean(ends - week - L, ends - week)
        self.last_24h = S.mean(ends - day, ends)
        self.l0 = np.nan_to_num(self.level)


def _window_channels(logv, logtok, ends, origin_times, lev: _Levels, cfg: LSTMConfig) -> np.ndarray:
    """(n, window, N_SEQ): load, mask, the day before, tokens, position and minute of day."""
    W = cfg.window
    widx = ends[:, None] + np.arange(-W, 0)[None, :]
    cur = take(logv, widx)
    prev = take(logv, widx - days(cfg)[0])
    seq = np.zeros((len(ends), W, N_SEQ), dtype=np.float32)
    seq[..., 0] = np.nan_to_num(cur - lev.l0[:, None])
    seq[..., 1] = np.isfinite(cur)
    seq[..., 2] = np.nan_to_num(prev - np.nan_to_num(lev.day)[:, None])
    seq[..., 3] = np.isfinite(prev) & np.isfinite(lev.day)[:, None]
    if logtok is not None:
        tlev = _Sums(logtok).mean(ends - cfg.level_window, ends)
        tok = take(logtok, widx)
        seq[..., 4] = np.nan_to_num(tok - np.nan_to_num(tlev)[:, None])
        seq[..., 5] = np.isfinite(tok) & np.isfinite(tlev)[:, None]
    seq[..., 6] = np.linspace(-1, 0, W)[None, :]
    mod0 = (origin_times.hour * 60 + origin_times.minute).to_numpy()
    seq[..., 7] = np.sin(2 * np.pi * ((mod0[:, None] + cfg.step_min * np.arange(-W, 0)[None, :]) % DAY) / DAY)
    return seq


def _lead_profiles(S: _Sums, ends, lev: _Levels, cfg: LSTMConfig):
    """Per lead: the smoothed load one day and one week before, and the mean profile over
    the last profile_days days (each day relative to its own level at the origin's minute)."""
    H, L = cfg.horizon, cfg.level_window
    day, week = days(cfg)
    lidx = ends[:, None] + np.arange(H)[None, :]
    day_f = S.smooth_at(lidx - day, cfg.smooth) - lev.day[:, None]
    week_f = S.smooth_at(lidx - week, cfg.smooth) - lev.week[:, None]
    prof = np.zeros((len(ends), H))
    cnt = np.zeros(len(ends))
    for d in range(1, cfg.profile_days + 1):
        lev_d = S.mean(ends - d * day - L, ends - d * day)
        v = S.smooth_at(lidx - d * day, cfg.profile_smooth) - lev_d[:, None]
        ok = np.isfinite(v).all(axis=1)
        prof[ok] += v[ok]
        cnt += ok
    prof = np.where(cnt[:, None] > 0, prof / np.maximum(cnt, 1)[:, None], 0.0)
    return day_f, week_f, prof, cnt


def _static_features(seq, origin_times, lev: _Levels, profiles, cfg: LSTMConfig) -> np.ndarray:
    """(n, n_static): calendar, level ratios, recent weighted levels, then the lead profiles."""
    H, W = cfg.horizon, cfg.window
    day_f, week_f, prof, cnt = profiles
    mod0 = (origin_times.hour * 60 + origin_times.minute).to_numpy()
    static = np.zeros((len(seq), n_static(H)), dtype=np.float32)
    static[:, 0] = np.sin(2 * np.pi * mod0 / DAY)
    static[:, 1] = np.cos(2 * np.pi * mod0 / DAY)
    if cfg.use_dow:
        dow = origin_times.day_of_week.to_numpy() + mod0 / DAY
        static[:, 2] = np.sin(2 * np.pi * dow / 7)
        static[:, 3] = np.cos(2 * np.pi * dow / 7)
    static[:, 4] = np.nan_to_num(lev.level - lev.day)
    static[:, 5] = np.isfinite(lev.level - lev.day)
    static[:, 6] = np.nan_to_num(lev.level - lev.week)
    static[:, 7] = np.isfinite(lev.level - lev.week)
    static[:, 8] = np.nan_to_num(lev.level - lev.last_24h)
    static[:, 9] = lev.l0 / 10.0
    age = np.arange(W)[::-1].astype(float)  # 0 = the last minute before the origin
    for j, hl in enumerate(_EWM_HALF_LIVES):
        w = 0.5 ** (age / hl)
        num = (seq[..., 0] * w).sum(1)
        den = (seq[..., 1] * w).sum(1)
        static[:, RECENT_COL + j] = np.where(den > 1e-3, num / np.maximum(den, 1e-3), 0.0)
    o = _STATIC_FIXED
    for k, block in enumerate((np.nan_to_num(day_f), np.isfinite(day_f), np.nan_to_num(week_f),
                               np.isfinite(week_f), prof)):
        static[:, o + k * H:o + (k + 1) * H] = block
    static[:, o + 5 * H] = cnt / max(cfg.profile_days, 1)
    return static


def build_features(logv: np.ndarray, logtok: np.ndarray | None, ends: np.ndarray,
                   origin_times: pd.DatetimeIndex, cfg: LSTMConfig) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Inputs for histories ``logv[:e]`` (log1p load; NaN = missing) for each e in ends.

    Returns seq (n, window, N_SEQ) float32, static (n, n_static) float32 and the
    level l (n,) (NaN where no minute of the last day was observed).
    Reads nothing at or after position e (the smoothed profile one day back reads
    at most ``horizon + max(smooth, profile_smooth)`` minutes past e - 1440), and
    nothing before e - ``lookback(cfg)``: many series can be stacked end to end in
    one array (``predict_many``) as long as each has ``lookback`` minutes.
    """
    ends = np.asarray(ends, dtype=np.int64)
    S = _Sums(logv)
    lev = _Levels(S, ends, cfg.level_window, *days(cfg))
    seq = _window_channels(logv, logtok, ends, origin_times, lev, cfg)
    static = _static_features(seq, origin_times, lev, _lead_profiles(S, ends, lev, cfg), cfg)
    return seq, static, lev.level


def training_set(history, cfg: LSTMConfig, max_origins: int | None = None):
    """(ends, seq, static, target) for one origin per minute of the recent history (thinned to
    ``max_origins``, by default ``cfg.max_origins``); the target is the next ``horizon``
    minutes' log load minus the level."""
    max_origins = cfg.max_origins if max_origins is None else max_origins
    s, logv, logtok = series_arrays(history)
    n = len(logv)
    first = max(cfg.window, cfg.level_window, n - cfg.max_train_days * days(cfg)[0])
    ends = np.arange(first, n - 1)  # at least one target minute
    if len(ends) < 20:
        raise InsufficientHistory(f"lstm: {n} minutes of history are too few to train on")
    if len(ends) > max_origins:  # thin evenly, keeping the most recent origin
        stride = int(math.ceil(len(ends) / max_origins))
        ends = ends[::-1][::stride][::-1]
    seq, static, level = build_features(logv, logtok, ends, s.index[ends], cfg)
    tidx = ends[:, None] + np.arange(cfg.horizon)[None, :]
    target = (take(logv, tidx) - level[:, None]).astype(np.float32)
    keep = np.isfinite(level) & np.isfinite(target).any(axis=1) & (seq[:, -cfg.level_window:, 1].sum(1) > 0)
    return ends[keep], seq[keep], static[keep], target[keep]
