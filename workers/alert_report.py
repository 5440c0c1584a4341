"""The diagnostic report a primary-tier alert sends the on-call engineer: the alert, the last
hour's load and forecast vs actual, the live signals, recent decisions with their reasons, the
current profile and instances; as JSON and as readable text."""
from __future__ import annotations

import math
from datetime import datetime
from typing import Any

import httpx
import pandas as pd

from warmup.core.alerts import AlertDecision, AlertNote
from workers import policy
from workers.context import Ctx

TS = "%Y-%m-%d %H:%M:%S"


def _num(v: Any) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(f) or math.isinf(f) else round(f, 3)


def _load(ctx: Ctx, dep: str, now: datetime) -> list[list[Any]]:
    """The last hour's requests per minute, as stored (the actuals the forecast is judged on)."""
    start = pd.Timestamp(now) - pd.Timedelta(hours=1)
    try:
        s = ctx.store.series(dep, start=start, end=pd.Timestamp(now))
    except Exception:  # noqa: BLE001 - a deployment without stored load still gets its report
        return []
    return [[t.strftime(TS), _num(v)] for t, v in s.items()]


def _forecast_vs_actual(ctx: Ctx, dep: str, load: list[list[Any]]) -> dict[str, Any] | None:
    fc = ctx.state.get_forecast(dep)
    if not fc:
        return None
    origin = pd.Timestamp(fc["origin"])
    actual = dict(load)
    rows = []
    for i, mean in enumerate(fc["mean"]):
        t = (origin + pd.Timedelta(minutes=i)).strftime(TS)
        rows.append({"time": t, "forecast_mean": mean, "forecast_p90": (fc["quantiles"].get("0.9") or [None] * 99)[i],
                     "actual": actual.get(t)})
    return {"origin": fc["origin"], "model": fc["model"], "created_at": fc.get("created_at"), "minutes": rows[:30]}


def build_report(ctx: Ctx, dep: str, note: AlertNote, dec: AlertDecision, now: datetime) -> tuple[dict[str, Any], str]:
    d = ctx.dep(dep)
    ps, _ = policy.load(ctx.state, dep)
    sig = ctx.state.get("signals", dep) or {}
    load = _load(ctx, dep, now)
    doc = {
        "deployment": dep, "generated_at": now.strftime(TS), "tier": dec.tier.name.lower(),
        "alert": {"group_key": note.group_key, "status": note.status, "alertnames": list(note.alertnames),
                  "starts_at": note.starts_at.strftime(TS)},
        "decision": str(dec.reason), "slo": d.slo.describe(),
        "profile": ps.switch.active_profile or d.default_profile, "switch_phase": ps.switch.phase.value,
        "instances": [{k: i.get(k) for k in ("id", "url", "state", "profile")} for i in sig.get("instances", [])],
        "signals": {k: sig.get(k) for k in ("queue_depth", "running", "p99_s", "observed_rpm", "ready", "provisioned")},
        "load_last_hour": load, "forecast_vs_actual": _forecast_vs_actual(ctx, dep, load),
        "recent_decisions": [{k: r[k] for k in ("ts", "kind", "decision", "reason", "applied", "outcome")}
                             for r in ctx.state.audit_log(dep, limit=20)],
    }
    return doc, report_text(doc)


def report_text(doc: dict[str, Any]) -> str:
    a, s = doc["alert"], doc["signals"]
    seen = [v for _, v in doc["load_last_hour"] if v is not None]
    lines = [f"[{doc['tier'].upper()}] {doc['deployment']}: {', '.join(a['alertnames'])} firing since {a['starts_at']} UTC",
             f"decision: {doc['decision']}", f"SLO: {doc['slo']}",
             f"profile: {doc['profile']} (switch {doc['switch_phase']}); instances: "
             + (", ".join(f"{i['url'] or i['id']} {i['state']}" for i in doc["instances"]) or "none seen"),
             f"signals: queue {s['queue_depth']}, running {s['running']}, P99 {s['p99_s']} s, "
             f"{s['observed_rpm']} req/min, {s['ready']}/{s['provisioned']} ready",
             f"load last hour: {len(seen)} minutes stored" + (f", mean {sum(seen) / len(seen):.1f}, max "
                                                              f"{max(seen):.1f} req/min" if seen else "")]
    fva = doc["forecast_vs_actual"]
    if fva:
        pairs = [m for m in fva["minutes"] if m["actual"] is not None]
        lines.append(f"forecast {fva['model']} from {fva['origin']}: " + (", ".join(
            f"{m['time'][11:16]} {m['forecast_mean']:.0f} vs {m['actual']:.0f}" for m in pairs[:10])
            or "no actuals yet for its minutes"))
    lines.append("recent decisions:")
    lines += [f"  {r['ts']} {r['kind']} {r['decision']}: {r['reason'][:160]}" for r in doc["recent_decisions"][:10]]
    return "\n".join(lines)


def post_json(url: str, body: dict[str, Any], token: str | None, timeout_s: float = 10.0) -> tuple[bool, str]:
    """POST ``body``; (delivered, what happened) -- an unreachable hook is an outcome, not an error."""
    from warmcast.state import dumps

    headers = {"content-type": "application/json"}
    if token:
        headers["authorization"] = f"Bearer {token}"
    try:
        resp = httpx.post(url, content=dumps(body), headers=headers, timeout=timeout_s)
    except httpx.HTTPError as err:
        return False, f"not delivered ({type(err).__name__}: {err})"
    return resp.is_success, f"HTTP {resp.status_code}"

