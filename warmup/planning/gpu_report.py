"""Capacity plan by GPU type for a stored deployment: demand from the load store (a typical
day) or the stored forecast (the next 30 minutes), the pure planner
(:mod:`warmup.planning.gpuplan`), and the outputs a planner reads (JSON, CSV, a plot).
Shared by ``warmcast plan capacity`` and ``GET /v1/deployments/{name}/capacity/gpu-plan``.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from warmcast.config.deployments import Deployment
from warmcast.errors import InputError, NotFoundError
from forecaster.base import per_minute_rate
from warmcast.config.pools import pool_series_name
from warmcast.resolution import with_resolution
from warmup.planning.capacity import CapacityRequest, capacity_plan
from warmup.planning.gpuplan import BASELINE_TYPE, GpuPlan, MixRequest, plan_gpu_mix, what_if
from warmup.planning.gpu_catalogue import deployment_options

HORIZONS = {"24h": 24, "30m": 0.5}
TS = "%Y-%m-%d %H:%M"


@dataclass(frozen=True)
class PlanAsk:
    horizon: str = "24h"
    quantile: float = 0.9
    utilisation: float | None = None     # default: the pool's target, else 0.8
    pool: str | None = None              # "hot" | "cold": plan one pool's series and profile
    catalogue: str | None = None
    what_if_growth: float | None = None
    what_if_types: tuple[str, ...] | None = None
    what_if_utilisation: float | None = None


class AskError(InputError):
    """Bad input tied to one :class:`PlanAsk` field (``field``, its name there), so the CLI and the API
    can each locate it at their own flag or query parameter."""

    def __init__(self, field: str, msg: str) -> None:
        super().__init__(msg)
        self.field = field


def series_name(dep: Deployment, pool: str | None) -> str:
    if pool is None:
        return dep.name
    if dep.pools is None or pool not in ("hot", "cold"):
        raise AskError("pool", f"deployment {dep.name}: pool {pool!r} is not declared (pools: hot, cold)")
    return pool_series_name(dep.name, pool)  # type: ignore[arg-type]


def stored_inputs(store: Any, state: Any, dep: Deployment, pool: str | None, lookback_days: int = 29,
                  forecast_doc: dict[str, Any] | None = None) -> tuple[pd.Series, Any]:
    """(history, forecast or None) of a deployment or one of its pools, as stored; ``forecast_doc``: the
    forecast document to plan with where the caller has one (the API's newest, stored or computed)."""
    name = series_name(dep, pool)
    if not store.days(name):
        raise NotFoundError(f"no load stored for {name!r}: ingest a log first" + (
            f" (warmcast pools ingest LOG --deployment {dep.name}; a count series also needs its split: "
            "--hot-share 0.8 or --pool-columns HOT,COLD)" if pool else ""))
    doc = None if pool else (forecast_doc or state.get_forecast(dep.name))  # the forecaster forecasts deployments
    return series_inputs(store, name, doc, lookback_days)


def series_inputs(store: Any, name: str, doc: dict[str, Any] | None,
                  lookback_days: int = 29) -> tuple[pd.Series, Any]:
    """(requests/min from ``lookback_days`` before the newest stored day, the forecast ``doc`` as a
    per-minute rate or None): what every hourly plan reads, /capacity and the GPU plan alike (issue 46:
    the two routes read different forecasts and planned 213.72 and 27.8 req/min for one hour)."""
    from warmcast.state import forecast_from_dict

    days = store.days(name)
    start = pd.Timestamp(0) + pd.Timedelta(days=(days[-1] if days else 0) - lookback_days)
    return per_minute_series(store, name, start), (per_minute_rate(forecast_from_dict(doc)) if doc else None)


def per_minute_series(store: Any, name: str, start: pd.Timestamp) -> pd.Series:
    """The stored load from ``start`` in requests/min: a coarse series' bins divided by their width (issue 32:
    plans read 10-minute counts as rates and planned ten times the demand), marked with their resolution."""
    res = store.resolution(name)
    return with_resolution(store.series(name, start=start) / res, res)


def profile_and_utilisation(dep: Deployment, ask: PlanAsk) -> tuple[str, float]:
    if ask.pool is None:
        return dep.default_profile, ask.utilisation or 0.8
    spec = getattr(dep.pools, ask.pool)
    return spec.profiles[0], ask.utilisation or spec.target_utilisation


def day_demand(history: pd.Series, quantile: float, forecast=None) -> tuple[list[str], list[float], str, list[str]]:
    """Per hour of the next day: demand at ``quantile`` from the same hours of past days or weeks;
    the stored forecast raises the first hour when it expects more."""
    start = (history.index[-1] + pd.Timedelta(minutes=1)).ceil("h") if len(history) else None
    if start is None:
        raise InputError("no stored load for this deployment (or pool): ingest a log first")
    fi = fp = f50 = None
    if forecast is not None:
        fi, fp, f50 = forecast.index, forecast.quantile(quantile), forecast.quantile(0.5)
    req = CapacityRequest(start=start, span="day", quantile=quantile, utilisation=1.0, capacity_per_instance=1.0)
    plan = capacity_plan(history, req, fi, fp, f50)
    return [h.start.strftime(TS) for h in plan.hours], [h.demand_rpm for h in plan.hours], plan.method, plan.notes


def ahead_demand(forecast, quantile: float) -> tuple[list[str], list[float], str, list[str]]:
    """The next 30 minutes of the stored forecast: its busiest minute at ``quantile``."""
    if forecast is None:
        # the horizon asked for it: the API locates the 422 at that query parameter (issue 41)
        raise AskError("horizon", "horizon 30m plans from the stored forecast and this deployment has none: "
                                  "run the forecaster, or ask for horizon 24h (planned from the stored load)")
    path = list(forecast.quantile(quantile)[:30])
    return ([forecast.origin.strftime(TS)], [float(max(path))],
            f"stored forecast ({forecast.model}), P{round(quantile * 100)} peak of the next 30 minutes", [])


def build(dep: Deployment, history: pd.Series, forecast, ask: PlanAsk) -> dict[str, Any]:
    """The plan document (JSON-ready): slots, totals, options, exclusions and the what-if."""
    if ask.horizon not in HORIZONS:
        raise AskError("horizon", f"horizon must be one of {list(HORIZONS)}, not {ask.horizon!r}")
    profile, util = profile_and_utilisation(dep, ask)
    options, excluded = deployment_options(dep, profile, ask.catalogue)
    if not options:
        raise InputError(f"deployment {dep.name}: profile {profile} fits no allowed GPU type: {excluded}")
    labels, demand, method, notes = (day_demand(history, ask.quantile, forecast) if ask.horizon == "24h"
                                     else ahead_demand(forecast, ask.quantile))
    req = MixRequest(tuple(demand), tuple(labels), tuple(options), util,
                     slot_hours=1.0 if ask.horizon == "24h" else 0.5, max_gpus=dep.gpu.max_gpus if dep.gpu else None,
                     max_instances=dep.max_replicas if ask.pool is None else None)  # a pool has its own limits
    changes = {k: v for k, v in (("growth", ask.what_if_growth), ("types", ask.what_if_types),
                                 ("utilisation", ask.what_if_utilisation)) if v is not None}
    try:
        base, variant = what_if(req, ask.what_if_types, ask.what_if_utilisation, ask.what_if_growth)
    except ValueError as err:
        # what_if refuses unknown types; the ranges plan_gpu_mix checks are the CLI's and the API's bounds
        raise AskError("what_if_types", f"what-if: {err}") from None
    doc = {"deployment": dep.name, "pool": ask.pool, "profile": profile, "horizon": ask.horizon,
           "quantile": ask.quantile, "utilisation": util, "method": method, "notes": notes,
           "options": [{"type": o.gpu.name, "capacity_rpm": round(o.capacity_rpm, 3), "capacity_source":
                        o.capacity_source, "cost_index": o.gpu.cost_index, "max_instances": o.max_instances}
                       for o in options],
           "excluded": excluded, **_plan_doc(base)}
    doc["what_if"] = None if not changes else {"changes": {k: list(v) if isinstance(v, tuple) else v
                                                           for k, v in changes.items()},
                                               **_plan_doc(variant), "delta_cost": round(variant.cost - base.cost, 4)}
    return doc


def _plan_doc(plan: GpuPlan) -> dict[str, Any]:
    return {"total_cost": round(plan.cost, 4), "gpu_hours": round(plan.gpu_hours, 3),
            "all_a100_cost": None if plan.baseline_cost is None else round(plan.baseline_cost, 4),
            "saving_vs_all_a100": None if plan.saving is None else round(plan.saving, 4),
            "all_a100_short_slots": plan.baseline_short, "all_a100_is_plan": plan.same_as_baseline,
            "slots": [{"start": s.label, "demand_rpm": round(s.demand_rpm, 3), "instances": s.counts,
                       "capacity_rpm": round(s.capacity_rpm, 3), "gpus": s.gpus, "cost": round(s.cost, 4),
                       "bound": s.bound, "reason": s.reason} for s in plan.slots]}


def text(doc: dict[str, Any]) -> str:
    """The plan as a planner reads it in a terminal: one line per slot, then the totals."""
    types = [o["type"] for o in doc["options"]]
    head = (f"capacity plan by GPU type: {doc['deployment']}" + (f" pool {doc['pool']}" if doc["pool"] else "") +
            f", profile {doc['profile']}, {doc['horizon']}, P{round(doc['quantile'] * 100)} demand at "
            f"{doc['utilisation']:.0%} target utilisation\n  demand: {doc['method']}")
    lines = [head] + [f"  note: {n}" for n in doc["notes"]]
    lines += [f"  {t} not an option: {why}" for t, why in doc["excluded"].items()]
    lines.append(f"  {'start':16} {'demand rpm':>10} " + " ".join(f"{t:>9}" for t in types) + f" {'cost':>7}  bound")
    for s in doc["slots"]:
        lines.append(f"  {s['start']:16} {s['demand_rpm']:>10.1f} " +
                     " ".join(f"{s['instances'].get(t, 0):>9}" for t in types) + f" {s['cost']:>7.2f}  {s['bound']}")
    short = [s for s in doc["slots"] if s["reason"].startswith("SLO NOT MET")]
    if short:  # a limit (max_replicas, max_gpus, a type's max_instances) holds the plan below demand
        lines.append(f"  {len(short)} slot(s) short of demand, first {short[0]['start']}: {short[0]['reason']}")
    lines.append(_totals("plan", doc))
    if doc["what_if"]:
        w = doc["what_if"]
        lines.append(_totals(f"what-if {w['changes']}", w) + f"; change {w['delta_cost']:+.2f}")
    return "\n".join(lines)


def _totals(name: str, d: dict[str, Any]) -> str:
    return f"  {name}: cost index {d['total_cost']:.2f} for {d['gpu_hours']:.1f} GPU-hours{_against_a100(d)}"


def claimed_saving(d: dict[str, Any]) -> float | None:
    """The saving a plan may claim: a positive one against a different all-A100 fleet, else None."""
    s = d["saving_vs_all_a100"]
    return s if s is not None and s > 0 and not d.get("all_a100_is_plan") else None


def _against_a100(d: dict[str, Any]) -> str:
    """The plan against all-A100 within the same limits, said as it is (issue 46): no saving where the plan
    is that fleet or costs more; where the baseline misses the SLO in more slots, that is said too."""
    if d["saving_vs_all_a100"] is None:
        return ""
    if d.get("all_a100_is_plan"):
        return f"; the plan is all {BASELINE_TYPE}: no saving"
    short = d.get("all_a100_short_slots", 0)
    base = f"; all-A100 within the same limits {d['all_a100_cost']:.2f}" + (
        f" (short of demand in {short} slot(s))" if short else "")
    s = claimed_saving(d)
    return base + (f", saving {s:.1%}" if s is not None else
                   f": no saving, the plan costs {-d['saving_vs_all_a100']:.1%} more")


def write_outputs(doc: dict[str, Any], out_dir: str | Path) -> list[Path]:
    """plan.json, plan.csv (one row per slot and type) and plan.png (stacked instances, cost line)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "plan.json").write_text(json.dumps(doc, indent=1))
    rows = [{"start": s["start"], "gpu_type": t, "instances": n, "demand_rpm": s["demand_rpm"], "slot_cost": s["cost"],
             "bound": s["bound"]} for s in doc["slots"] for t, n in s["instances"].items()]
    pd.DataFrame(rows).to_csv(out / "plan.csv", index=False)
    _plot(doc, out / "plan.png")
    return [out / "plan.json", out / "plan.csv", out / "plan.png"]


def _plot(doc: dict[str, Any], path: Path) -> tuple[list[str], str]:
    """plan.png: instances by type per slot, the cost line, the slots whose SLO is not met marked;
    returns (the legend's labels, the title)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    slots = doc["slots"]
    x = range(len(slots))
    fig, ax = plt.subplots(figsize=(10, 4))
    bottom = [0] * len(slots)
    for o in doc["options"]:
        n = [s["instances"].get(o["type"], 0) for s in slots]
        ax.bar(x, n, bottom=bottom, label=f"{o['type']} (cost {o['cost_index']:g})")
        bottom = [b + v for b, v in zip(bottom, n)]
    ax.set_ylabel("instances")
    ax.set_xticks(list(x), [s["start"][-5:] for s in slots], rotation=90, fontsize=7)
    cost = ax.twinx()
    cost.plot(list(x), [s["cost"] for s in slots], color="black", marker=".", label="cost index per slot")
    cost.set_ylabel("cost index")
    short = [i for i, s in enumerate(slots) if s["reason"].startswith("SLO NOT MET")]
    if short:  # a limit holds these slots below demand: the bars alone would read as enough
        ax.scatter(short, [bottom[i] for i in short], marker="x", s=60, color="red", zorder=3,
                   label="SLO NOT MET (a limit holds capacity below demand)")
    ax.legend(loc="upper left", fontsize=8)
    cost.legend(loc="upper right", fontsize=8)
    s = claimed_saving(doc)
    title = (f"{doc['deployment']}: instances by GPU type, total cost {doc['total_cost']:.2f}"
             + ("" if s is None else f" ({s:.0%} below all-A100 within the same limits)")
             + (f"; {len(short)} slot(s) SLO NOT MET" if short else ""))
    ax.set_title(title, fontsize=9)
    labels = ax.get_legend_handles_labels()[1] + cost.get_legend_handles_labels()[1]
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return labels, title
