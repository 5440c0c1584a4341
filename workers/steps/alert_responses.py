"""Each tier's responses applied through the existing actuators: the diagnostic report, the
max-num-seqs adjustment (a derived profile through the profile switch), a standby instance
(the scaler, with a planner floor until the alert resolves), rollback (the profile switch) and
failover (the DR target as the deployment's scaler, plus the redeploy webhook).

Each function returns ``(applied, outcome, inputs)`` for the audit; bad configuration or an
unreachable webhook is an outcome ("failed: ..."), never an exception that loses the rest.
"""
from __future__ import annotations

import json
import os
from datetime import datetime, timedelta
from typing import Any, Callable

from warmcast.errors import WarmcastError
from warmup.core.alerts import (AlertDecision, AlertNote, ProfileSpell, Response, adjusted_seqs,
                                last_stable_profile, variant_name)
from workers import policy
from workers.alerting import state as alert_state
from workers.actuation import RecordingScaler, live_scaler
from workers.alerting.report import build_report, post_json
from workers.context import Ctx

Result = tuple[bool, str, dict[str, Any]]


def run(ctx: Ctx, dep: str, resp: Response, note: AlertNote, dec: AlertDecision, now: datetime) -> Result:
    """Apply one response (unless the decision said not to) and audit it."""
    tier = resp.tier.name.lower()
    if not resp.apply:
        result: Result = (False, f"not applied: {resp.why_not}", {})
    else:
        try:
            result = RESPONSES[resp.kind](ctx, dep, note, dec, now)
        except Exception as err:  # noqa: BLE001 - any backend's failure is this response's outcome, not the rest's
            result = (False, f"failed: {type(err).__name__}: {err}", {})
    applied, outcome, inputs = result
    ctx.state.audit(dep, "alert-response", f"{tier} {resp.kind}", str(dec.reason), applied, outcome,
                    {"group_key": note.group_key, "alertnames": list(note.alertnames), **inputs})
    return result


def report(ctx: Ctx, dep: str, note: AlertNote, dec: AlertDecision, now: datetime) -> Result:
    doc, text = build_report(ctx, dep, note, dec, now)
    alert_state.keep_report(ctx.r, ctx.prefix, dep, {**doc, "text": text})
    spec = ctx.dep(dep).alerts
    if not spec.report_url:
        return True, "report kept (no alerts.report_url configured to post it to)", {}
    ok, said = post_json(spec.report_url, {**doc, "text": text}, _token(spec.report_token_env))
    return ok, f"report kept; posted to {spec.report_url}: {said}", {}


def _current_profile(ctx: Ctx, dep: str) -> str:
    ps, _ = policy.load(ctx.state, dep)
    return ps.switch.active_profile or ctx.dep(dep).default_profile


def adjust(ctx: Ctx, dep: str, note: AlertNote, dec: AlertDecision, now: datetime) -> Result:
    d = ctx.dep(dep)
    current = _current_profile(ctx, dep)
    base = d.profiles[current]
    seqs = base.engine_args.get("max-num-seqs")
    if seqs is None:
        return False, f"not applied: profile {current} sets no max-num-seqs to adjust (declare it)", {}
    direction = note.adjust or "down"
    new = adjusted_seqs(int(seqs), direction)
    name = variant_name(current, new)
    alert_state.put_variant(ctx.r, ctx.prefix, dep, name, {
        "base": current, "capacity_rpm": base.capacity_rpm, "capacity_tokens_per_s": base.capacity_tokens_per_s,
        "engine_args": {**base.engine_args, "max-num-seqs": new}, "created": now.isoformat()})
    _changed(ctx, dep)
    ctx.state.request_profile(dep, name, by="alerts")
    return True, (f"max-num-seqs {seqs} -> {new} ({direction} 10%): derived profile {name} requested through "
                  f"the profile switch (canary, then all, with its P99 rollback)"), \
        {"profile": current, "variant": name, "max_num_seqs": [int(seqs), new]}


def standby(ctx: Ctx, dep: str, note: AlertNote, dec: AlertDecision, now: datetime) -> Result:
    d = ctx.dep(dep)
    scaler = ctx.scaler(dep)
    cur = scaler.current()
    want = min(d.max_replicas, cur + d.alerts.standby)
    if want <= cur:
        return False, f"not applied: already at max_replicas {d.max_replicas}", {"replicas": cur}
    _raise_floor(ctx, dep, want, note.group_key)
    out = scaler.scale_to(want, f"standby for alert {', '.join(note.alertnames)}", tick=f"alert:{note.group_key}")
    return True, (f"standby started: {out.detail}; the planner keeps at least {want} until the alert "
                  "resolves"), {"before": out.before, "target": want}


def _raise_floor(ctx: Ctx, dep: str, floor: int, group: str) -> None:
    """min_replicas raised to ``floor`` in the policy overrides; the value before is kept once."""
    ov = ctx.state.get("policy-config", dep) or {}
    scaling = dict(ov.get("scaling") or {})
    fkey = alert_state.key(ctx.prefix, "alert-floor", dep)
    ctx.r.set(fkey, json.dumps({"before": scaling.get("min_replicas"), "group": group}), nx=True)
    scaling["min_replicas"] = max(floor, int(scaling.get("min_replicas") or 0))
    ctx.state.put("policy-config", dep, {**ov, "scaling": scaling})


