"""Training: a time-ordered split, an ensemble of seeded members with early stopping,
a refit on every origin, then per-level calibration on the validation split.

Reproducible: the same data, seed and configuration give the same weights bit for
bit on the same machine however loaded -- a fixed torch thread count, deterministic
algorithms, seeded generators, and no wall-clock stop unless the configuration sets
``time_budget_s`` (and then the metadata says when it fired).
"""
from __future__ import annotations

import copy
import math
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator

import numpy as np

from forecaster.lstm.config import LSTMConfig
from forecaster.lstm.network import make_net, pinball_loss, torch_module


@contextmanager
def reproducible(threads: int) -> Iterator[None]:
    """Fixed thread count and deterministic kernels while training; restored afterwards."""
    torch = torch_module()
    old_threads, old_det = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    torch.set_num_threads(max(1, int(threads)))
    torch.use_deterministic_algorithms(True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(old_det)
        torch.set_num_threads(old_threads)


@dataclass
class MemberRun:
    net: object
    best_val: float
    epochs: int
    best_epoch: int
    budget_fired: bool


class Budget:
    """The optional wall-clock stop of one member's training (None: never fires)."""

    def __init__(self, seconds: float | None) -> None:
        self.seconds = seconds
        self.t0 = time.perf_counter()

    def spent(self) -> bool:
        return self.seconds is not None and time.perf_counter() - self.t0 > self.seconds


def split(ends: np.ndarray, cfg: LSTMConfig) -> tuple[np.ndarray, np.ndarray, int]:
    """(train rows, validation rows, validation start position): training targets never
    reach into the validation part."""
    n = len(ends)
    n_val = max(int(n * cfg.val_fraction), min(n // 4, 60))
    val_start = int(ends[n - n_val])
    tr = np.flatnonzero(ends + cfg.horizon <= val_start)
    if len(tr) < 10:
        tr = np.arange(0, n - n_val)
    return tr, np.arange(n - n_val, n), val_start


def _epoch(net, opt, tensors, perm: np.ndarray, rng, cfg: LSTMConfig, has_tok: bool) -> None:
    torch = torch_module()
    Xs, Xf, Y = tensors
    net.train()
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


def _val_loss(net, tensors, va: np.ndarray, levels) -> float:
    torch = torch_module()
    Xs, Xf, Y = tensors
    net.eval()
    with torch.no_grad():
        vb = torch.from_numpy(va)
        return float(pinball_loss(net(Xs[vb], Xf[vb]), Y[vb], levels))


def train_member(seed: int, tensors, tr: np.ndarray, va: np.ndarray | None, cfg: LSTMConfig,
                 budget_s: float | None, fixed_epochs: int | None = None, bar=None) -> MemberRun:
    """One seeded member: early stopping on ``va``, or ``fixed_epochs`` without validation."""
    torch = torch_module()
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    net = make_net(cfg)
    opt = torch.optim.AdamW(net.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=cfg.epochs, eta_min=cfg.lr * 0.05)
    best, best_state, bad, epochs, best_ep = math.inf, None, 0, 0, 0
    has_tok = bool(tensors[0][:, :, 5].any())
    budget = Budget(budget_s)
    fired = False
    for ep in range(fixed_epochs if fixed_epochs is not None else cfg.epochs):
        perm = tr[rng.permutation(len(tr))[: max(int(len(tr) * cfg.epoch_fraction), 1)]]
        _epoch(net, opt, tensors, perm, rng, cfg, has_tok)
        sched.step()
        epochs = ep + 1
        if va is not None:
            val = _val_loss(net, tensors, va, cfg.levels)
            if bar is not None:
                bar.update(1)
                bar.set_postfix(val_pinball=f"{val:.4f}")
            if val < best - 1e-6:
                best, bad, best_ep = val, 0, epochs
                best_state = copy.deepcopy(net.state_dict())
            else:
                bad += 1
                if bad >= cfg.patience and epochs >= cfg.min_epochs:
                    break
        if budget.spent():
            fired = True
            break
    if bar is not None:
        bar.update(cfg.epochs - epochs)
    if best_state is not None:
        net.load_state_dict(best_state)
    net.eval()
    return MemberRun(net, best, epochs, best_ep, fired)


# ------------------------------------------------------------------ calibration
def lead_buckets(horizon: int, edges: tuple[int, ...]) -> list[slice]:
    """Lead ranges calibrated together: leads 1..edges[0], then up to each next edge, then the rest."""
    cuts = [0, *sorted(e for e in edges if 0 < e < horizon), horizon]
    return [slice(a, b) for a, b in zip(cuts[:-1], cuts[1:])]


def calibrate(pred: np.ndarray, target: np.ndarray, levels: tuple[float, ...], margin: float,
              edges: tuple[int, ...] = ()) -> dict[str, list[float]]:
    """Split-conformal factors on each level's distance from P50, per level and lead bucket, from
    the held-back validation slice (never the test window): the factor is the quantile of the
    actual's distance over the head's at the coverage wanted, the level's nominal one ``margin``
    wider (at most 0.995: live forecasts run further from the training data than validation).
    A bucket with too few validation points uses the whole horizon's factor.
    pred (n, H, Q), target (n, H)."""
    mid = levels.index(0.5)
    H = pred.shape[1]
    out = {str(q): [1.0] * H for q in levels if q != 0.5}
    for j, q in enumerate(levels):
        if q == 0.5:
            continue
        cover = min((q if q > 0.5 else 1 - q) + margin, 0.995)
        whole = _conformal(pred[..., j], pred[..., mid], target, q, cover)
        if whole is None:
            continue
        for b in lead_buckets(H, edges):
            f = _conformal(pred[:, b, j], pred[:, b, mid], target[:, b], q, cover)
            out[str(q)][b] = [whole if f is None else f] * (b.stop - b.start)
    return out


def _conformal(level: np.ndarray, mid: np.ndarray, target: np.ndarray, q: float, cover: float) -> float | None:
    """The factor on |level - mid| that covers ``cover`` of the finite targets (None: too few)."""
    ok = np.isfinite(target)
    # enough points that the wanted quantile lies inside the sample (P99 at 0.995: >= 400)
    if ok.sum() < max(50, 2 / (1 - cover)):
        return None
    y, b = target[ok], mid[ok]
    dist = np.maximum(np.abs(level[ok] - b), 1e-6)
    r = (y - b) / dist if q > 0.5 else (b - y) / dist
    return float(np.clip(np.quantile(r, cover), 0.3, 4.0))


def apply_scale(pred: np.ndarray, scale: dict, levels: tuple[float, ...]) -> np.ndarray:
    """Scaled distances from P50, sorted per lead so that the levels never cross.  A level's
    factor is one number (older artifacts) or one per lead."""
    mid = levels.index(0.5)
    base = pred[..., mid]
    out = pred.copy()
    H = pred.shape[-2]
    for j, q in enumerate(levels):
        if q != 0.5:
            f = np.asarray(scale.get(str(q), 1.0), dtype=pred.dtype)
            out[..., j] = base + (pred[..., j] - base) * (f if f.ndim == 0 else f[:H])
    return np.sort(out, axis=-1)


def log_metrics(pred: np.ndarray, target: np.ndarray, levels: tuple[float, ...], scale: dict) -> dict:
    ok = np.isfinite(target)
    mid = levels.index(0.5)
    out = {"log_mae": round(float(np.abs(pred[..., mid] - target)[ok].mean()), 5)}
    for j, q in enumerate(levels):
        out[f"coverage_p{round(q * 100)}"] = round(float((target <= pred[..., j])[ok].mean()), 4)
        d = np.nan_to_num(target)[ok] - pred[..., j][ok]
        out[f"log_pinball_p{round(q * 100)}"] = round(float(np.maximum(q * d, (q - 1) * d).mean()), 5)
    out["band_scale"] = dict(scale)
    return out
