"""Step 3: pre-scale.  One planning run per schedule slot (``tick``) goes signals -> forecast ->
plan (the core's ``decide_scale``) -> apply (the scaler) -> audit.

Planning is exactly-once in effect, and a crash costs at most one tick:

- A run holds the deployment's plan lease (:mod:`workers.locks`), renewed while it works; a
  worker killed mid-run stops renewing, and the next tick takes over once the lease lapses.
- The decision and the new policy state are written together (one MULTI, fenced by the lease)
  to the plan journal before anything is applied.
- A run that finds its own tick's entry still ``decided`` (its first attempt died) finishes it:
  applies the *target* again (a no-op if it was reached), then audits.
- A run for a newer tick that finds an older entry still ``decided`` does not apply that old
  target: it records the entry as superseded (saying whether the dead attempt had acted), then
  plans its own tick from fresh signals.
- A run for a tick already done, or older than the journal's, does nothing.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from warmcast.state import StateStore
from warmup.core.switching import IN_SWITCH
from warmup.core import CoreConfig, ForecastInput, PolicyState, decide_scale, plan_replicas, planning_capacity
from workers import apply, audit, lead, metrics, policy
from workers.context import Ctx
from workers.locks import Lease, lease
from workers.serde import policy_state_from_json, to_json
from workers.steps import forecast, signals
from workers.steps.outcome import Outcome

log = logging.getLogger("warmcast.workers.plan")
TS = "%Y-%m-%d %H:%M:%S"


@dataclass(frozen=True)
class PlanOutcome(Outcome):
    tick: str
    status: str  # applied | duplicate (this tick was done) | stale (a newer tick has planned)
    desired: int
    actual: int | None = None
    outcome: str = ""
    recovered: bool = False


def step(ctx: Ctx, deployment: str, *, tick: str, run_id: str) -> PlanOutcome:
    """One planning run for ``tick`` (``run_id``: the Celery task id, the same on a redelivery)."""
    with lease(ctx.r, ctx.prefix, "plan", deployment, ctx.options.lease_s, token=run_id) as held:
        journal = ctx.state.get("plan-journal", deployment)
        if journal and journal["tick"] > tick:  # slots are ISO times: a newer tick has planned
            metrics.DUPLICATES.labels("plan").inc()
            return PlanOutcome(deployment, tick, "stale", int(journal["decision"]["desired"]))
        if journal and journal.get("status") == "decided":
            if journal["tick"] == tick:
                return _finish(ctx, deployment, journal, held, recovered=True)
            _supersede(ctx, deployment, journal, tick, held)
        elif journal and journal["tick"] == tick:
            metrics.DUPLICATES.labels("plan").inc()
            return PlanOutcome(deployment, tick, "duplicate", int(journal["decision"]["desired"]))
        journal = _decide(ctx, deployment, tick, run_id, held)
        return _finish(ctx, deployment, journal, held, recovered=False)


def _decide(ctx: Ctx, dep: str, tick: str, run_id: str, held: Lease) -> dict[str, Any]:
    """Decide and journal the decision with the new policy state (one MULTI); nothing applied yet."""
    # inputs first (signals, then the forecast), then the core alone: each step module once, in order
    sig = signals.latest(ctx, dep)
    insts, load = signals.instances_of(sig), signals.value(sig, "observed_rpm")
    queue = signals.value(sig, "queue_depth", 0.0)
    fdoc, fc = forecast.stored(ctx, dep)
    cfg, lead_used = lead.with_lead(ctx, dep, ctx.cfg(dep))  # the core's lead rule: after the reads
    now = datetime.now(timezone.utc)
    with policy.locked(ctx, dep):
        ps, pdoc = policy.load(ctx.state, dep)
        active = ps.switch.active_profile or cfg.switch.default_profile
        cap = planning_capacity(cfg, ps, active)
        dec, new_ps = decide_scale(cfg.scaling, now, insts, load, queue, fc, ps, capacity_rpm=cap)
        blocked = policy.why_not_applied(ctx, dep) or _switch_holds(ps)
        journal = {"tick": tick, "task_id": run_id, "status": "decided", "decided_at": time.time(),
                   "decision": to_json(dec), "apply": blocked is None, "blocked": blocked,
                   "inputs": {**_inputs(sig, fdoc, cap), "capacity_source": cfg.switch.source_of(active),
                              "lead": lead_used.as_doc()},
                   "plan": _plan_steps(cfg, fc, now, load, queue, lead_used.source),
                   "cooldowns_before": to_json(policy.without_scale_action(ps, PolicyState()))}
        new_doc = policy.document(new_ps if blocked is None else policy.without_scale_action(ps, new_ps), pdoc)

        def write(pipe) -> None:
            st = StateStore(pipe, ctx.prefix)
            st.put("plan-journal", dep, journal)
            st.put("policy", dep, new_doc)

        held.transaction(write)
    _fault("fault_pause_after_decide_s", ctx)
    return journal


def _switch_holds(ps: PolicyState) -> str | None:
    """Why the planner does not set the count while a profile switch runs: the switch step sets
    replicas per profile then (from the plan's need), so a planner's count cannot cut its targets."""
    if ps.switch.phase in IN_SWITCH:
        return (f"held: a profile switch to {ps.switch.target_profile} is in its {ps.switch.phase.value} "
                "phase; the switch step sets replicas per profile until it ends")
    return None


def _supersede(ctx: Ctx, dep: str, journal: dict[str, Any], tick: str, held: Lease) -> None:
    """Close an older tick's entry left ``decided`` by a dead run without applying its target.

    Whether the dead run had acted is read from the scaler's action log (its ``tick`` field); if
    it had not, the cooldowns its decision set are put back, so an action that never happened
    does not hold the next one back."""
    acted = journal["apply"] and ctx.scaler(dep).acted_on(journal["tick"])
    if journal["apply"] and not acted:
        with policy.locked(ctx, dep):
            ps, pdoc = policy.load(ctx.state, dep)
            before = policy_state_from_json(journal["cooldowns_before"])
            ctx.state.put("policy", dep, policy.document(policy.without_scale_action(before, ps), pdoc))
    what = ("its first attempt had applied it before dying" if acted else
            "its first attempt died before applying it" if journal["apply"] else journal["blocked"])
    outcome = f"superseded by tick {tick}: not applied again ({what})"
    audit.superseded(ctx, dep, {**journal, "status": "superseded", "apply": acted, "outcome": outcome,
                                "finished_at": time.time()}, held.transaction)


def _inputs(sig: dict[str, Any], fdoc: dict[str, Any] | None, cap: float) -> dict[str, Any]:
    """What the decision read, as the audit entry shows it."""
    return {"observed_rpm": sig.get("observed_rpm"), "queue_depth": sig.get("queue_depth"),
            "p99_s": sig.get("p99_s"), "ready": sig.get("ready"), "provisioned": sig.get("provisioned"),
            "signals_ts": sig.get("ts"), "capacity_rpm": cap,
            "forecast_model": fdoc.get("model") if fdoc else None,
            "forecast_origin": fdoc.get("origin") if fdoc else None}


def _finish(ctx: Ctx, dep: str, journal: dict[str, Any], held: Lease, recovered: bool) -> PlanOutcome:
    """Apply a journaled decision's target, then audit it (which closes the journal entry)."""
    held.check()  # a run that stalled past its lease may have been taken over: it must not act
    outcome, actual = apply.scale(ctx, dep, journal, recovered)
    _fault("fault_pause_after_apply_s", ctx)
    journal = {**journal, "status": "applied", "outcome": outcome, "actual": actual, "finished_at": time.time()}
    audit.scale(ctx, dep, journal, held.transaction)
    return PlanOutcome(dep, journal["tick"], "applied", int(journal["decision"]["desired"]), actual, outcome,
                       recovered)


def _fault(name: str, ctx: Ctx) -> None:
    """Fault injection for the crash tests (0 in production): sleep so a test can kill the worker here."""
    pause = getattr(ctx.options, name)
    if pause > 0:
        log.warning("fault injection: sleeping %.1f s (%s)", pause, name)
        time.sleep(pause)


def _plan_steps(cfg: CoreConfig, fc: ForecastInput | None, now: datetime, load: float, queue: float,
                lead_source: str) -> list[dict[str, Any]]:
    """The core's plan (:func:`warmup.core.plan_replicas`) as the API shows it."""
    steps = plan_replicas(cfg, fc, now, load, queue)
    return [{"time": p.time.strftime(TS), "desired": p.desired, "profile": p.profile,
             "demand_rpm": None if p.demand_rpm is None else round(p.demand_rpm, 2),
             "capacity_rpm": p.capacity_rpm, "capacity_source": p.capacity_source,
             "reason": f"{p.reason} (cold start from {lead_source})"} for p in steps]
