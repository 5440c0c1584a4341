"""Every decision recorded with its reason: the audit stream (``<prefix>:audit:<deployment>``),
the decision counters and the structured log line.  Scale decisions also close their plan-journal
entry, the fleet history and the plan document, in the same MULTI as their audit entry."""
from __future__ import annotations

import logging
from typing import Any, Callable

import pandas as pd

from warmcast.state import StateStore
from workers import metrics, policy
from workers.apply import reason_text
from workers.context import Ctx

log = logging.getLogger("warmcast.workers.audit")
TS = "%Y-%m-%d %H:%M:%S"
# Runs a function that queues writes on a pipeline, as one MULTI/EXEC (Lease.transaction).
Commit = Callable[[Callable[[Any], Any]], None]


def scale(ctx: Ctx, dep: str, journal: dict[str, Any], commit: Commit) -> None:
    """Record a finished planning run: journal ``applied``, audit entry, fleet history, plan doc,
    written by ``commit`` (the plan lease's fenced MULTI)."""
    d = journal["decision"]
    ts = pd.Timestamp(journal["decided_at"], unit="s")
    plan_doc = {"created_at": ts.strftime(TS), "tick": journal["tick"],
                "forecast_model": journal["inputs"].get("forecast_model"), "desired": int(d["desired"]),
                "current": int(d["current"]), "action": d["action"], "reason": reason_text(d),
                "applied": bool(journal["apply"]), "outcome": journal["outcome"], "steps": journal["plan"],
                "lead": journal["inputs"].get("lead"), **_summaries(ctx, dep)}

    def write(pipe) -> None:
        st = _scale_entry(StateStore(pipe, ctx.prefix), dep, journal)
        st.record_fleet(dep, ts, int(d["desired"]), journal["actual"])
        st.put("plan", dep, plan_doc)

    commit(write)
    metrics.DECISIONS.labels(dep, "scale", d["reason"]["code"], str(bool(journal["apply"])).lower()).inc()
    log.info("plan", extra={"event": {"deployment": dep, "tick": journal["tick"], "action": d["action"],
                                      "current": d["current"], "desired": d["desired"], "reason": reason_text(d),
                                      "applied": journal["apply"], "outcome": journal["outcome"]}})


def tick(ctx: Ctx, dep: str, journal: dict[str, Any], done: Any, commit: Commit) -> None:
    """Record a finished tick: the scale entry (closing the journal), then the warmup, switch and
    asleep-tier entries of the same output (``done``: :class:`workers.apply_tick.Applied`)."""
    from warmup.core import Event, SwitchDecision, WarmupDecision
    from workers.serde import from_json

    scale(ctx, dep, journal, commit)
    sig = {**journal["inputs"], "observed_rpm": journal["inputs"].get("observed_rpm")}
    warmup(ctx, dep, from_json(WarmupDecision, journal["warmup"]), sig, done.warmup_targets,
           bool(journal["apply"]), done.warmup)
    events = tuple(from_json(Event, e) for e in journal["events"])
    if done.switch is not None:
        switch(ctx, dep, from_json(SwitchDecision, journal["switch"]), events, sig, bool(journal["apply"]),
               *done.switch)
    if done.sleep is not None:
        d = journal["decision"]
        ctx.state.audit(dep, "sleep", f"asleep target {d.get('asleep_target', 0)}, wake {len(d.get('wake', ()))}",
                        f"{d['reason']['text']}", not done.sleep.startswith("not applied"), done.sleep,
                        {"tick": journal["tick"], "buffer": d.get("buffer", 0), "asleep": d.get("asleep", 0)})


def superseded(ctx: Ctx, dep: str, journal: dict[str, Any], commit: Commit, switched: str | None = None) -> None:
    """Record an older tick's planning run closed without applying it again (the journal says why),
    and, where its switch moved, the switch entry its dead run never wrote (``switched``: what that
    run had done to the fleet, None if nothing)."""
    sw = journal["switch"]
    moved = sw["action"] != "none" or journal["phase"] != journal["phase_before"]

    def write(pipe) -> None:
        st = _scale_entry(StateStore(pipe, ctx.prefix), dep, journal)
        if moved:
            st.audit(dep, "switch", f"{sw['action']} {sw.get('from_profile') or ''}->{sw.get('to_profile') or ''}",
                     f"{sw['reason']['code']}: {sw['reason']['text']}", switched is not None,
                     journal["outcome"], {"tick": journal["tick"], "phase": journal["phase"],
                                          "share": sw.get("share"), "fleet": switched})

    commit(write)
    log.warning("plan superseded", extra={"event": {"deployment": dep, "tick": journal["tick"],
                                                    "outcome": journal["outcome"]}})


