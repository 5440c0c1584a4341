"""A deployment's forecast from the fleet model (issue 43): its total and its clients forecast in one
batched call, made coherent by the method the deployment's own validation chose
(:mod:`forecaster.global_lstm.live`), and the total's answer served.

:func:`fleet_resolution` is the resolver's first question (``forecaster.resolver.resolve``): does the
newest fleet model serve this deployment, and why (not)?  It serves only where its training's
verdict says it beat the deployment's baselines and champion, and only while that champion is still
the one it beat.  The client series are read when the forecast is made, through the callable the
caller gives (the load store's, :func:`forecaster.live.serving_clients`), so a server that keeps the
answer between calls reads each minute's clients as it reads each minute's total.
"""
from __future__ import annotations

import functools
from typing import Callable, Mapping, Sequence

import numpy as np
import pandas as pd

from forecaster.base import minute_series
from forecaster.global_lstm.artifacts import FLEET, NO_CLIENTS, fleet_registry
from forecaster.global_lstm.reconcile import reconcile
from forecaster.registry import ArtifactError, Registry
from warmcast.errors import NotFoundError
from warmcast.forecast import DEFAULT_QUANTILES, Forecast, mean_from_quantiles

ClientReader = Callable[[], Mapping[str, pd.DataFrame]]


class FleetAnswer:
    """The fleet model as one deployment's primary model (``FallbackForecaster`` wraps it)."""

    name = "lstm_global"

    def __init__(self, model, deployment: str, verdict: Mapping, clients: ClientReader | None) -> None:
        self.model, self.deployment, self.verdict, self.clients = model, deployment, verdict, clients
        self.version = model.version
        self.meta = model.meta  # its train_end: the fallback's staleness rule reads it
        self.memo: dict[tuple, np.ndarray] = {}   # base forecasts a batched call made for this deployment (prime)
        self.batched = 0   # answers served from such a call

    @property
    def how(self) -> str:
        labels = self.verdict.get("clients") or []
        if self.verdict.get("method") == NO_CLIENTS:
            return f"fleet model {self.version}, the deployment's total (no client series)"
        return f"fleet model {self.version}, reconciled by {self.verdict['method']} over {len(labels)} client series"

    def _rows(self, total: pd.Series) -> np.ndarray:
        labels = list(self.verdict.get("clients") or [])
        if not labels:
            return total.to_numpy(dtype=float)[None, :]
        if self.clients is None:
            raise ValueError("the fleet model reconciles this deployment from its clients, and no client series "
                             "reader was given")
        frames = self.clients()
        missing = [lab for lab in labels if lab not in frames]
        if missing:
            raise ValueError(f"client series {missing[:5]} it was trained with are no longer stored")
        rows = [minute_series(frames[lab]).reindex(total.index).to_numpy(dtype=float) for lab in labels]
        return np.vstack([total.to_numpy(dtype=float), *rows])

    def rows(self, history) -> tuple[np.ndarray, pd.Timestamp]:
        """The total's and the clients' steps this answer forecasts from, and the last step's time."""
        total = minute_series(history)
        return self._rows(total), total.index[-1]

    def predict(self, history, horizon: int = 30, quantiles: Sequence[float] = DEFAULT_QUANTILES) -> Forecast:
        total = minute_series(history)
        levels = tuple(self.model.cfg.levels)
        self.model._check(horizon, quantiles)
        rows = self._rows(total)
        base = self.memo.pop(memo_key(rows, total.index[-1], horizon), None)
        if base is None:
            base = self.model.predict_batch(rows, total.index[-1], horizon)   # (m+1, H, Q)
        else:
            self.batched += 1
        self.memo.clear()   # a prime is for this minute only
        row = self._reconciled(base)
        if not np.isfinite(row).all():
            raise ValueError("no forecast for a series (nothing observed in its last day)")
        qs = {float(q): np.array([np.interp(q, levels, row[h]) for h in range(horizon)]) for q in quantiles}
        step = self.model.cfg.step_min
        return Forecast(total.index[-1] + pd.Timedelta(minutes=step), mean_from_quantiles(levels, row), qs,
                        self.name, self.version, note="", step_min=step)

    def _reconciled(self, base: np.ndarray) -> np.ndarray:
        method = self.verdict.get("method", NO_CLIENTS)
        if method == NO_CLIENTS:
            return base[0]
        h = {self.deployment: (0, list(range(1, len(base))))}
        shares = {self.deployment: np.asarray(self.verdict["shares"], dtype=float)}
        cov = self.verdict.get("cov")
        covs = {self.deployment: np.asarray(cov, dtype=float)} if cov is not None else None
        return reconcile(base[:, None], h, method, shares, covs)[0, 0]


