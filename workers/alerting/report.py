"""The diagnostic report an alert sends the on-call engineer: the alert, the last hour's signals
(per minute from the load store, per planning tick from the audit) and forecast vs actual
(workers/alerting/history.py), the live signals, recent decisions with their reasons, the current
profile and instances; as JSON and as readable text."""
from __future__ import annotations

from datetime import datetime
from typing import Any

import httpx

from warmcast.text import clip
from warmup.core.alerts import AlertDecision, AlertNote
from workers.alerting import history as hist
from workers import policy
from workers.context import Ctx

TS = hist.TS


def build_report(ctx: Ctx, dep: str, note: AlertNote, dec: AlertDecision, now: datetime) -> tuple[dict[str, Any], str]:
    d = ctx.dep(dep)
    ps, _ = policy.load(ctx.state, dep)
    sig = ctx.state.get("signals", dep) or {}
    mins, ticks = hist.minutes(ctx, dep, now), hist.ticks(ctx, dep, now)
    doc = {
        "deployment": dep, "generated_at": now.strftime(TS), "tier": dec.tier.name.lower(),
        "alert": {"group_key": note.group_key, "status": note.status, "alertnames": list(note.alertnames),
                  "starts_at": note.starts_at.strftime(TS),
                  "alerts": [{"fingerprint": f, "status": s} for f, s in note.alerts]},
        "decision": str(dec.reason), "slo": d.slo.describe(),
        "profile": ps.switch.active_profile or d.default_profile, "switch_phase": ps.switch.phase.value,
        "instances": [{k: i.get(k) for k in ("id", "url", "state", "profile")} for i in sig.get("instances", [])],
        "signals": {k: sig.get(k) for k in ("ts", "queue_depth", "running", "p99_s", "observed_rpm", "ready",
                                            "provisioned")},
        "last_hour": {"from": (now - hist.HOUR).strftime(TS), "to": now.strftime(TS),
                      "resolution_min": mins["resolution_min"], "minutes": mins["rows"], "planning_ticks": ticks},
        "forecast_vs_actual": hist.forecast_vs_actual(ctx, dep, now, mins, ticks),
        "recent_decisions": hist.decisions(ctx, dep, now),
    }
    return doc, report_text(doc)


def report_text(doc: dict[str, Any]) -> str:
    a, s, h = doc["alert"], doc["signals"], doc["last_hour"]
    lines = [f"[{doc['tier'].upper()}] {doc['deployment']}: {', '.join(a['alertnames'])} firing since {a['starts_at']} UTC",
             f"decision: {doc['decision']}", f"SLO: {doc['slo']}",
             f"profile: {doc['profile']} (switch {doc['switch_phase']}); instances: "
             + (", ".join(f"{i['url'] or i['id']} {i['state']}" for i in doc["instances"]) or "none seen"),
             f"signals now: queue {s['queue_depth']}, running {s['running']}, P99 {s['p99_s']} s, "
             f"{s['observed_rpm']} req/min, {s['ready']}/{s['provisioned']} ready"]
    lines += _hour_text(h) + _forecast_text(doc["forecast_vs_actual"])
    lines.append("decisions in the last hour (newest first):")
    lines += [f"  {r['ts']} {r['kind']} {r['decision']}: {clip(r['reason'], 160)}"
              for r in doc["recent_decisions"][:15]]
    return "\n".join(lines)


def _hour_text(h: dict[str, Any]) -> list[str]:
    """The last hour in 10-minute rows: load from the minutes, live signals from the planning ticks."""
    seen = [r["requests"] for r in h["minutes"] if r.get("requests") is not None]
    unit = "per minute" if h["resolution_min"] == 1 else f"per {h['resolution_min']}-minute bin"
    head = (f"last hour ({h['from'][11:16]}-{h['to'][11:16]} UTC): {len(seen)} bin(s) of requests stored"
            + (f", mean {sum(seen) / len(seen):.1f}, max {max(seen):.1f} {unit}" if seen else "")
            + f"; {len(h['planning_ticks'])} planning tick(s)")
    rows: dict[str, dict[str, list]] = {}
    for r in h["minutes"]:
        rows.setdefault(r["time"][11:15] + "0", {}).setdefault("req", []).append(r.get("requests"))
    for t in h["planning_ticks"]:
        b = rows.setdefault(t["ts"][11:15] + "0", {})
        for k in ("p99_s", "queue_depth", "ready", "provisioned", "forecast_replicas", "reactive_replicas"):
            b.setdefault(k, []).append(t.get(k))
    out = [head, "  from   requests  P99 max (s)  queue max  ready/provisioned  replicas forecast/load"]
    for key in sorted(rows):
        v = {k: [x for x in xs if x is not None] for k, xs in rows[key].items()}
        ready = f"{_f(v.get('ready'), 'last')}/{_f(v.get('provisioned'), 'last')}"
        need = f"{_f(v.get('forecast_replicas'), 'max')}/{_f(v.get('reactive_replicas'), 'max')}"
        out.append(f"  {key}  {_f(v.get('req'), 'mean'):>8}  {_f(v.get('p99_s'), 'max'):>11}  "
                   f"{_f(v.get('queue_depth'), 'max'):>9}  {ready:>17}  {need:>22}")
    return out


def _f(xs: list | None, how: str) -> str:
    if not xs:
        return "-"
    v = sum(xs) / len(xs) if how == "mean" else max(xs) if how == "max" else xs[-1]
    return f"{v:.0f}" if float(v).is_integer() else f"{v:.2f}"


def _forecast_text(f: dict[str, Any]) -> list[str]:
    out = [f"forecast vs actual: {f['compared']}"]
    sc, cur = f["previous_score"], f["current"]
    if sc:
        out.append(f"  previous forecast ({sc['origin']}): MAE {sc['mae']} requests over {sc['leads_observed']} "
                   f"observed minute(s), lead 1 error {sc['lead1_abs_error']}")
    if cur:
        pairs = [f"{p['time'][11:16]} {p['forecast_mean']:.0f} vs {p['actual']:.0f}" for p in cur["passed"]
                 if p["actual"] is not None and p["forecast_mean"] is not None]
        nxt = [f"{n['time'][11:16]} {n['forecast_mean']:.0f}" for n in cur["next"] if n["forecast_mean"] is not None]
        out.append(f"  newest forecast ({cur['model']} from {cur['origin']}): "
                   + (", ".join(pairs[-10:]) or "none of its bins observed yet") + "; next: " + (", ".join(nxt) or "-"))
    below = f["ticks_forecast_below_load"]
    out.append(f"  planning ticks whose forecast asked for fewer replicas than the load needed: {len(below)} of "
               f"{f['ticks_judged']}" + (f" ({', '.join(t[11:16] for t in below[:10])})" if below else ""))
    return out


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

