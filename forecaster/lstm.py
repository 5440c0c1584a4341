"""The LSTM forecaster: next 30 minutes of load with calibrated P10/P50/P90.

Shape of the model
------------------
* **Per-series scaling.** Every value is taken as ``log1p(requests)`` minus the
  origin's *level* ``l = log1p(mean of the last 30 observed minutes)``, so one
  global model serves deployments of any size; forecasts are ``expm1(l + out)``.
* **Inputs.** An LSTM reads the last ``window`` minutes: the scaled load, an
  observed/missing mask (NaN outage minutes are zero-filled and masked), the same
  minutes one day earlier (scaled by that day's level), and tokens per minute
  when the history has ``input_tokens``/``output_tokens``.  A head adds, for each
  lead 1..H, the load at the same minute one day and one week before (the seasonal
  profile aligned with the lead, scaled by the level of its own day), the mean
  of that profile over the last ``profile_days`` days (far less noisy), the level
  relative to yesterday, last week and the last 24 h, exponentially weighted
  recent levels (half-lives 2-45 min), calendar features of the origin (minute of
  day; day of week only when the training history spans ``dow_min_days`` = 14 days
  or more -- with less, a weekday code is a per-day fingerprint the net overfits
  to), and the absolute log level.  A linear path from the window and the static
  features to the P50 runs beside the LSTM head.
* **Outputs.** Direct multi-horizon: for each lead a P50 plus non-negative
  (softplus) steps down to P10 and up to P90, so quantiles never cross.  Trained
  with pinball loss on the scaled log target; NaN targets are skipped.
* **Training.** One origin per minute of history (the last ``max_train_days``,
  thinned evenly to at most ``max_origins``; each epoch draws ``epoch_fraction``
  of them), a time-ordered
  split (the last ``val_fraction`` is validation), AdamW, dropout, early stopping
  on the validation pinball loss, a fixed seed, a tqdm progress bar; an ensemble
  of ``members`` seeds is averaged.  With ``refit_full`` (default) each member is
  then retrained on all origins, validation day included, for the number of epochs
  early stopping chose (the most recent day is the most informative one).  After training, the band is widened or
  narrowed on the validation split (conformal-style scaling of the lower and upper
  half-widths) so that P10 and P90 land near their nominal coverage, with a small
  margin (``cal_margin``: P90 is set to cover 92 % of validation) because live
  forecasts run further from the training data than the validation split does.

Online use
----------
``fit(history)`` then any of:

* ``predict(history, horizon=30)`` -> :class:`Forecast` for the minutes after the
  history (about 2 ms on 2 cores);
* ``predict_many({name: history, ...})`` -> ``{name: Forecast}``: one batched
  forward pass for many deployments (1,000 in about 0.25 s);
* ``predict_origins(history, origins)`` -> ``[Forecast, ...]``: many origins of
  one series in one batched pass, each from the minutes strictly before it (what
  the backtest and the fleet simulator use).

``to_artifact()`` / ``from_artifact()`` give plain tensors plus JSON metadata for
the registry (no pickles).
"""
from __future__ import annotations

import copy
import math
import os
import time
from dataclasses import asdict, dataclass
from typing import Mapping, Sequence

import numpy as np
import pandas as pd

from forecaster.base import (
    DAY,
    DEFAULT_QUANTILES,
    MINUTE,
    InsufficientHistory,
    WEEK,
    BaseForecaster,
    Forecast,
    minute_series,
    tokens_series,
)

ARTIFACT_FORMAT = 1
FEATURE_SET = "lstm-v3"  # bump when the inputs change: older artifacts are refused



