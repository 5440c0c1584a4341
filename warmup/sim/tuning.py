"""Choose the predictive quantile without looking at the test part.

A model is trained on the minutes before ``test_start - validation_days``; the
predictive policy is simulated over the validation days that follow (still before
the test start) at each candidate quantile; the lowest quantile that keeps the late
share at or below the target wins (the highest candidate if none does).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Sequence

import pandas as pd

from warmup.sim.backtest import FleetBacktestConfig, compute_forecasts, make_split, run_policy
from warmup.sim.data import LoadLog
from warmup.sim.fleet import summarise

CANDIDATES = (0.5, 0.6, 0.7, 0.8, 0.85, 0.9, 0.93, 0.95, 0.97, 0.99)


@dataclass
class QuantileChoice:
    quantile: float
    table: list[dict]            # one row per candidate: quantile, late_share, gpu_hours_vs_oracle
    validation: tuple[str, str]
    fit_seconds: float


def choose_quantile(log: LoadLog, cfg: FleetBacktestConfig, target_late_share: float = 0.0005,
                    validation_days: float = 2.0, candidates: Sequence[float] = CANDIDATES,
                    model=None, progress: bool = False) -> QuantileChoice:
    ts = pd.Timestamp(cfg.test_start).floor("min")
    vs = ts - pd.Timedelta(days=validation_days)
    vcfg = replace(cfg, test_start=vs, test_end=ts, policies=("predictive", "oracle"))
    bundle = compute_forecasts(log, vcfg, sorted(set(candidates) | {0.1, 0.5, 0.9}), model=model,
                               progress=progress)
    split = make_split(log, vs, ts)
    params = vcfg.fleet_params()
    oracle = run_policy("oracle", split, vcfg)
    og = float(oracle.provisioned.sum()) * vcfg.gpus_per_replica / 60.0
    rows = []
    for q in sorted(candidates):
        run = run_policy("predictive", split, vcfg, bundle, quantile=q)
        r = summarise(run, split.demand, params, og)
        rows.append({"quantile": q, "late_share": r["late_share"], "gpu_hours_vs_oracle": r["gpu_hours_vs_oracle"]})
    ok = [r["quantile"] for r in rows if r["late_share"] <= target_late_share]
    q = min(ok) if ok else max(candidates)
    return QuantileChoice(quantile=q, table=rows, validation=(str(vs), str(ts)), fit_seconds=bundle.fit_seconds)
