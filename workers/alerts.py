"""The alert step: one Alertmanager notification (recorded by the API's receiver) in, the core's
tier decision (``warmup.core.alerts``), the episode stored, each response applied and audited.

Idempotent across retries, duplicate deliveries and worker restarts: the decision and the
episode it moves to are made and stored under one lease per deployment before anything runs,
so a second delivery of the same notification finds the tier already handled.  (A worker that
dies between storing and applying loses that response rather than running it twice; the audit
then shows the decision without its response entry.)
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

from warmup.core.alerts import AlertConfig, Tier, decide_alert
from warmup.core.reasons import ReasonCode
from workers import alert_responses, alert_state, metrics, policy
from workers.context import Ctx
from workers.locks import lease
from workers.steps.outcome import Outcome


@dataclass(frozen=True)
class AlertOutcome(Outcome):
    group_key: str
    status: str
    code: str
    reason: str
    tier: str
    responses: list[dict[str, Any]]


def alert_config(ctx: Ctx, dep: str) -> AlertConfig:
    spec = ctx.dep(dep).alerts
    return AlertConfig(windows={Tier.PRIMARY: timedelta(minutes=spec.primary_window_min),
                                Tier.MEDIUM: timedelta(minutes=spec.medium_window_min)},
                       late_copy=timedelta(seconds=spec.late_copy_s),
                       reopen_within=timedelta(minutes=spec.reopen_within_min))


def step(ctx: Ctx, deployment: str, note_doc: dict[str, Any], now: datetime | None = None) -> AlertOutcome:
    """Decide and apply the responses one notification calls for."""
    note = alert_state.note_from_doc(note_doc)
    now = now or datetime.now(timezone.utc).replace(tzinfo=None)
    cfg = alert_config(ctx, deployment)
    done = []
    with lease(ctx.r, ctx.prefix, "alerts", deployment, ttl_s=30.0, wait_s=30.0):
        before = alert_state.load_episode(ctx.r, ctx.prefix, deployment, note.group_key)
        dec = decide_alert(note, before, cfg, now, policy.why_not_applied(ctx, deployment))
        if dec.episode is not None:
            alert_state.store_episode(ctx.r, ctx.prefix, dec.episode)
        released = _floor(ctx, deployment, note, dec)
        if released:
            done.append({"kind": "standby-floor", "tier": dec.tier.name.lower(), "applied": True,
                         "outcome": released})
        _audit(ctx, deployment, note, dec, released)  # under the lease: the audit keeps decision order
    for resp in dec.responses:  # each response audits itself after its decision's entry
        applied, outcome, _ = alert_responses.run(ctx, deployment, resp, note, dec, now)
        done.append({"kind": resp.kind, "tier": resp.tier.name.lower(), "applied": applied, "outcome": outcome})
    return AlertOutcome(deployment, note.group_key, note.status, dec.reason.code.value, str(dec.reason),
                        dec.tier.name.lower(), done)


def _floor(ctx: Ctx, dep: str, note: Any, dec: Any) -> str | None:
    """The standby floor follows the episode: released when it resolves, raised again when a
    premature resolution is undone (None: nothing changed)."""
    if dec.reason.code == ReasonCode.ALERT_RESOLVED:
        return alert_responses.release_floor(ctx, dep)
    if dec.reopened and dec.episode is not None and "medium:standby" in dec.episode.done \
            and policy.why_not_applied(ctx, dep) is None:
        return alert_responses.restore_floor(ctx, dep, note.group_key)
    return None


def _audit(ctx: Ctx, dep: str, note: Any, dec: Any, released: str | None) -> None:
    """One entry per notification: what came in and what it decided (the responses' own entries
    follow with their outcomes)."""
    kinds = [r.kind for r in dec.responses] + (["standby floor"] if released else [])
    what = ", ".join(kinds) or ("episode closed" if dec.reason.code == ReasonCode.ALERT_RESOLVED
                                else "nothing")  # the dashboard hides "nothing"
    go = any(r.apply for r in dec.responses) or bool(released)
    outcome = released or ("responses follow" if go else (dec.responses[0].why_not if dec.responses else ""))
    metrics.DECISIONS.labels(dep, "alert", dec.reason.code.value, str(go).lower()).inc()
    ctx.state.audit(dep, "alert", f"{note.status} {dec.tier.name.lower()}: {what}", str(dec.reason), go, outcome,
                    {"group_key": note.group_key, "alertnames": list(note.alertnames), "status": note.status,
                     "tier": note.tier.name.lower(), "code": dec.reason.code.value})