def restore_floor(ctx: Ctx, dep: str, group: str) -> str:
    """A reopened episode whose standby ran: the floor its resolution released, raised again (the
    deployment's minimum plus the standby, or what runs now if more)."""
    d = ctx.dep(dep)
    floor = min(d.max_replicas, max(ctx.scaler(dep).current(), ctx.cfg(dep).scaling.min_replicas + d.alerts.standby))
    _raise_floor(ctx, dep, floor, group)
    return f"planner floor raised to {floor} again: the alert fires on after a premature resolution"


def release_floor(ctx: Ctx, dep: str) -> str | None:
    """On resolution: min_replicas back to what it was before the standby (None: none raised)."""
    raw = ctx.r.getdel(alert_state.key(ctx.prefix, "alert-floor", dep))
    if raw is None:
        return None
    before = json.loads(raw)["before"]
    ov = ctx.state.get("policy-config", dep) or {}
    scaling = {k: v for k, v in (ov.get("scaling") or {}).items() if k != "min_replicas"}
    if before is not None:
        scaling["min_replicas"] = before
    ctx.state.put("policy-config", dep, {**ov, "scaling": scaling})
    return f"planner floor back to {before if before is not None else 'the deployments file min_replicas'}"


def rollback(ctx: Ctx, dep: str, note: AlertNote, dec: AlertDecision, now: datetime) -> Result:
    d = ctx.dep(dep)
    current = _current_profile(ctx, dep)
    firing = tuple((e.opened, e.resolved_at) for e in map(alert_state.episode_from_doc,
                                                          alert_state.episodes(ctx.r, ctx.prefix, dep)))
    target, why = last_stable_profile(_spells(ctx, dep, d.default_profile, now), firing,
                                      timedelta(minutes=d.alerts.settle_min), now, current)
    if target is None:
        pending = ctx.state.take_profile_request(dep)
        if pending and pending.get("by") == "alerts":
            return True, f"kept on {current}: {why}; the pending switch to {pending['profile']} withdrawn", {}
        if pending:
            ctx.state.request_profile(dep, pending["profile"], by=pending.get("by", "api"))  # not ours: put back
        return False, f"not applied: {why}", {"profile": current}
    ctx.state.request_profile(dep, target, by="alerts")
    return True, f"rollback {current} -> {target} requested through the profile switch: {why}", \
        {"profile": current, "target": target}


def _spells(ctx: Ctx, dep: str, default: str, now: datetime) -> tuple[ProfileSpell, ...]:
    """The profiles the fleet ran, from the completed switches in the audit (oldest first)."""
    start, profile, out = datetime(1970, 1, 1), default, []
    for row in reversed(ctx.state.audit_log(dep, kind="switch", limit=1000)):
        action, _, move = row["decision"].partition(" ")
        if not row["applied"] or action not in ("move_all", "rollback") or "->" not in move:
            continue
        at = datetime.fromisoformat(row["ts"])
        out.append(ProfileSpell(profile, start, at))
        start, profile = at, move.split("->", 1)[1]
    out.append(ProfileSpell(profile, start, None))
    return tuple(out)


def failover(ctx: Ctx, dep: str, note: AlertNote, dec: AlertDecision, now: datetime) -> Result:
    d = ctx.dep(dep)
    spec = d.alerts.failover
    if spec is None:
        return False, "not applied: no failover target configured (alerts.failover)", {}
    replicas = max(d.min_replicas, 1, _current_or(ctx, dep, 0))
    ctx.r.set(alert_state.key(ctx.prefix, "failover", dep),
              json.dumps({"scaler": spec.scaler, "since": now.isoformat(), "group": note.group_key}))
    _changed(ctx, dep)
    # The DR target itself, also on a simulated fleet: it is a real place outside the loop.
    dr = RecordingScaler(live_scaler(ctx.dep(dep), ctx.r, ctx.prefix, ctx.settings.state_dir), ctx.r, ctx.prefix, dep)
    out = dr.scale_to(replicas, f"failover for alert {', '.join(note.alertnames)}", tick=f"alert:{note.group_key}")
    said = "no redeploy_url configured"
    if spec.redeploy_url:
        body = {"deployment": dep, "reason": str(dec.reason), "alerts": list(note.alertnames), "dr_target": spec.scaler}
        _, said = post_json(spec.redeploy_url, body, _token(spec.redeploy_token_env))
    return True, (f"failed over to the {ctx.dep(dep).scaler.kind} DR target ({out.detail or 'at target'}); "
                  f"redeploy: {said}"), {"dr_target": spec.scaler, "replicas": replicas}


def _current_or(ctx: Ctx, dep: str, default: int) -> int:
    try:
        return ctx.scaler(dep).current()
    except (WarmcastError, OSError):
        return default


def _changed(ctx: Ctx, dep: str) -> None:
    """This process sees the derived profile or the DR target at once (others within a second)."""
    ctx.cache.pop(("effective", dep), None)


def _token(env: str | None) -> str | None:
    return os.environ.get(env) if env else None


RESPONSES: dict[str, Callable[..., Result]] = {
    "report": report, "adjust": adjust, "standby": standby, "rollback": rollback, "failover": failover}