@dataclass
class LSTMConfig:
    horizon: int = 30
    window: int = 60
    level_window: int = 30
    hidden: int = 32
    head_hidden: int = 64
    dropout: float = 0.2
    levels: tuple[float, ...] = (0.1, 0.5, 0.9)
    members: int = 2
    epochs: int = 24
    epoch_fraction: float = 0.5  # share of the training origins drawn per epoch (neighbours overlap)
    patience: int = 6
    min_epochs: int = 10  # early stopping cannot stop before this
    batch_size: int = 512
    lr: float = 4e-3
    weight_decay: float = 1e-3
    val_fraction: float = 0.2
    max_train_days: int = 28  # origins older than this are not used for training
    max_origins: int = 12_000  # cap on training origins (thinned evenly over max_train_days)
    seed: int = 0
    threads: int = 2
    calibrate: bool = True
    refit_full: bool = True  # after early stopping, retrain each member on all origins for its best epoch count
    token_dropout: float = 0.3  # share of training windows shown without their tokens (serve either way)
    cal_margin: float = 0.02  # calibrate the outer levels this much wider on validation (drift allowance)
    smooth: int = 7  # half-width (minutes) of the moving average on the day/week-before profile
    profile_days: int = 7  # days averaged into the mean daily profile input
    profile_smooth: int = 15  # half-width of its moving average
    dow_min_days: int = 14  # day-of-week inputs only when the training history spans this many days
    use_dow: bool | None = None  # decided by fit (None: not fitted yet)
    time_budget_s: float = 110.0  # safety stop for adding epochs (all members together)

    @classmethod
    def tiny(cls, **kw) -> "LSTMConfig":
        """For tests: trains in about a second."""
        base = dict(window=30, hidden=8, head_hidden=16, members=1, epochs=3, patience=2, min_epochs=1,
                    batch_size=128, epoch_fraction=1.0, max_origins=2500)
        base.update(kw)
        return cls(**base)


# -------------------------------------------------------------------- features
N_SEQ = 8  # channels per window step
_STATIC_FIXED = 14  # non-lead static features
_EWM_HALF_LIVES = (2.0, 5.0, 15.0, 45.0)  # minutes: recent levels relative to l


def n_static(horizon: int) -> int:
    return _STATIC_FIXED + 5 * horizon + 1


