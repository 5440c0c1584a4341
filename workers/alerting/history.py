"""The last hour of a deployment as Redis holds it, for the diagnostic report (workers/alerting/report.py).

- per minute (per bin for a coarser series): every stored signal of the load store (requests,
  tokens, context lengths, coverage, long-prompt share);
- per planning tick: the live signals the tick read (P99, queue, load, ready and provisioned
  instances) and the replicas the forecast and the load asked for, from its ``scale`` audit entry;
- forecast vs actual: warmcast stores the newest forecast and the score of the one before it, not
  every past forecast, so the report compares what is stored and says so (:func:`forecast_vs_actual`);
- the decisions of the hour with their reasons, from the audit stream.
"""
from __future__ import annotations

import math
from datetime import datetime, timedelta, timezone
from typing import Any

import pandas as pd

from warmcast.errors import NotFoundError
from workers.context import Ctx

TS = "%Y-%m-%d %H:%M:%S"
HOUR = timedelta(hours=1)
TICK_KEYS = ("observed_rpm", "queue_depth", "p99_s", "ready", "provisioned", "forecast_model", "forecast_origin",
             "forecast_replicas", "reactive_replicas")


def num(v: Any) -> float | None:
    """A JSON-safe number (None for what is not one, NaN and infinities)."""
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(f) or math.isinf(f) else round(f, 3)


def minutes(ctx: Ctx, dep: str, now: datetime) -> dict[str, Any]:
    """Every stored signal of each minute (bin) in the hour before ``now``; a minute with nothing
    stored is left out (missing is not zero)."""
    try:
        frame = ctx.store.frame(dep, start=pd.Timestamp(now - HOUR), end=pd.Timestamp(now))
    except NotFoundError:  # a deployment without stored load still gets its report
        return {"resolution_min": 1, "rows": []}
    rows = []
    for t, row in zip(frame.index, frame.to_dict("records")):
        vals = {k: num(v) for k, v in row.items() if num(v) is not None}
        if vals:
            rows.append({"time": t.strftime(TS), **vals})
    return {"resolution_min": int(frame.attrs.get("resolution_min", 1)), "rows": rows}


def ticks(ctx: Ctx, dep: str, now: datetime) -> list[dict[str, Any]]:
    """The planning ticks of the hour before ``now``, oldest first: what each read and decided."""
    lo, hi = (now - HOUR).strftime(TS), now.strftime(TS)
    rows = ctx.state.audit_log(dep, kind="scale", since=lo, limit=500)
    out = [{"ts": r["ts"], "decision": r["decision"], "applied": r["applied"],
            **{k: r["inputs"].get(k) for k in TICK_KEYS}} for r in rows if r["ts"] <= hi]
    return out[::-1]


def decisions(ctx: Ctx, dep: str, now: datetime, limit: int = 30) -> list[dict[str, Any]]:
    """The newest decisions of the last hour with their reasons, newest first.  Planning ticks that
    held the count are left to :func:`ticks` (one a minute, they would crowd out every other kind)."""
    rows = ctx.state.audit_log(dep, since=(now - HOUR).strftime(TS), limit=1000)
    keep = [r for r in rows if not (r["kind"] == "scale" and r["decision"].startswith("hold "))]
    return [{k: r[k] for k in ("ts", "kind", "decision", "reason", "applied", "outcome")} for r in keep[:limit]]


def _score(ctx: Ctx, dep: str) -> dict[str, Any] | None:
    """The stored score of the previous forecast (workers/steps/forecast.py: MAE over the leads
    observed when the next forecast was made), or None."""
    raw = {k.decode(): v.decode() for k, v in ctx.r.hgetall(f"{ctx.prefix}:forecast-error:{dep}").items()}
    if not raw:
        return None
    scored = num(raw.get("scored_at"))
    return {"origin": raw.get("origin"), "model": raw.get("model"), "leads_observed": int(raw["leads_observed"]),
            "mae": num(raw.get("mae")), "lead1_abs_error": num(raw.get("lead1_abs_error")),
            "scored_at": None if scored is None else datetime.fromtimestamp(scored, timezone.utc).strftime(TS)}


def _current(ctx: Ctx, dep: str, now: datetime, actual: dict[str, float]) -> dict[str, Any] | None:
    """The newest forecast: its bins that have passed, each with the actual stored for it, and
    the next few it expects."""
    fc = ctx.state.get_forecast(dep)
    if not fc:
        return None
    step = pd.Timedelta(minutes=int(fc.get("step_min", 1)))
    origin = pd.Timestamp(fc["origin"])
    p90 = fc["quantiles"].get("0.9") or [None] * len(fc["mean"])
    bins = [{"time": (origin + i * step).strftime(TS), "forecast_mean": num(m), "forecast_p90": num(q)}
            for i, (m, q) in enumerate(zip(fc["mean"], p90))]
    hi = now.strftime(TS)
    passed = [{**b, "actual": actual.get(b["time"])} for b in bins if b["time"] < hi]
    return {"origin": fc["origin"], "model": fc["model"], "created_at": fc.get("created_at"),
            "step_min": int(fc.get("step_min", 1)), "passed": passed, "next": [b for b in bins if b["time"] >= hi][:5]}


def forecast_vs_actual(ctx: Ctx, dep: str, now: datetime, mins: dict[str, Any],
                       tick_rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Forecast against actual over the hour, from what is stored, with a sentence saying what."""
    actual = {r["time"]: r["requests"] for r in mins["rows"] if r.get("requests") is not None}
    score, current = _score(ctx, dep), _current(ctx, dep, now, actual)
    judged = [t for t in tick_rows if t["forecast_replicas"] is not None and t["reactive_replicas"] is not None]
    below = [t["ts"] for t in judged if t["forecast_replicas"] < t["reactive_replicas"]]
    observed = [p for p in (current or {}).get("passed", []) if p["actual"] is not None]
    parts = ["warmcast keeps the newest forecast and the score of the one before it, not every past forecast, "
             "so this compares: "
             + (f"the previous forecast ({score['model']} from {score['origin']}) against the {score['leads_observed']} "
                f"minute(s) observed when it was scored" if score else "no scored forecast (none stored)"),
             f"the newest forecast's {len(observed)} passed bin(s) with actuals" if current else "no newest forecast",
             f"and, for {len(judged)} planning tick(s) of the hour, the replicas each tick's forecast asked for "
             f"against the replicas the load then needed"]
    return {"compared": "; ".join(parts), "previous_score": score, "current": current,
            "ticks_judged": len(judged), "ticks_forecast_below_load": below}