def _scale_entry(st: StateStore, dep: str, journal: dict[str, Any]) -> StateStore:
    """Queue the journal entry and the scale audit entry on ``st`` (a pipeline's store)."""
    d, inputs = journal["decision"], journal["inputs"]
    st.put("plan-journal", dep, journal)
    reason = reason_text(d)
    if inputs.get("capacity_source"):  # which capacity the replicas were counted with (issue 15)
        reason += f" [capacity {inputs['capacity_rpm']:g} req/min per replica, {inputs['capacity_source']}]"
    st.audit(dep, "scale", f"{d['action']} {d['current']}->{d['desired']}", reason, bool(journal["apply"]),
             journal["outcome"], {**journal["inputs"], "tick": journal["tick"], "decided_at": journal["decided_at"],
                                  "reactive_replicas": d["reactive_replicas"],
                                  "forecast_replicas": d["forecast_replicas"], "raw": d["raw"]})
    return st


def _summaries(ctx: Ctx, dep: str) -> dict[str, list[dict[str, Any]]]:
    """The plan document's running warmup and switch, from the policy state as the tick stored it
    (read and parsed once, not once for each)."""
    ps, _ = policy.load(ctx.state, dep)
    w, s = ps.warmup, ps.switch
    warmups = [] if w.active_until is None else [{"tier": w.tier, "until": w.active_until.strftime(TS)}]
    switches = [] if s.phase.value == "steady" else [{
        "phase": s.phase.value, "from": s.active_profile, "to": s.target_profile,
        "since": s.since.strftime(TS) if s.since else None}]
    return {"warmups": warmups, "switches": switches}


def warmup(ctx: Ctx, dep: str, wd: Any, sig: dict[str, Any], targets: list[str], applied: bool,
           outcome: str | None) -> None:
    """Count every warmup decision; record the ones that started or stopped something
    (``outcome`` None: nothing to record)."""
    metrics.DECISIONS.labels(dep, "warmup", wd.reason.code.value, str(applied).lower()).inc()
    if outcome is None:
        return
    ctx.state.audit(dep, "warmup", f"{wd.action.value} {wd.tier}".strip(), str(wd.reason), applied, outcome,
                    {"queue_depth": sig.get("queue_depth"), "observed_rpm": sig.get("observed_rpm"),
                     "p99_s": sig.get("p99_s"), "instances": list(targets or wd.instances),
                     "requests_per_instance": wd.requests_per_instance, "concurrency": wd.concurrency,
                     "duration_s": wd.duration_s})
    log.info("warmup", extra={"event": {"deployment": dep, "action": wd.action.value, "reason": str(wd.reason),
                                        "instances": list(wd.instances), "applied": applied, "outcome": outcome}})


def switch(ctx: Ctx, dep: str, dec: Any, events: Any, sig: dict[str, Any], allowed: bool, applied: bool,
           outcome: str | None) -> None:
    """Count every switch decision (``allowed``: neither forecast-only nor paused); record the ones
    that moved the machine (``applied``: the fleet took it), and the machine's events."""
    metrics.DECISIONS.labels(dep, "switch", dec.reason.code.value, str(allowed).lower()).inc()
    if outcome is None:
        return
    ctx.state.audit(dep, "switch", f"{dec.action.value} {dec.from_profile}->{dec.to_profile}".strip(),
                    str(dec.reason), applied, outcome,
                    {"phase": dec.phase.value, "share": dec.share, "instances": dec.instances,
                     "p99_s": sig.get("p99_s"), "events": [str(e.reason) for e in events]})
    for e in events:
        ctx.state.audit(dep, "alert" if e.kind == "alert" else "event", e.kind, str(e.reason), False, "")


def warmup_run(ctx: Ctx, dep: str, urls: list[str], results: list[dict[str, Any]]) -> None:
    sent = sum(r["sent"] for r in results)
    metrics.WARMUP_REQUESTS.labels(dep).inc(sent)
    ctx.state.audit(dep, "warmup-run", "finished", f"{sent} warmup requests sent to {len(urls)} instance(s)",
                    True, "; ".join(f"{r['instance']}: {r['completed']} ok, {r['failed']} failed"
                                    + (f" ({r['error']})" if r["error"] else "") for r in results))


def retrain(ctx: Ctx, dep: str, report: Any, promoted: bool) -> None:
    ctx.state.audit(dep, "retrain", f"challenger {report.version}" + (" promoted" if promoted else " kept"),
                    report.decision.reason if report.decision else report.note, True, report.summary()[:2000],
                    {"maes": report.maes, "window": list(report.window)})
