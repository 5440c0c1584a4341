"""Risk chosen from history: each policy's knobs tuned for the deployment's SLO on data before the test.

Walk-forward: the forecaster is trained on the minutes before ``test_start - validation_days``;
every candidate setting of a policy is simulated over the validation days that follow (still
before the test start, each minute deciding from data strictly before it); the cheapest setting
(GPU-hours) whose late share over the validation days met the SLO wins.  Where none met it, the
one with the lowest late share wins and the choice says so.  The same procedure, on the same
days, tunes the predictive policy (forecast quantile, warm buffer, target utilisation, scale-in
stabilisation), the reactive (HPA) target utilisation and the queue (KEDA) target and window, so
the comparison on the test part is fair.  ``hindsight`` runs the same choice on the test part
itself: an upper bound, labelled as such, never the policy's setting.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from itertools import product
from typing import Any, Optional, Sequence

import pandas as pd

from warmcast.config.slo import SLO
from warmup.sim.backtest import FleetBacktestConfig, Split, compute_forecasts, make_split, run_policy
from warmup.sim.data import LoadLog
from warmup.sim.forecasts import ForecastBundle
from warmup.sim.fleet import summarise

LEVELS = (0.1, 0.5, 0.7, 0.8, 0.9, 0.95, 0.99)

# Stage 1: quantile x buffer; stage 2 varies utilisation and stabilisation around the stage-1 winner.
# A low quantile with a reactive floor below full utilisation lets the policy lean on the current load where
# the forecast's errors are wide; the tuning decides whether that is cheaper.
PREDICTIVE_STAGE1 = [{"quantile": q, "buffer_level": b}
                     for q, b in product((0.5, 0.6, 0.7, 0.8, 0.9, 0.95), (None, 0.9, 0.99))] + [
                     {"quantile": q, "buffer_level": None, "reactive_utilisation": 0.9, "stabilisation_s": 900.0}
                     for q in (0.1, 0.5)]
PREDICTIVE_STAGE2 = [{"target_utilisation": u, "stabilisation_s": s, "reactive_utilisation": r}
                     for u, s, r in product((1.0, 0.9), (300.0, 900.0), (1.0, 0.9)) if (u, s, r) != (1.0, 300.0, 1.0)]
REACTIVE_GRID = [{"target_utilisation": u, "stabilisation_min": s}
                 for s in (5, 15) for u in (0.5, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95)]
QUEUE_GRID = [{"target_waiting": w, "stabilisation_min": s}
              for s in (5, 15) for w in (0.5, 1.0, 2.0, 5.0, 10.0, 20.0)]
GRIDS = {"predictive": PREDICTIVE_STAGE1, "predictive_stage2": PREDICTIVE_STAGE2, "reactive": REACTIVE_GRID,
         "queue": QUEUE_GRID}


@dataclass
class Choice:
    """The setting chosen for one policy, with every candidate's validation figures."""

    policy: str
    knobs: dict
    met: bool
    why: str
    table: list[dict] = field(default_factory=list)   # knobs, late_share, gpu_hours, gpu_x, episodes


@dataclass
class Tuning:
    slo: SLO
    window: tuple[str, str]            # the validation days (all before the test start)
    choices: dict[str, Choice]
    forecaster: str
    fit_seconds: float
    windows: int = 1                   # consecutive validation windows the choice had to hold on


    def knobs(self) -> dict[str, dict]:
        return {p: c.knobs for p, c in self.choices.items()}

    def report(self) -> str:
        over = f" in {self.windows} windows, each setting judged on its worst" if self.windows > 1 else ""
        lines = [f"risk tuned for the SLO {self.slo.describe()} on {self.window[0]} .. {self.window[1]}{over} "
                 f"(before the test start; forecaster {self.forecaster})"]
        lines += [f"  {p}: {c.knobs} -- {c.why}" for p, c in self.choices.items()]
        return "\n".join(lines)


@dataclass
class Window:
    """One validation window: its minutes, the forecasts made for them, the oracle's GPU-hours."""

    split: Split
    bundle: Optional[ForecastBundle]
    oracle_gpu: float


