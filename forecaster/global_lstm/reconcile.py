"""A deployment's forecast from its clients': base forecasts of the total and of every client
made coherent (the clients' P50s sum to the total's) by one of three methods, the one chosen on
the development split.

* ``bottom_up``: the total is the sum of the clients' forecasts; clients unchanged.
* ``top_down``: the clients are the total's forecast split by their historical proportions
  (each client's mean over the training data over the total's mean: Gross and Sohl's
  "proportions of the historical averages"); the total unchanged.
* ``mint_shrink``: the minimum-trace combination (Wickramasuriya, Athanasopoulos and Hyndman 2019)
  ``S (S' W^-1 S)^-1 S' W^-1 y``, with ``W`` the base forecasts' error covariance shrunk toward its
  diagonal by Schaefer and Strimmer's intensity (``shrunk_covariance``), as hierarchicalforecast's
  ``MinTrace(method="mint_shrink")`` does; numpy only.

What is reconciled is the P50 of every (origin, lead): quantiles do not add up, so every other
level of a series keeps its base band around the new P50 (moved by the P50's own shift in log1p
space), which keeps the levels ordered.  MinT may give a client a
negative P50; it is set to 0 and the total re-summed, so every method's answer stays coherent.

Arrays are (n_series, n_origins, horizon, levels) as ``GlobalLSTM.predict_panel`` gives them, with
the hierarchy as ``Panel.hierarchy()`` gives it: deployment -> (its total's row, its clients' rows).
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Mapping, Sequence

import numpy as np

METHODS = ("bottom_up", "top_down", "mint_shrink")
MID = 1  # the P50's column in the levels (0.1, 0.5, 0.9, 0.95, 0.99)
Hierarchy = Mapping[str, tuple[int, Sequence[int]]]


def proportions(train_values: np.ndarray, hierarchy: Hierarchy) -> dict[str, np.ndarray]:
    """Per deployment, each client's share of the total over the training steps (mean over mean;
    equal shares where the training data has no load at all)."""
    out = {}
    for dep, (_, clients) in hierarchy.items():
        means = np.nan_to_num(np.nanmean(train_values[list(clients)], axis=1)) if len(clients) else np.zeros(0)
        total = means.sum()
        out[dep] = means / total if total > 0 else np.full(len(clients), 1.0 / max(len(clients), 1))
    return out


def shrunk_covariance(resid: np.ndarray) -> np.ndarray:
    """Covariance of residuals (n_obs, n_series), off-diagonal shrunk toward 0 by Schaefer and
    Strimmer's (2005) estimated intensity; the diagonal kept (floored, so that W is invertible
    even for a series forecast without error, such as a client with no requests)."""
    r = resid[np.isfinite(resid).all(axis=1)]
    n, p = r.shape
    if n < 3:
        raise ValueError(f"mint_shrink needs at least 3 complete residual rows, got {n}")
    c = r - r.mean(axis=0)
    cov = c.T @ c / n
    sd = c.std(axis=0)
    ok = sd > 0
    x = np.where(ok, c / np.where(ok, sd, 1.0), 0.0)
    w = x[:, :, None] * x[:, None, :]  # per observation, the standardised products
    corr = w.mean(axis=0)
    var_corr = n / (n - 1) ** 3 * ((w - corr) ** 2).sum(axis=0)
    off = ~np.eye(p, dtype=bool)
    denom = (n / (n - 1)) ** 2 * (corr[off] ** 2).sum()
    lam = 1.0 if denom <= 0 else float(np.clip(var_corr[off].sum() / denom, 0.0, 1.0))
    shrunk = (1 - lam) * cov
    diag = np.diag(cov)
    floor = max(float(diag[diag > 0].mean()) * 1e-6 if (diag > 0).any() else 1.0, 1e-12)
    np.fill_diagonal(shrunk, np.maximum(diag, floor))
    return shrunk


def mint_matrix(cov: np.ndarray) -> np.ndarray:
    """``S (S' W^-1 S)^-1 S' W^-1`` for one total over m clients (row 0 the total): (m+1, m+1)."""
    m = cov.shape[0] - 1
    S = np.vstack([np.ones((1, m)), np.eye(m)])
    a = np.linalg.solve(cov, S)                  # W^-1 S
    g = np.linalg.solve(S.T @ a, a.T)            # (S' W^-1 S)^-1 S' W^-1
    return S @ g


def covariances(preds: np.ndarray, actual: np.ndarray, hierarchy: Hierarchy) -> dict[str, np.ndarray]:
    """Per deployment, the shrunk covariance of its base P50 errors (total first, then clients) at
    every (origin, lead) of ``preds`` (n_series, n_origins, H, Q) against ``actual`` (n_series,
    n_origins, H): take them from origins before the development split."""
    out = {}
    for dep, (tot, clients) in hierarchy.items():
        rows = [tot, *clients]
        err = actual[rows] - preds[rows][..., MID]
        # an error not known (no forecast: nothing observed in a series' last day) counts as none,
        # so one such series does not leave its deployment without a covariance
        out[dep] = shrunk_covariance(np.nan_to_num(err.reshape(len(rows), -1).T))
    return out


def _point(method: str, base: np.ndarray, share: np.ndarray | None, proj: np.ndarray | None) -> np.ndarray:
    """Reconciled P50s of one deployment: base (m+1, N), row 0 the total."""
    if method == "bottom_up":
        out = base.copy()
    elif method == "top_down":
        out = np.vstack([base[:1], share[:, None] * base[:1]])
    elif method == "mint_shrink":
        out = proj @ np.nan_to_num(base)
    else:
        raise ValueError(f"unknown reconciliation method {method!r}; choose from {list(METHODS)}")
    bottom = np.maximum(out[1:], 0.0)  # a negative count is no forecast; the total follows the clients
    return np.vstack([np.nansum(bottom, axis=0, keepdims=True), bottom])


def _rescale(q: np.ndarray, old: np.ndarray, new: np.ndarray) -> np.ndarray:
    """Every level of q (..., Q) moved with its P50 from ``old`` to ``new`` by the same shift in
    log1p space (a factor on 1 + load): a band keeps its shape whatever the size, and a P50 near 0
    moved to 5 multiplies 1 + P90 by about 6, not P90 by 5 / 1e-6 (the plain ratio blew a
    reconciled client's P90 up to 1e5 times its mean in the first full bench run)."""
    shift = np.log1p(np.maximum(new, 0.0)) - np.log1p(np.maximum(old, 0.0))
    moved = np.expm1(np.log1p(np.maximum(q, 0.0)) + shift[..., None])
    out = np.where(shift[..., None] == 0, q, moved)  # unmoved stays bit for bit (no log round trip)
    return np.sort(np.maximum(out, 0.0), axis=-1)


def reconcile(preds: np.ndarray, hierarchy: Hierarchy, method: str,
              shares: Mapping[str, np.ndarray] | None = None,
              covs: Mapping[str, np.ndarray] | None = None) -> np.ndarray:
    """``preds`` with each deployment's rows made coherent by ``method``; other rows unchanged.
    ``top_down`` needs ``shares`` (:func:`proportions`), ``mint_shrink`` ``covs`` (:func:`covariances`)."""
    if method not in METHODS:
        raise ValueError(f"unknown reconciliation method {method!r}; choose from {list(METHODS)}")
    if method == "top_down" and shares is None or method == "mint_shrink" and covs is None:
        raise ValueError(f"{method} needs {'shares' if method == 'top_down' else 'covariances'} from the training data")
    out = preds.copy()
    for dep, (tot, clients) in hierarchy.items():
        rows = [tot, *clients]
        base = preds[rows]
        shape = base.shape[1:-1]
        mid = base[..., MID].reshape(len(rows), -1)
        proj = mint_matrix(covs[dep]) if method == "mint_shrink" else None
        new = _point(method, mid, None if shares is None else shares.get(dep), proj).reshape(len(rows), *shape)
        out[rows] = _rescale(base, base[..., MID], new)
        out[rows, ..., MID] = new  # exactly the coherent P50, not its round trip through the ratio
    return out


def scaled_pinball(preds: np.ndarray, actual: np.ndarray, scale: np.ndarray,
                   levels: Sequence[float]) -> np.ndarray:
    """Per series, the mean pinball loss over levels, origins and leads over ``scale`` (NaN where
    the scale is 0 or nothing is known)."""
    y = actual[..., None]
    d = y - preds
    q = np.asarray(levels)
    loss = np.maximum(q * d, (q - 1) * d)
    with np.errstate(invalid="ignore", divide="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a series with nothing to score: NaN, said by the caller
        per = np.nanmean(loss.reshape(len(preds), -1), axis=1)
        return np.where(scale > 0, per / np.where(scale > 0, scale, 1.0), np.nan)


@dataclass
class Choice:
    """The method the development split chose, and every method's score there."""

    method: str
    scores: dict[str, float] = field(default_factory=dict)  # method -> mean scaled pinball on the totals
    rule: str = "lowest mean scaled pinball (P10..P99) over the deployment totals on the development split"


def choose(preds: np.ndarray, actual: np.ndarray, hierarchy: Hierarchy, scale: np.ndarray,
           levels: Sequence[float], shares: Mapping[str, np.ndarray],
           covs: Mapping[str, np.ndarray]) -> Choice:
    """Score every method on development forecasts and keep the best (ties: the simpler, in
    ``METHODS`` order).  The totals decide: the deployment's forecast is what scales a fleet."""
    totals = [tot for tot, _ in hierarchy.values()]
    scores = {}
    for m in METHODS:
        rec = reconcile(preds, hierarchy, m, shares, covs)
        scores[m] = float(np.nanmean(scaled_pinball(rec[totals], actual[totals], scale[totals], levels)))
    best = min(METHODS, key=lambda m: (scores[m], METHODS.index(m)))
    return Choice(best, scores)
