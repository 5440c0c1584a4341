"""Maintenance, nightly: train a challenger on the last 28 days, promote it only if it beats the
champion and the baselines on the latest day (``forecaster.live.train_deployment``), audit it."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import pandas as pd

from workers import audit
from workers.context import Ctx
from workers.locks import lease
from workers.steps.outcome import Outcome


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