@functools.lru_cache(maxsize=4)
def _loaded(root: str, version: str, sha256: str) -> object:
    """The fleet model, loaded once per process and artifact (its weights' checksum: a registry
    rebuilt under the same version names is another model): every deployment it serves shares the
    one model object, so a shard's deployments share one batched call."""
    return Registry(root).load(FLEET, version)


def memo_key(rows: np.ndarray, last: pd.Timestamp, horizon: int) -> tuple:
    """What a batched answer is kept under: the exact rows it was made from (a write landing between
    the batch and the deployment's own step changes them, and the step then forecasts afresh)."""
    return pd.Timestamp(last), int(horizon), rows.shape, hash(np.ascontiguousarray(rows).tobytes())


def prime(work: Sequence[tuple[FleetAnswer, object]], horizon: int) -> int:
    """One ``predict_batch`` call per fleet model and last step for every (answer, history) given,
    each answer's part kept for its own ``predict``; returns the calls made.  A shard's forecast
    step primes its deployments, then forecasts each as ever (the fallback rules unchanged)."""
    groups: dict[tuple, list[tuple[FleetAnswer, np.ndarray]]] = {}
    for answer, history in work:
        try:
            rows, last = answer.rows(history)
        except ValueError:
            continue   # its own predict says why (the fallback answers)
        groups.setdefault((id(answer.model), pd.Timestamp(last)), []).append((answer, rows))
    for (_, last), items in groups.items():
        model = items[0][0].model
        width = max(rows.shape[1] for _, rows in items)   # a shorter history: missing steps before it, as alone
        stacked = np.vstack([np.pad(rows, ((0, 0), (width - rows.shape[1], 0)), constant_values=np.nan)
                             for _, rows in items])
        base = model.predict_batch(stacked, last, horizon)
        at = 0
        for answer, rows in items:
            answer.memo[memo_key(rows, last, horizon)] = base[at:at + len(rows)]
            at += len(rows)
    return len(groups)


def unseen_answer(registry: Registry, deployment: str, clients: ClientReader | None) -> FleetAnswer | None:
    """The fleet model answering ``deployment`` from its own total (no verdict to reconcile by) when the
    model has no verdict on it; None when there is no fleet model, it does not load, or it has one."""
    fleet = fleet_registry(registry)
    try:
        version = fleet.champion(FLEET)
        if version is None:
            return None
        meta = fleet.read_meta(FLEET, version)
        if deployment in meta.get("metrics", {}).get("deployments", {}):
            return None
        model = _loaded(str(fleet.root), version, str(meta.get("weights_sha256", "")))
    except (ArtifactError, NotFoundError):
        return None
    return FleetAnswer(model, deployment, {"method": NO_CLIENTS, "clients": []}, clients)


def fleet_resolution(registry: Registry, deployment: str, clients: ClientReader | None,
                     champion: str | None) -> tuple[FleetAnswer | None, str]:
    """(the fleet model's answer for ``deployment``, why) or (None, why not; empty when there is no
    fleet model at all)."""
    fleet = fleet_registry(registry)
    try:
        version = fleet.champion(FLEET)
        if version is None:
            return None, ""
        meta = fleet.read_meta(FLEET, version)
        model = _loaded(str(fleet.root), version, str(meta.get("weights_sha256", "")))
        verdicts = meta.get("metrics", {}).get("deployments", {})
    except (ArtifactError, NotFoundError) as err:
        return None, f"the fleet model does not load ({err})"
    verdict = verdicts.get(deployment)
    if verdict is None:
        return None, ""   # never trained on it: judged on its own recent data instead (resolver._fleet_unseen)
    if not verdict.get("serves"):
        return None, f"fleet model {model.version} does not serve {deployment!r}: {verdict.get('why')}"
    if verdict.get("champion") != champion:
        return None, (f"fleet model {model.version} was judged against champion {verdict.get('champion')}, "
                      f"and the champion is now {champion}")
    answer = FleetAnswer(model, deployment, verdict, clients)
    return answer, f"{answer.how}: {verdict.get('why')}"
