"""The alert step: one Alertmanager notification (recorded by the API's receiver) in, the core's
tier decision (``warmup.core.alerts``), the episode stored, each response applied and audited.

Idempotent across retries, duplicate deliveries and worker restarts: the decision and the
episode it moves to are made and stored under one lease per deployment before anything runs,
so a second delivery of the same notification finds the tier already handled.  (A worker that
dies between storing and applying loses that response rather than running it twice; the audit
then shows the decision without its response entry.)

:func:`check` is the periodic escalation check: every open episode whose tier window has passed
is re-decided by the same core decision at ``now``, as a repeat of its notification would be, so
escalation does not depend on Alertmanager's ``repeat_interval``.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

from warmup.core.alerts import AlertConfig, AlertNote, Tier, decide_alert, escalation_due, still_firing
from warmup.core.reasons import ReasonCode
from workers import metrics, policy
from workers.steps import alert_responses
from workers.alerting import state as alert_state
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


def _utcnow() -> datetime:
    return datetime.now(timezone.utc).replace(tzinfo=None)


def step(ctx: Ctx, deployment: str, note_doc: dict[str, Any], now: datetime | None = None) -> AlertOutcome:
    """Decide and apply the responses one notification calls for."""
    out = _handle(ctx, deployment, alert_state.note_from_doc(note_doc), now or _utcnow(), check=False)
    assert out is not None  # only a check skips
    return out


def check(ctx: Ctx, deployment: str, now: datetime | None = None) -> list[AlertOutcome]:
    """Re-decide every open episode of ``deployment`` whose tier window has passed (the beat's
    ``warmcast-alerts`` entry); an episode a notification escalated meanwhile is skipped."""
    now = now or _utcnow()
    cfg = alert_config(ctx, deployment)
    due = [e for e in map(alert_state.episode_from_doc, alert_state.episodes(ctx.r, ctx.prefix, deployment))
           if escalation_due(e, cfg, now)]
    outs = [_handle(ctx, deployment, still_firing(e, now), now, check=True) for e in due]
    return [o for o in outs if o is not None]


def _handle(ctx: Ctx, dep: str, note: AlertNote, now: datetime, check: bool) -> AlertOutcome | None:
    """Decide under the deployment's alert lease, store the episode, audit; then run the responses.
    ``check``: a periodic re-decision, done only if the stored episode is still due (None if not)."""
    cfg = alert_config(ctx, dep)
    done = []
    with lease(ctx.r, ctx.prefix, "alerts", dep, ttl_s=30.0, wait_s=30.0):
        before = alert_state.load_episode(ctx.r, ctx.prefix, dep, note.group_key)
        if check and (before is None or not escalation_due(before, cfg, now)):
            return None  # a notification (or another check) escalated it since the episodes were read
        dec = decide_alert(note, before, cfg, now, policy.why_not_applied(ctx, dep))
        if dec.episode is not None:
            alert_state.store_episode(ctx.r, ctx.prefix, dec.episode)
        released = _floor(ctx, dep, note, dec)
        if released:
            done.append({"kind": "standby-floor", "tier": dec.tier.name.lower(), "applied": True,
                         "outcome": released})
        _audit(ctx, dep, note, dec, released, "escalation check" if check else "notification")
    for resp in dec.responses:  # each response audits itself after its decision's entry
        applied, outcome, _ = alert_responses.run(ctx, dep, resp, note, dec, now)
        done.append({"kind": resp.kind, "tier": resp.tier.name.lower(), "applied": applied, "outcome": outcome})
    return AlertOutcome(dep, note.group_key, note.status, dec.reason.code.value, str(dec.reason),
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


def _audit(ctx: Ctx, dep: str, note: Any, dec: Any, released: str | None, via: str) -> None:
    """One entry per notification (or escalation check, ``via``): what came in and what it decided
    (the responses' own entries follow with their outcomes)."""
    kinds = [r.kind for r in dec.responses] + (["standby floor"] if released else [])
    what = ", ".join(kinds) or ("episode closed" if dec.reason.code == ReasonCode.ALERT_RESOLVED
                                else "nothing")  # the dashboard hides "nothing"
    go = any(r.apply for r in dec.responses) or bool(released)
    outcome = released or ("responses follow" if go else (dec.responses[0].why_not if dec.responses else ""))
    metrics.DECISIONS.labels(dep, "alert", dec.reason.code.value, str(go).lower()).inc()
    ctx.state.audit(dep, "alert", f"{note.status} {dec.tier.name.lower()}: {what}", str(dec.reason), go, outcome,
                    {"group_key": note.group_key, "alertnames": list(note.alertnames), "status": note.status,
                     "tier": note.tier.name.lower(), "code": dec.reason.code.value, "via": via})
