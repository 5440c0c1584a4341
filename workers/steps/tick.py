"""The one tick: per deployment and schedule slot, signals -> forecast -> the core's ``decide``
(once) -> journal -> apply every field -> audit.  The simulator calls the same ``decide`` once a
minute; ``warmcast replay`` drives this very step over a log on the simulator's fleet, minute by
minute, and gives the fleet backtest's figures (tests/workers/test_replay.py).

What the tick applies (``workers.apply.tick``): the scale target with the instances to remove, the
wakes and the asleep target (where the backend has sleep mode; refused with the reason elsewhere),
replicas per profile while a profile switch runs, and the warmup runs.  In forecast-only mode or
while paused the whole output is journaled and audited, nothing applied.

It is exactly-once in effect, and a crash costs at most one tick:

- A run holds the deployment's plan lease (:mod:`workers.locks`), renewed while it works; a
  worker killed mid-run stops renewing, and the next tick takes over once the lease lapses.
- The whole output and the new policy state are written together (one MULTI, fenced by the
  lease) to the plan journal before anything is applied.
- A run that finds its own tick's entry still ``decided`` (its first attempt died) finishes it:
  applies the *targets* again (a no-op where they were reached), then audits.
- A run for a newer tick that finds an older entry still ``decided`` does not apply that old
  target: it records the entry as superseded (saying whether the dead attempt had acted), then
  decides its own tick from fresh signals.
- A run for a tick already done, or older than the journal's, does nothing.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Optional

from warmcast.errors import InputError
from warmcast.state import StateStore
from warmup.core import CoreConfig, ForecastInput, PolicyState, TickOutput, decide, plan_replicas, planning_capacity
from workers import apply_tick, audit, metrics, policy, shadow
from workers.context import Ctx
from workers.locks import Lease, lease
from workers.serde import policy_state_from_json, to_json
from workers.steps import tick_inputs
from workers.steps.outcome import Outcome
from workers.steps.switch_inputs import with_manual_request

log = logging.getLogger("warmcast.workers.tick")
TS = "%Y-%m-%d %H:%M:%S"


@dataclass(frozen=True)
class TickOutcome(Outcome):
    tick: str
    status: str  # applied | duplicate (this tick was done) | stale (a newer tick has planned)
    desired: int
    actual: int | None = None
    outcome: str = ""
    recovered: bool = False
    warmup: str = ""     # the warmup decision's action
    switch: str = ""     # the switch decision's action
    phase: str = ""      # the switch machine's phase after the tick
    switch_reason: str = ""
    switch_applied: bool | None = None   # None: the machine did not move, so nothing was applied
    switch_outcome: str | None = None


def step(ctx: Ctx, deployment: str, *, tick: str, run_id: str, now: Optional[datetime] = None) -> TickOutcome:
    """One tick for slot ``tick`` (``run_id``: the Celery task id, the same on a redelivery); ``now``:
    the tick's clock (the wall clock live; the replayed minute in ``warmcast replay``)."""
    now = now or datetime.now(timezone.utc)
    # one view of the deployment for the whole tick (Ctx.pinned): every step reads the same knobs
    with lease(ctx.r, ctx.prefix, "plan", deployment, ctx.options.lease_s, token=run_id) as held, \
            ctx.pinned(deployment):
        journal = ctx.state.get("plan-journal", deployment)
        _check_clock(journal, tick, now)
        if journal and journal["tick"] > tick:  # slots are ISO times: a newer tick has planned
            metrics.DUPLICATES.labels("plan").inc()
            return TickOutcome(deployment, tick, "stale", int(journal["decision"]["desired"]))
        if journal and journal.get("status") == "decided":
            if journal["tick"] == tick:
                return _finish(ctx, deployment, journal, held, recovered=True)
            _supersede(ctx, deployment, journal, tick, held, now)
        elif journal and journal["tick"] == tick:
            metrics.DUPLICATES.labels("plan").inc()
            return TickOutcome(deployment, tick, "duplicate", int(journal["decision"]["desired"]))
        journal = _decide(ctx, deployment, tick, run_id, held, now)
        return _finish(ctx, deployment, journal, held, recovered=False)


def _check_clock(journal: dict[str, Any] | None, tick: str, now: datetime) -> None:
    """A newer tick must not decide before the last one did: a clock gone backwards (a replay fed
    out of order, a host clock stepped back) would run cooldowns and the switch machine in reverse."""
    if journal and journal["tick"] < tick and now.timestamp() < float(journal["decided_at"]) - 1.0:
        last = datetime.fromtimestamp(float(journal["decided_at"]), timezone.utc).isoformat()
        raise InputError(f"tick {tick}: the clock went backwards ({now.isoformat()} is before the last decision at "
                         f"{last}); nothing decided, nothing applied")


