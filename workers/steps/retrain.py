"""Maintenance, nightly: train a challenger on the last 28 days, promote it only if it beats the
champion and the baselines on the latest day (``forecaster.live.train_deployment``), audit it.
Then, once for the whole fleet (:func:`fleet_step`), the fleet model over every deployment and its
clients, judged per deployment (``forecaster.global_lstm.live.train_fleet``), each verdict audited."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import pandas as pd

import logging

from workers import audit
from workers.context import Ctx
from workers.locks import lease
from workers.steps.outcome import Outcome

log = logging.getLogger("warmcast.workers")
FLEET_LEASE = "fleet"   # the fleet model's retrain holds this lease (one at a time, as per deployment)


@dataclass(frozen=True)
class RetrainOutcome(Outcome):
    version: str
    promoted: bool
    maes: dict[str, Any] = field(default_factory=dict)


def step(ctx: Ctx, deployment: str, *, run_id: str | None = None, config: Any = None,
         baselines: list | None = None, make_challenger: Callable[[], Any] | None = None) -> RetrainOutcome:
    """One retrain at a time per deployment (``run_id``: the task id, which may take over the lease
    of its own dead first attempt).  ``config``/``baselines``: the LSTM's training config and the
    baselines to beat (defaults: the production ones); ``make_challenger``: builds another
    challenger than the LSTM (``forecaster.live.train_deployment``)."""
    with lease(ctx.r, ctx.prefix, "retrain", deployment, ctx.options.lease_s, token=run_id):
        return _train(ctx, deployment, config, baselines, make_challenger)


def _train(ctx: Ctx, deployment: str, config: Any, baselines: list | None,
           make_challenger: Callable[[], Any] | None) -> RetrainOutcome:
    from forecaster.live import train_deployment
    from forecaster.registry import Registry

    frame = ctx.store.frame(deployment, start=pd.Timestamp.now() - pd.Timedelta(days=28))
    rep = train_deployment(frame, Registry(ctx.settings.models_dir), deployment, config=config, progress=False,
                           baselines=baselines, make_challenger=make_challenger)
    promoted = bool(rep.decision and rep.decision.promoted)
    audit.retrain(ctx, deployment, rep, promoted)
    ctx.cache.pop(("model", deployment), None)  # the next forecast serves the new champion
    return RetrainOutcome(deployment, rep.version, promoted, rep.maes)


@dataclass(frozen=True)
class FleetRetrainOutcome:
    version: str | None
    serves: list[str]
    why: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {"version": self.version, "serves": self.serves, "why": self.why}


def fleet_step(ctx: Ctx, *, run_id: str | None = None, make_model: Callable[[int], Any] | None = None,
               baselines: Callable[[], list] | None = None) -> FleetRetrainOutcome:
    """The fleet model, fitted once on every deployment of the deployments file with stored load and
    their clients; a fleet with too little history is said in the log and trains nothing."""
    from forecaster.global_lstm.live import fleet_data, train_fleet
    from forecaster.registry import ArtifactError, Registry

    with lease(ctx.r, ctx.prefix, "retrain", FLEET_LEASE, ctx.options.lease_s, token=run_id):
        known = {d.name for d in ctx.deployments()}
        data = {d: fs for d, fs in fleet_data(ctx.store).items() if d in known}
        try:
            rep = train_fleet(data, Registry(ctx.settings.models_dir), make_model or _fleet_model,
                              baselines=baselines)
        except ArtifactError as err:
            log.warning("fleet model not trained: %s", err)
            return FleetRetrainOutcome(None, [], str(err))
    for dep, v in rep.verdicts.items():
        ctx.state.audit(dep, "retrain", f"fleet model {rep.version} " + ("serves" if v["serves"] else "does not serve"),
                        v["why"], True, rep.summary()[:2000], {"method": v["method"], "mae": v["mae"]})
    return FleetRetrainOutcome(rep.version, sorted(d for d, v in rep.verdicts.items() if v["serves"]))


def _fleet_model(horizon_min: int) -> Any:
    from forecaster.global_lstm import GlobalLSTM

    return GlobalLSTM(horizon_min=horizon_min)