def _take(v: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """v[idx] with NaN where idx is out of range."""
    ok = (idx >= 0) & (idx < len(v))
    return np.where(ok, v[np.clip(idx, 0, max(len(v) - 1, 0))], np.nan)


class _Sums:
    """Prefix sums of a series with NaN: the mean of any window in O(1)."""

    def __init__(self, v: np.ndarray) -> None:
        ok = np.isfinite(v)
        self.c = np.concatenate([[0.0], np.cumsum(np.where(ok, v, 0.0))])
        self.m = np.concatenate([[0], np.cumsum(ok)])
        self.n = len(v)

    def mean(self, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        """nanmean of v[lo:hi] (clipped to the series), NaN where nothing is observed."""
        lo = np.clip(lo, 0, self.n)
        hi = np.clip(hi, 0, self.n)
        cnt = self.m[hi] - self.m[lo]
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(cnt > 0, (self.c[hi] - self.c[lo]) / np.maximum(cnt, 1), np.nan)

    def smooth_at(self, p: np.ndarray, k: int) -> np.ndarray:
        """Centred moving average (width 2k+1) at positions p; NaN where p is outside the series."""
        return np.where((p >= 0) & (p < self.n), self.mean(p - k, p + k + 1), np.nan)


def build_features(lv: np.ndarray, ltok: np.ndarray | None, ends: np.ndarray, origin_times: pd.DatetimeIndex,
                   cfg: LSTMConfig) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Inputs for histories ``lv[:e]`` (log1p load; NaN = missing) for each e in ends.

    Returns seq (n, window, N_SEQ) float32, static (n, n_static) float32 and the
    level l (n,) (NaN where no minute of the last day was observed).
    Reads nothing at or after position e (the smoothed profile one day back reads
    at most ``horizon + max(smooth, profile_smooth)`` minutes past e - 1440), and
    nothing before e - ``lookback(cfg)``: many series can be stacked end to end in
    one array (``predict_many``) as long as each has ``lookback`` minutes.
    """
    W, H, L = cfg.window, cfg.horizon, cfg.level_window
    ends = np.asarray(ends, dtype=np.int64)
    n = len(ends)
    S = _Sums(lv)
    level = S.mean(ends - L, ends)
    # no minute in the level window: the last day's observed mean
    miss = ~np.isfinite(level)
    if miss.any():
        level[miss] = S.mean(ends[miss] - DAY, ends[miss])
    lev_day = S.mean(ends - DAY - L, ends - DAY)
    lev_week = S.mean(ends - WEEK - L, ends - WEEK)
    lev_24h = S.mean(ends - DAY, ends)
    lev0 = np.nan_to_num(level)

    widx = ends[:, None] + np.arange(-W, 0)[None, :]
    cur = _take(lv, widx)
    prev = _take(lv, widx - DAY)
    seq = np.zeros((n, W, N_SEQ), dtype=np.float32)
    seq[..., 0] = np.nan_to_num(cur - lev0[:, None])
    seq[..., 1] = np.isfinite(cur)
    seq[..., 2] = np.nan_to_num(prev - np.nan_to_num(lev_day)[:, None])
    seq[..., 3] = np.isfinite(prev) & np.isfinite(lev_day)[:, None]
    if ltok is not None:
        tlev = _Sums(ltok).mean(ends - L, ends)
        tok = _take(ltok, widx)
        seq[..., 4] = np.nan_to_num(tok - np.nan_to_num(tlev)[:, None])
        seq[..., 5] = np.isfinite(tok) & np.isfinite(tlev)[:, None]
    # position in the window relative to the origin, and minute of day of each step
    seq[..., 6] = np.linspace(-1, 0, W)[None, :]
    mod0 = (origin_times.hour * 60 + origin_times.minute).to_numpy()
    seq[..., 7] = np.sin(2 * np.pi * ((mod0[:, None] + np.arange(-W, 0)[None, :]) % DAY) / DAY)

    lidx = ends[:, None] + np.arange(H)[None, :]
    k1, k2 = cfg.smooth, cfg.profile_smooth
    day_f = S.smooth_at(lidx - DAY, k1) - lev_day[:, None]
    week_f = S.smooth_at(lidx - WEEK, k1) - lev_week[:, None]
    # mean profile over the last profile_days days: how load moved from this minute of
    # the day to each lead, each day relative to its own level at the origin's minute
    prof = np.zeros((n, H))
    cnt = np.zeros(n)
    for d in range(1, cfg.profile_days + 1):
        lev_d = S.mean(ends - d * DAY - L, ends - d * DAY)
        v = S.smooth_at(lidx - d * DAY, k2) - lev_d[:, None]
        ok = np.isfinite(v).all(axis=1)
        prof[ok] += v[ok]
        cnt += ok
    prof = np.where(cnt[:, None] > 0, prof / np.maximum(cnt, 1)[:, None], 0.0)
    static = np.zeros((n, n_static(H)), dtype=np.float32)
    dow = origin_times.day_of_week.to_numpy() + mod0 / DAY
    static[:, 0] = np.sin(2 * np.pi * mod0 / DAY)
    static[:, 1] = np.cos(2 * np.pi * mod0 / DAY)
    if cfg.use_dow:
        static[:, 2] = np.sin(2 * np.pi * dow / 7)
        static[:, 3] = np.cos(2 * np.pi * dow / 7)
    static[:, 4] = np.nan_to_num(level - lev_day)
    static[:, 5] = np.isfinite(level - lev_day)
    static[:, 6] = np.nan_to_num(level - lev_week)
    static[:, 7] = np.isfinite(level - lev_week)
    static[:, 8] = np.nan_to_num(level - lev_24h)
    static[:, 9] = lev0 / 10.0
    age = np.arange(W)[::-1].astype(float)  # 0 = the last minute before the origin
    for j, hl in enumerate(_EWM_HALF_LIVES):
        w = 0.5 ** (age / hl)
        num = (seq[..., 0] * w).sum(1)
        den = (seq[..., 1] * w).sum(1)
        static[:, 10 + j] = np.where(den > 1e-3, num / np.maximum(den, 1e-3), 0.0)
    o = _STATIC_FIXED
    static[:, o:o + H] = np.nan_to_num(day_f)
    static[:, o + H:o + 2 * H] = np.isfinite(day_f)
    static[:, o + 2 * H:o + 3 * H] = np.nan_to_num(week_f)
    static[:, o + 3 * H:o + 4 * H] = np.isfinite(week_f)
    static[:, o + 4 * H:o + 5 * H] = prof
    static[:, o + 5 * H] = cnt / max(cfg.profile_days, 1)
    return seq, static, level


def lookback(cfg: LSTMConfig) -> int:
    """Minutes before an origin that its features can read."""
    return WEEK + max(cfg.level_window, cfg.smooth + 1, cfg.profile_smooth + 1, cfg.window) + 1


# ------------------------------------------------------------------------ net
def _torch():
    import torch

    return torch


def _make_net(cfg: LSTMConfig):
    torch = _torch()
    nn = torch.nn

    class QuantileLSTM(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            H, Q = cfg.horizon, len(cfg.levels)
            S = n_static(H)
            self.lstm = nn.LSTM(N_SEQ, cfg.hidden, batch_first=True)
            self.head = nn.Sequential(
                nn.Linear(cfg.hidden + S, cfg.head_hidden), nn.GELU(), nn.Dropout(cfg.dropout),
                nn.Linear(cfg.head_hidden, H * Q),
            )
            self.skip = nn.Linear(S + cfg.window, H)  # linear path: window + seasonal profile -> P50
            self.mid = list(cfg.levels).index(0.5)
            self.H, self.Q = H, Q
            self.drop = nn.Dropout(cfg.dropout)

        def forward(self, seq, static):
            _, (h, _) = self.lstm(seq)
            z = torch.cat([self.drop(h[-1]), static], dim=1)
            raw = self.head(z).view(-1, self.H, self.Q)
            base = raw[..., self.mid] + self.skip(torch.cat([seq[..., 0], static], dim=1))
            outs = [None] * self.Q
            outs[self.mid] = base
            q = base
            for i in range(self.mid - 1, -1, -1):  # down from P50: cumulative softplus steps
                q = q - nn.functional.softplus(raw[..., i]) - 1e-4
                outs[i] = q
            q = base
            for i in range(self.mid + 1, self.Q):
                q = q + nn.functional.softplus(raw[..., i]) + 1e-4
                outs[i] = q
            return torch.stack(outs, dim=-1)  # (B, H, Q)

    return QuantileLSTM()


def pinball_loss(pred, target, levels):
    """Mean pinball loss over non-NaN targets; pred (B,H,Q), target (B,H)."""
    torch = _torch()
    lv = torch.as_tensor(levels, dtype=pred.dtype)
    mask = torch.isfinite(target)
    t = torch.nan_to_num(target)[..., None]
    d = t - pred
    loss = torch.maximum(lv * d, (lv - 1) * d).mean(-1)
    return (loss * mask).sum() / mask.sum().clamp(min=1)


# ---------------------------------------------------------------------- model
class LSTMForecaster(BaseForecaster):
    """Global LSTM with quantile heads; see the module docstring."""

    name = "lstm"
    min_history = 60

    def __init__(self, config: LSTMConfig | None = None, progress: bool = True, **overrides) -> None:
        cfg = copy.deepcopy(config) if config is not None else LSTMConfig()
        if overrides:
            cfg = LSTMConfig(**{**asdict(cfg), **overrides})
        cfg.levels = tuple(float(q) for q in cfg.levels)
        if 0.5 not in cfg.levels:
            raise ValueError("levels must include 0.5")
        self.cfg = cfg
        self.progress = progress
        self.nets: list = []
        self.scale = {"lo": 1.0, "hi": 1.0}  # conformal band factors (log space)
        self.version = "0"
        self.meta: dict = {}
        self.fit_seconds = 0.0

    # ------------------------------------------------------------ training
    @staticmethod
    def _series_arrays(history) -> tuple[pd.Series, np.ndarray, np.ndarray | None]:
        s = minute_series(history)
        lv = np.log1p(np.clip(s.to_numpy(dtype=float), 0, None))
        tok = tokens_series(history) if isinstance(history, pd.DataFrame) else None
        ltok = None
        if tok is not None:
            tok = tok.reindex(s.index) if len(tok) != len(s) else tok
            ltok = np.log1p(np.clip(tok.to_numpy(dtype=float), 0, None))
        return s, lv, ltok

    def _dataset(self, history):
        cfg = self.cfg
        s, lv, ltok = self._series_arrays(history)
        n = len(lv)
        first = max(cfg.window, cfg.level_window, n - cfg.max_train_days * DAY)
        ends = np.arange(first, n - 1)  # at least one target minute
        if len(ends) < 20:
            raise InsufficientHistory(f"lstm: {n} minutes of history are too few to train on")
        if len(ends) > cfg.max_origins:  # thin evenly, keeping the most recent origin
            stride = int(math.ceil(len(ends) / cfg.max_origins))
            ends = ends[::-1][::stride][::-1]
        times = s.index[ends]
        seq, static, level = build_features(lv, ltok, ends, times, cfg)
        tidx = ends[:, None] + np.arange(cfg.horizon)[None, :]
        target = (_take(lv, tidx) - level[:, None]).astype(np.float32)
        keep = np.isfinite(level) & np.isfinite(target).any(axis=1) & (seq[:, -cfg.level_window:, 1].sum(1) > 0)
        return ends[keep], seq[keep], static[keep], target[keep], level[keep]

    def fit(self, history) -> "LSTMForecaster":
        torch = _torch()
        from tqdm.auto import tqdm

        cfg = self.cfg
        t_start = time.perf_counter()
        old_threads = torch.get_num_threads()
        torch.set_num_threads(max(1, min(cfg.threads, os.cpu_count() or 1)))
        try:
            span_days = len(minute_series(history)) / DAY
            cfg.use_dow = bool(span_days >= cfg.dow_min_days)
            ends, seq, static, target, _ = self._dataset(history)
            n = len(ends)
            # time-ordered split; training targets must not reach into the validation part
            n_val = max(int(n * cfg.val_fraction), min(n // 4, 60))
            val_start = ends[n - n_val]
            tr = np.flatnonzero(ends + cfg.horizon <= val_start)
            va = np.arange(n - n_val, n)
            if len(tr) < 10:
                tr = np.arange(0, n - n_val)
            T = lambda a: torch.from_numpy(np.ascontiguousarray(a))  # noqa: E731
            Xs, Xf, Y = T(seq), T(static), T(target)
            self.nets = []
            budget = cfg.time_budget_s / max(cfg.members, 1) / (2 if cfg.refit_full else 1)
            bar = tqdm(total=cfg.members * cfg.epochs, desc="training lstm", unit="epoch",
                       disable=not self.progress, leave=False)
            hist = []
            for m in range(cfg.members):
                net, best_val, epochs, best_ep = self._train_one(cfg.seed + m, Xs, Xf, Y, tr, va, bar, budget)
                self.nets.append(net)
                hist.append({"member": m, "best_val_pinball": best_val, "epochs": epochs, "best_epoch": best_ep})
            bar.close()
            for net in self.nets:
                net.eval()
            val_pred = self._forward(Xs[va], Xf[va])
            if cfg.calibrate:
                self.scale = self._calibrate(val_pred, target[va])
            if cfg.refit_full:  # the band factors stay those measured out of sample above
                everything = np.arange(n)
                self.nets = [self._train_one(cfg.seed + m, Xs, Xf, Y, everything, None, None, budget,
                                             fixed_epochs=h["best_epoch"])[0] for m, h in enumerate(hist)]
                for net in self.nets:
                    net.eval()
            cal_pred = self._apply_scale(val_pred)
            s = minute_series(history)
            self.meta = {
                "train_start": str(s.index[0]), "train_end": str(s.index[-1]),
                "train_origins": int(len(tr)), "val_origins": int(len(va)),
                "val_start": str(s.index[val_start]),
                "members": hist,
                "val_metrics": self._log_metrics(cal_pred, target[va]),
                "has_tokens": bool(np.any(seq[:, :, 5])),
            }
        finally:
            torch.set_num_threads(old_threads)
        self.fit_seconds = time.perf_counter() - t_start
        self.meta["fit_seconds"] = round(self.fit_seconds, 2)
        self.version = self.version if self.version != "0" else "1"
        return self

    def _train_one(self, seed, Xs, Xf, Y, tr, va, bar, budget, fixed_epochs: int | None = None):
        torch = _torch()
        cfg = self.cfg
        torch.manual_seed(seed)
        rng = np.random.default_rng(seed)
        net = _make_net(cfg)
        opt = torch.optim.AdamW(net.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
        sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=cfg.epochs, eta_min=cfg.lr * 0.05)
        best, best_state, bad, epochs, best_ep = math.inf, None, 0, 0, 0
        has_tok = bool(Xs[:, :, 5].any())
        t0 = time.perf_counter()
        for ep in range(fixed_epochs if fixed_epochs is not None else cfg.epochs):
            net.train()
            perm = tr[rng.permutation(len(tr))[: max(int(len(tr) * cfg.epoch_fraction), 1)]]
            for i in range(0, len(perm), cfg.batch_size):
                b = torch.from_numpy(perm[i:i + cfg.batch_size])
                xs = Xs[b]
                if has_tok and cfg.token_dropout > 0:  # teach the net to answer without tokens too
                    drop = torch.from_numpy(rng.random(len(b)) < cfg.token_dropout)
                    xs = xs.clone()
                    xs[drop, :, 4:6] = 0.0
                loss = pinball_loss(net(xs, Xf[b]), Y[b], cfg.levels)
                opt.zero_grad()
                loss.backward()
                torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
                opt.step()
            sched.step()
            epochs = ep + 1
            if va is None:  # fixed number of epochs, no validation
                if time.perf_counter() - t0 > budget:
                    break
                continue
            net.eval()
            with torch.no_grad():
                vb = torch.from_numpy(va)
                val = float(pinball_loss(net(Xs[vb], Xf[vb]), Y[vb], cfg.levels))
            bar.update(1)
            bar.set_postfix(val_pinball=f"{val:.4f}")
            if val < best - 1e-6:
                best, bad, best_ep = val, 0, epochs
                best_state = copy.deepcopy(net.state_dict())
            else:
                bad += 1
                if bad >= cfg.patience and epochs >= cfg.min_epochs:
                    break
            if time.perf_counter() - t0 > budget:
                break
        if bar is not None:
            bar.update(cfg.epochs - epochs)
        if best_state is not None:
            net.load_state_dict(best_state)
        return net, best, epochs, best_ep

    def _forward(self, Xs, Xf) -> np.ndarray:
        torch = _torch()
        with torch.inference_mode():
            outs = [net(Xs, Xf) for net in self.nets]
            return torch.stack(outs).mean(0).numpy()

    def _calibrate(self, pred: np.ndarray, target: np.ndarray) -> dict[str, float]:
        """Factors on the lower/upper half-widths making P10/P90 coverage nominal on validation."""
        lv = self.cfg.levels
        mid = lv.index(0.5)
        base = pred[..., mid]
        ok = np.isfinite(target)
        out = {"lo": 1.0, "hi": 1.0}
        if ok.sum() < 50:
            return out
        y, b = target[ok], base[ok]
        up = (pred[..., -1])[ok] - b
        dn = b - (pred[..., 0])[ok]
        r_hi = (y - b) / np.maximum(up, 1e-6)
        r_lo = (b - y) / np.maximum(dn, 1e-6)
        m = self.cfg.cal_margin
        out["hi"] = float(np.clip(np.quantile(r_hi, min(lv[-1] + m, 0.995)), 0.3, 4.0))
        out["lo"] = float(np.clip(np.quantile(r_lo, min(1 - lv[0] + m, 0.995)), 0.3, 4.0))
        return out

    def _apply_scale(self, pred: np.ndarray) -> np.ndarray:
        mid = self.cfg.levels.index(0.5)
        base = pred[..., mid:mid + 1]
        out = pred.copy()
        out[..., :mid] = base - (base - pred[..., :mid]) * self.scale["lo"]
        out[..., mid + 1:] = base + (pred[..., mid + 1:] - base) * self.scale["hi"]
        return out

    def _log_metrics(self, pred: np.ndarray, target: np.ndarray) -> dict:
        ok = np.isfinite(target)
        mid = self.cfg.levels.index(0.5)
        return {
            "log_mae": round(float(np.abs(pred[..., mid] - target)[ok].mean()), 5),
            "coverage_p90": round(float((target <= pred[..., -1])[ok].mean()), 4),
            "coverage_p10": round(float((target <= pred[..., 0])[ok].mean()), 4),
            "band_scale": dict(self.scale),
        }

    # ------------------------------------------------------------ inference
    def _check_fitted(self) -> None:
        if not self.nets:
            raise RuntimeError("LSTMForecaster is not fitted (call fit or load an artifact)")

    def _forecasts(self, seq, static, level, origins, horizon, quantiles) -> list[Forecast]:
        torch = _torch()
        cfg = self.cfg
        pred = self._apply_scale(self._forward(torch.from_numpy(seq), torch.from_numpy(static)))
        pred = pred[:, :horizon] + level[:, None, None]
        vals = np.maximum(np.expm1(pred), 0.0)
        levels = list(cfg.levels)
        mid = levels.index(0.5)
        out = []
        for i, o in enumerate(origins):
            qd = {lv: vals[i, :, j] for j, lv in enumerate(levels)}
            for q in quantiles:
                q = float(q)
                if q not in qd:
                    qd[q] = np.maximum(np.expm1(self._extra_quantile(pred[i], q)), 0.0)
            qd = {q: qd[q] for q in sorted(qd)}
            out.append(Forecast(pd.Timestamp(o), vals[i, :, mid].copy(), qd, self.name, self.version))
        return out

    def _extra_quantile(self, pred_log: np.ndarray, q: float) -> np.ndarray:
        """A level the net was not trained for: interpolate, or extend the outer half-width
        as a normal tail would."""
        from scipy.stats import norm

        levels = np.array(self.cfg.levels)
        if levels[0] <= q <= levels[-1]:
            return np.array([np.interp(q, levels, pred_log[h]) for h in range(len(pred_log))])
        mid = list(levels).index(0.5)
        if q > levels[-1]:
            width = pred_log[:, -1] - pred_log[:, mid]
            return pred_log[:, mid] + width * norm.ppf(q) / norm.ppf(levels[-1])
        width = pred_log[:, mid] - pred_log[:, 0]
        return pred_log[:, mid] - width * norm.ppf(1 - q) / norm.ppf(1 - levels[0])

    def _horizon_ok(self, horizon: int) -> None:
        if horizon > self.cfg.horizon:
            raise ValueError(f"lstm was trained for {self.cfg.horizon} leads, asked for {horizon}")

    def predict(self, history, horizon: int = 30, quantiles: Sequence[float] = DEFAULT_QUANTILES) -> Forecast:
        self._check_fitted()
        self._horizon_ok(horizon)
        need = lookback(self.cfg)
        h = history.iloc[-need:] if len(history) > need else history
        s, lv, ltok = self._series_arrays(h)
        if len(s) == 0:
            raise InsufficientHistory("lstm: empty history")
        seq, static, level = build_features(lv, ltok, np.array([len(lv)]), pd.DatetimeIndex([s.index[-1] + MINUTE]),
                                            self.cfg)
        if not np.isfinite(level).all():
            raise InsufficientHistory("lstm: no observed minute in the last day")
        return self._forecasts(seq, static, level, [s.index[-1] + MINUTE], horizon, quantiles)[0]

    def predict_origins(self, history, origins, horizon: int = 30,
                        quantiles: Sequence[float] = DEFAULT_QUANTILES) -> list[Forecast]:
        """One forecast per origin, each from the minutes of ``history`` strictly before it,
        in one batched pass."""
        self._check_fitted()
        self._horizon_ok(horizon)
        s, lv, ltok = self._series_arrays(history)
        origins = pd.DatetimeIndex(origins)
        ends = ((origins - s.index[0]) // MINUTE).to_numpy().astype(np.int64)
        if (ends < 1).any():
            raise InsufficientHistory("lstm: an origin has no history before it")
        # an origin past the end of the history: pad NaN (never read past the origin anyway)
        if ends.max() > len(lv):
            pad = int(ends.max() - len(lv))
            lv = np.concatenate([lv, np.full(pad, np.nan)])
            ltok = None if ltok is None else np.concatenate([ltok, np.full(pad, np.nan)])
        seq, static, level = build_features(lv, ltok, ends, origins, self.cfg)
        if not np.isfinite(level).all():
            raise InsufficientHistory("lstm: an origin has no observed minute in the day before it")
        return self._forecasts(seq, static, level, origins, horizon, quantiles)

    def predict_many(self, histories: Mapping[str, pd.Series | pd.DataFrame], horizon: int = 30,
                     quantiles: Sequence[float] = DEFAULT_QUANTILES) -> dict[str, Forecast]:
        """Forecast many deployments in one batched forward pass.

        A deployment whose history cannot be used (empty, no observed minute in the
        last day) is left out of the answer; callers fall back for it.
        """
        self._check_fitted()
        self._horizon_ok(horizon)
        need = lookback(self.cfg)
        names, blocks, tblocks, origins = [], [], [], []
        for name, hist in histories.items():
            if len(hist) == 0:
                continue
            s, lv, ltok = self._series_arrays(hist.iloc[-need:])
            lv = lv[-need:]
            block = np.full(need, np.nan)
            block[need - len(lv):] = lv
            tblock = None
            if ltok is not None:
                tblock = np.full(need, np.nan)
                tblock[need - len(lv):] = ltok[-need:]
            names.append(name)
            blocks.append(block)
            tblocks.append(tblock)
            origins.append(s.index[-1] + MINUTE)
        if not names:
            return {}
        # every series in its own block of `need` minutes, end to end: one feature pass
        lv_all = np.concatenate(blocks)
        ltok_all = None
        if any(t is not None for t in tblocks):
            ltok_all = np.concatenate([t if t is not None else np.full(need, np.nan) for t in tblocks])
        ends = (np.arange(len(names)) + 1) * need
        origins = pd.DatetimeIndex(origins)
        seq, static, level = build_features(lv_all, ltok_all, ends, origins, self.cfg)
        keep = np.flatnonzero(np.isfinite(level))  # no observed minute in the last day: left out
        if not len(keep):
            return {}
        fcs = self._forecasts(seq[keep], static[keep], level[keep], origins[keep], horizon, quantiles)
        return {names[i]: f for i, f in zip(keep, fcs)}

    # ------------------------------------------------------------ artifacts
    def to_artifact(self) -> tuple[dict, dict]:
        """(tensors, metadata): flat name -> tensor dict and JSON-able metadata."""
        self._check_fitted()
        tensors = {}
        for i, net in enumerate(self.nets):
            for k, v in net.state_dict().items():
                tensors[f"m{i}.{k}"] = v.detach().clone().contiguous()
        meta = {
            "format": ARTIFACT_FORMAT, "feature_set": FEATURE_SET, "kind": "lstm",
            "config": {**asdict(self.cfg), "levels": list(self.cfg.levels)},
            "band_scale": dict(self.scale), "members": len(self.nets), "training": self.meta,
        }
        return tensors, meta

    @classmethod
    def from_artifact(cls, tensors: Mapping, meta: Mapping) -> "LSTMForecaster":
        if meta.get("kind") != "lstm":
            raise ValueError(f"artifact kind {meta.get('kind')!r} is not 'lstm'")
        if meta.get("format") != ARTIFACT_FORMAT or meta.get("feature_set") != FEATURE_SET:
            raise ValueError(f"artifact format {meta.get('format')}/{meta.get('feature_set')} is incompatible "
                             f"with this code ({ARTIFACT_FORMAT}/{FEATURE_SET}); retrain it")
        known = set(LSTMConfig.__dataclass_fields__)
        cfg_d = {k: v for k, v in dict(meta["config"]).items() if k in known}
        cfg_d["levels"] = tuple(cfg_d.get("levels", (0.1, 0.5, 0.9)))
        model = cls(LSTMConfig(**cfg_d), progress=False)
        nets = []
        for i in range(int(meta["members"])):
            net = _make_net(model.cfg)
            prefix = f"m{i}."
            sd = {k[len(prefix):]: v for k, v in tensors.items() if k.startswith(prefix)}
            net.load_state_dict(sd, strict=True)  # raises on missing / mis-shaped weights
            net.eval()
            nets.append(net)
        model.nets = nets
        model.scale = {k: float(v) for k, v in dict(meta.get("band_scale", {"lo": 1, "hi": 1})).items()}
        model.meta = dict(meta.get("training", {}))
        return model
