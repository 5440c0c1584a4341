"""Data for the dashboard: load, forecast band, replicas and event markers for one deployment."""
from __future__ import annotations

import math
from typing import Any

import pandas as pd

from api import service
from api.deps import ApiContext
from api.schemas import DashboardOut, EventOut, ForecastOut, ReplicaPoint, Series
from warmcast.errors import NotFoundError
from warmcast.resolution import bin_label

TS = service.TS
_QUIET = {"", "none", "hold", "noop", "no_change", "nothing", "idle", "steady"}


def _category(kind: str, decision: str) -> str | None:
    if kind.startswith("alert"):  # the alert timeline: notifications that decided something, responses
        return None if decision.endswith(": nothing") else "alert"
    k = f"{kind} {decision}".lower()
    if "warmup" in k:
        return "warmup"
    if "switch" in k or "profile" in k:
        return "switch"
    if "scale" in k or "replica" in k:
        return "scale"
    if kind == "manual":
        return "manual"
    return None


def _events(ctx: ApiContext, dep: str, lo: str) -> list[EventOut]:
    out = []
    for row in ctx.state.audit_log(dep, since=lo, limit=500):
        cat = _category(row["kind"], row["decision"])
        first = row["decision"].split(" ")[0].split(":")[0].lower()
        if cat is None or first in _QUIET or row["decision"].lower() in _QUIET:
            continue  # the audit records doing nothing too; markers show actions only
        out.append(EventOut(time=row["ts"], category=cat, kind=row["kind"], decision=row["decision"][:200],
                            reason=row["reason"][:300]))
    return list(reversed(out))


def _forecast(ctx: ApiContext, dep: str, notes: list[str]) -> dict[str, Any] | None:
    try:
        return service.latest_forecast(ctx, dep, 30, (0.1, 0.5, 0.9))
    except NotFoundError as err:
        notes.append(f"no forecast: {err}")
        return None


def dashboard_data(ctx: ApiContext, dep: str, minutes: int) -> DashboardOut:
    notes: list[str] = []
    fc = _forecast(ctx, dep, notes)
    days = ctx.store.days(dep)
    last = None
    if days:
        tail = ctx.store.series(dep, start=pd.Timestamp(0) + pd.Timedelta(days=days[-1]))
        last = tail.index[-1] if len(tail) else None
    # Anchor on the data, not the wall clock: a replayed or historic log still draws.
    anchor = pd.Timestamp(fc["origin"]) if fc else (last + pd.Timedelta(minutes=1) if last is not None
                                                     else service.utcnow().floor("min"))
    lo = anchor - pd.Timedelta(minutes=minutes)
    load = ctx.store.series(dep, start=lo, end=anchor + pd.Timedelta(minutes=31)) if days else pd.Series(dtype=float)
    values = [None if not math.isfinite(v) else round(float(v), 3) for v in load.to_numpy(float)]
    hist = ctx.state.fleet_history(dep, limit=min(minutes + 60, 20000))
    replicas = [ReplicaPoint(time=r.ts, desired=int(r.desired),
                             actual=None if pd.isna(r.actual) else int(r.actual))
                for r in hist.itertuples() if r.ts >= lo.strftime(TS)]
    planned: list[ReplicaPoint] = []
    conf = ctx.configured(dep)
    if conf is not None and fc is not None:
        plan = service.current_plan(ctx, conf)
        for s in plan.get("steps") or []:
            if isinstance(s, dict) and "time" in s and isinstance(s.get("desired"), (int, float)):
                planned.append(ReplicaPoint(time=str(s["time"]), desired=int(s["desired"]), actual=None))
    if not replicas:
        notes.append("no replica history yet (the planner records it each tick)")
    if conf is not None:
        from warmup.calibration.store import load_capacities

        caps = load_capacities(ctx.redis, ctx.settings.key_prefix, conf)
        notes.append("capacity per replica: " + "; ".join(f"{n} {c.describe()}" for n, c in caps.items()))
    return DashboardOut(deployment=dep, now=service.utcnow().strftime(TS), paused=ctx.state.paused(dep) is not None,
                        load=Series(times=[t.strftime(TS) for t in load.index], values=values),
                        forecast=ForecastOut(**fc) if fc else None, replicas=replicas, planned=planned,
                        events=_events(ctx, dep, lo.strftime(TS)), notes=notes,
                        unit=bin_label(ctx.store.resolution(dep)) if days else "requests/min")