def evaluate(policy: str, windows: Sequence[Window], cfg: FleetBacktestConfig, grid: Sequence[dict]) -> list[dict]:
    """One row per candidate: its knobs, its late share on its worst window (the choice must hold on
    every window, not on their average), its GPU-hours over all windows and each window's late share."""
    params = cfg.fleet_params()
    rows = []
    for knobs in grid:
        per = []
        for w in windows:
            run = run_policy(policy, w.split, cfg, w.bundle if policy == "predictive" else None, knobs=dict(knobs))
            per.append(summarise(run, w.split.demand, params, w.oracle_gpu))
        gpu, oracle = sum(r["gpu_hours"] for r in per), sum(w.oracle_gpu for w in windows)
        rows.append({"knobs": dict(knobs), "late_share": max(r["late_share"] for r in per), "gpu_hours": gpu,
                     "gpu_x": gpu / oracle if oracle > 0 else float("nan"),
                     "episodes": sum(r["late_episodes"] for r in per),
                     "late_by_window": [r["late_share"] for r in per]})
    return rows


def pick(policy: str, rows: list[dict], slo: SLO, where: str = "validation") -> Choice:
    """The cheapest row that met the SLO (on its worst window); else the least late (then cheapest),
    saying none met.  Over several windows the reason says how robust the choice was."""
    ok = [r for r in rows if r["late_share"] <= slo.late_share]
    if ok:
        best = min(ok, key=lambda r: (r["gpu_hours"], r["late_share"]))
        why = (f"cheapest of {len(ok)}/{len(rows)} settings that met the SLO on the {where} days: "
               f"{best['late_share'] * 100:.4f}% late, {best['gpu_x']:.3f}x oracle GPU-hours")
        return Choice(policy, best["knobs"], True, why + _robustness(best, slo), rows)
    best = min(rows, key=lambda r: (r["late_share"], r["gpu_hours"]))
    why = (f"none of {len(rows)} settings met the SLO on the {where} days; least late: "
           f"{best['late_share'] * 100:.4f}% at {best['gpu_x']:.3f}x oracle GPU-hours")
    return Choice(policy, best["knobs"], False, why + _robustness(best, slo), rows)


def _robustness(row: dict, slo: SLO) -> str:
    per = row.get("late_by_window") or []
    if len(per) < 2:
        return ""
    met = sum(x <= slo.late_share for x in per)
    return (f" (worst of {len(per)} windows; met on {met}/{len(per)}; late "
            + ", ".join(f"{x * 100:.4f}%" for x in per) + ", oldest first)")


def choose(policy: str, windows: Sequence[Window], cfg: FleetBacktestConfig, slo: SLO,
           where: str = "validation", grids: Optional[dict] = None) -> Choice:
    """Tune one policy on ``windows``: a grid for the baselines, two stages for the predictive policy."""
    g = {**GRIDS, **(grids or {})}
    if policy != "predictive":
        return pick(policy, evaluate(policy, windows, cfg, g[policy]), slo, where)
    rows = evaluate(policy, windows, cfg, g["predictive"])
    first = pick(policy, rows, slo, where)
    grid2 = [{**first.knobs, **k} for k in g["predictive_stage2"]]
    rows += [r for r in evaluate(policy, windows, cfg, grid2) if r["knobs"] != first.knobs]
    return pick(policy, rows, slo, where)


def guarded(grids: Optional[dict], reactive: dict) -> dict:
    """The predictive grids with the reactive guard at the tuned HPA's target utilisation (issue 27).

    Each candidate is tried with two guards: the HPA's own scale-down window (warmcast never holds
    fewer replicas than that HPA would: never later, and never cheaper) and a 1-minute window (never
    below what the HPA asks for on the current load, so never later on a rise, while scale-in may
    follow the forecast below the count the HPA would still be holding).  The SLO on the validation
    days chooses between them, as for every other knob."""
    g = {**GRIDS, **(grids or {})}
    if "target_utilisation" not in reactive:   # a grid that does not tune it: the HPA's is unknown
        return g
    windows = sorted({1, int(reactive.get("stabilisation_min", 5))})   # the HPA's default window: 300 s
    return {**g, "predictive": [{**k, "reactive_guard": reactive["target_utilisation"],
                                 "reactive_guard_window_min": w} for w in windows for k in g["predictive"]]}