def _decide(ctx: Ctx, dep: str, tick: str, run_id: str, held: Lease, now: datetime) -> dict[str, Any]:
    """Decide once and journal the whole output with the new policy state (one MULTI); nothing applied yet."""
    g = tick_inputs.gather(ctx, dep, now)  # every read first, then the core alone
    with policy.locked(ctx, dep):
        ps, pdoc = policy.load(ctx.state, dep)
        policy.note_lost_state(ctx, dep, pdoc)
        cfg, pdoc = with_manual_request(ctx, dep, g.cfg, pdoc)
        active = ps.switch.active_profile or cfg.switch.default_profile
        out = decide(cfg, g.tick_input(active, bool(pdoc.get("manual_profile"))), ps)
        blocked = policy.why_not_applied(ctx, dep)
        journal = _journal(tick, run_id, now, out, blocked, g, cfg, ps)
        new_doc = policy.document(out.state if blocked is None else policy.without_scale_action(ps, out.state), pdoc)

        def write(pipe) -> None:
            st = StateStore(pipe, ctx.prefix)
            st.put("plan-journal", dep, journal)
            st.put("policy", dep, new_doc)
            tick_inputs.record_forecast(pipe, ctx, dep, cfg, g.fc)

        held.transaction(write)
        policy.note_stored(ctx, dep)
    _fault("fault_pause_after_decide_s", ctx)
    return journal


def _journal(tick: str, run_id: str, now: datetime, out: TickOutput, blocked: str | None,
             g: tick_inputs.Gathered, cfg: CoreConfig, ps: PolicyState) -> dict[str, Any]:
    """The journal entry of a decided tick: the whole output (scale, warmup, switch, events), what
    it read, the plan preview, and the cooldowns to put back should it never be applied."""
    active = out.state.switch.active_profile or cfg.switch.default_profile
    cap = planning_capacity(cfg, out.state, active)
    return {"tick": tick, "task_id": run_id, "status": "decided", "decided_at": now.timestamp(),
            "decision": to_json(out.scale), "warmup": to_json(out.warmup), "switch": to_json(out.switch),
            "events": to_json(out.events), "phase_before": ps.switch.phase.value,
            "phase": out.state.switch.phase.value, "apply": blocked is None, "blocked": blocked,
            "inputs": {**_inputs(g, cap), "capacity_source": cfg.switch.source_of(active),
                       "lead": g.lead.as_doc()},
            "plan": _plan_steps(cfg, g.fc, g.now, g.load_rpm, g.queue, g.lead.source),
            "cooldowns_before": to_json(policy.without_scale_action(ps, PolicyState()))}


def _supersede(ctx: Ctx, dep: str, journal: dict[str, Any], tick: str, held: Lease, now: datetime) -> None:
    """Close an older tick's entry left ``decided`` by a dead run without applying its target.

    Whether the dead run had acted is read from the scaler's action log (its ``tick`` field); if
    it had not, the cooldowns its decision set are put back, so an action that never happened
    does not hold the next one back."""
    scaler = ctx.scaler(dep)
    scaled = journal["apply"] and scaler.acted_on(journal["tick"])
    switched = scaler.switched_on(journal["tick"]) if journal["apply"] else None
    acted = bool(scaled or switched)
    if journal["apply"] and not acted:
        with policy.locked(ctx, dep):
            ps, pdoc = policy.load(ctx.state, dep)
            before = policy_state_from_json(journal["cooldowns_before"])
            ctx.state.put("policy", dep, policy.document(policy.without_scale_action(before, ps), pdoc))
    what = ("its first attempt had applied it before dying" if scaled else
            f"its first attempt had applied the profile switch before dying ({switched})" if switched else
            "its first attempt died before applying it" if journal["apply"] else journal["blocked"])
    outcome = f"superseded by tick {tick}: not applied again ({what})"
    audit.superseded(ctx, dep, {**journal, "status": "superseded", "apply": acted, "outcome": outcome,
                                "finished_at": now.timestamp()}, held.transaction, switched)


def _inputs(g: tick_inputs.Gathered, cap: float) -> dict[str, Any]:
    """What the decision read, as the audit entry shows it."""
    sig, fdoc = g.sig, g.fdoc
    return {"observed_rpm": g.load_rpm, "load_source": g.load_source, "queue_depth": sig.get("queue_depth"),
            "p99_s": sig.get("p99_s"), "ready": sig.get("ready"), "provisioned": sig.get("provisioned"),
            "signals_ts": sig.get("ts"), "capacity_rpm": cap, "recent_errors": len(g.errors),
            "ready_by_profile": g.ready, "forecast_model": fdoc.get("model") if fdoc else None,
            "forecast_origin": fdoc.get("origin") if fdoc else None}


def _finish(ctx: Ctx, dep: str, journal: dict[str, Any], held: Lease, recovered: bool) -> TickOutcome:
    """Apply a journaled tick's whole output, then audit it (which closes the journal entry)."""
    held.check()  # a run that stalled past its lease may have been taken over: it must not act
    done = apply_tick.tick(ctx, dep, journal, recovered)
    _fault("fault_pause_after_apply_s", ctx)
    journal = {**journal, "status": "applied", "outcome": done.scale, "actual": done.actual,
               "finished_at": time.time()}
    audit.tick(ctx, dep, journal, done, held.transaction)
    shadow.record(ctx, dep, journal)   # forecast-only mode: the fleet's minute beside the decision (issue 30)
    sw = journal["switch"]
    return TickOutcome(dep, journal["tick"], "applied", int(journal["decision"]["desired"]), done.actual,
                       done.scale, recovered, journal["warmup"]["action"], sw["action"], journal["phase"],
                       f"{sw['reason']['code']}: {sw['reason']['text']}", *(done.switch or (None, None)))


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