def rolling_windows(log: LoadLog, vcfg: FleetBacktestConfig, windows: int, validation_days: float,
                    bundle: Optional[ForecastBundle]) -> list[Window]:
    """``windows`` consecutive validation windows of ``validation_days`` ending at ``vcfg.test_end``,
    oldest first, each with its slice of the forecasts made over all of them (one fit, before the
    oldest) and its oracle's GPU-hours."""
    end = pd.Timestamp(vcfg.test_end)
    span = pd.Timedelta(days=validation_days)
    out, offset = [], 0
    for i in range(windows, 0, -1):
        split = make_split(log, end - i * span, end - (i - 1) * span)
        oracle = run_policy("oracle", split, vcfg)
        part = None if bundle is None else _slice(bundle, offset, offset + split.minutes)
        out.append(Window(split, part, float(oracle.provisioned.sum()) * vcfg.gpus_per_replica / 60.0))
        offset += split.minutes
    return out


def _slice(bundle: ForecastBundle, a: int, b: int) -> ForecastBundle:
    return replace(bundle, paths={q: p[a:b] for q, p in bundle.paths.items()})


def tune(log: LoadLog, cfg: FleetBacktestConfig, slo: SLO, validation_days: float = 2.0,
         policies: Sequence[str] = ("predictive", "reactive", "queue"), model=None,
         progress: bool = False, grids: Optional[dict] = None, levels: Sequence[float] = LEVELS,
         windows: int = 1) -> Tuning:
    """Walk-forward tuning on ``windows`` consecutive spans of ``validation_days`` before
    ``cfg.test_start`` (nothing after it is read): a setting meets the SLO only where it met it on
    its worst window, and costs its GPU-hours over all of them."""
    ts = pd.Timestamp(cfg.test_start).floor("min")
    vs = ts - pd.Timedelta(days=validation_days * windows)
    vcfg = replace(cfg, test_start=vs, test_end=ts, wait_threshold_s=slo.late_wait_s, knobs=None)
    bundle = None
    if "predictive" in policies:
        bundle = compute_forecasts(log, vcfg, levels, model=model, progress=progress)
    wins = rolling_windows(log, vcfg, windows, validation_days, bundle)
    chosen: dict[str, Choice] = {}
    for p in sorted(policies, key=lambda q: q == "predictive"):   # the predictive policy last: its guard
        g = guarded(grids, chosen["reactive"].knobs) if p == "predictive" and "reactive" in chosen else grids
        chosen[p] = choose(p, wins, vcfg, slo, grids=g)
    choices = {p: chosen[p] for p in policies}
    return Tuning(slo=slo, window=(str(vs), str(ts)), choices=choices,
                  forecaster=bundle.model if bundle else "", fit_seconds=bundle.fit_seconds if bundle else 0.0,
                  windows=windows)


def hindsight(split: Split, cfg: FleetBacktestConfig, bundle: Optional[ForecastBundle], slo: SLO,
              oracle_gpu: float, policies: Sequence[str] = ("predictive", "reactive", "queue"),
              grids: Optional[dict] = None) -> dict[str, Choice]:
    """The same choice made on the test part itself (hindsight: an upper bound, not a setting to use)."""
    win = [Window(split, bundle, oracle_gpu)]
    return {p: choose(p, win, cfg, slo, "test (hindsight)", grids) for p in policies}


def for_deployment(data: LoadLog, cfg: FleetBacktestConfig, dep: Any, slo: Optional[SLO], validation_days: float,
                   progress: bool = False, windows: int = 1) -> tuple[FleetBacktestConfig, Optional[Tuning]]:
    """The backtest configuration with the deployment's asleep tier and SLO; with ``slo`` (the
    deployment's, changed by the caller's flags), each policy's knobs tuned for it on the days
    before the test start. Without ``slo`` the deployment's own SLO judges the test part."""
    if dep is not None and dep.sleep is not None:  # the simulated fleet gets the asleep tier too
        cfg = replace(cfg, wake_s=dep.sleep.wake_s, sleep_cost_share=dep.sleep.cost_share)
    if slo is None:
        return (cfg if dep is None else replace(cfg, slo=dep.slo, wait_threshold_s=dep.slo.late_wait_s)), None
    policies = tuple(p for p in ("predictive", "reactive", "queue") if p in cfg.policies)
    tuning = tune(data, cfg, slo, validation_days, policies, progress=progress, windows=windows)
    return replace(cfg, knobs=tuning.knobs(), wait_threshold_s=slo.late_wait_s, tuning=tuning, slo=slo), tuning
