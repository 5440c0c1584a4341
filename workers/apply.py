"""Decisions applied through the deployment's actuators: the scaler (targets, idempotent),
warmup runs, profile switches.  Each function returns what happened, in words, for the audit."""
from __future__ import annotations

from typing import Any

from warmcast.errors import WarmcastError
from warmup.core import WarmupAction
from workers.context import Ctx


def scale(ctx: Ctx, dep: str, journal: dict[str, Any], recovered: bool) -> tuple[str, int | None]:
    """(outcome, replicas after) of a journaled scale decision; a blocked one only reads the count."""
    d = journal["decision"]
    scaler = ctx.scaler(dep)
    if journal["apply"]:
        out = scaler.scale_to(int(d["desired"]), reason_text(d), tick=journal["tick"],
                              remove=tuple(d.get("remove", ())))
        outcome = ("scaled " + out.detail) if out.changed else (
            "no change needed" if not recovered else "target already reached by an earlier attempt")
        actual = out.after
    else:
        outcome = journal["blocked"]
        actual = current_or_none(scaler)
    if recovered:
        outcome += " (finished after the first attempt died)"
    return outcome, actual


def reason_text(decision: dict[str, Any]) -> str:
    """``code: text`` of a journaled decision's reason."""
    return f"{decision['reason']['code']}: {decision['reason']['text']}"


def current_or_none(scaler: Any) -> int | None:
    try:
        return scaler.current()
    except Exception:  # noqa: BLE001 - a scaler we may not call (paused/dry-run) need not answer
        return None


def warmup(ctx: Ctx, dep: str, wd: Any, sig: dict[str, Any], targets: list[str]) -> str:
    """Start warmup runs on ``targets`` (a START/CONTINUE) or tell running ones to stop (STOP)."""
    abort_key = f"{ctx.prefix}:warmup-abort:{dep}"
    if wd.action == WarmupAction.STOP:
        ctx.r.set(abort_key, "1", ex=600)
        return "running warmups told to stop"
    ctx.r.delete(abort_key)
    if ctx.simulate:
        hit = ctx.sim(dep).warm(list(targets), wd.requests_per_instance)
        return f"simulated warmup of {hit} instance(s), {wd.requests_per_instance} requests each"
    by_id = {i["id"]: i for i in sig.get("instances", [])}
    urls = [by_id[i]["url"] for i in targets if by_id.get(i, {}).get("url")]
    if not urls:
        return "no instance URL to warm"
    from celery import current_app

    # The run is its own task (warmcast.run_warmup, workers.steps.warmup_run): it holds a thread
    # for its duration, and the check that started it must not.
    current_app.send_task("warmcast.run_warmup", queue=ctx.options.queue, expires=max(30.0, wd.duration_s),
                          kwargs={"deployment": dep, "urls": urls, "requests": wd.requests_per_instance,
                                  "concurrency": wd.concurrency, "duration_s": wd.duration_s})
    ctx.r.sadd(f"{ctx.prefix}:warmed:{dep}", *urls)
    return f"warmup of {len(urls)} instance(s) sent: {wd.requests_per_instance} requests, concurrency {wd.concurrency}"


def switch(ctx: Ctx, dep: str, dec: Any) -> tuple[bool, str]:
    """(applied, outcome) of a switch decision on the fleet."""
    a = dec.action.value
    if not ctx.simulate:
        return _live_switch(ctx, dep, dec)
    sim = ctx.sim(dep)
    if a == "prewarm":
        cur = sim.current()
        ctx.scaler(dep).scale_to(cur + dec.instances, f"pre-warm {dec.instances} {dec.to_profile} instance(s)")
        return True, f"started {dec.instances} instance(s) for profile {dec.to_profile}"
    if a in ("move_canary", "move_all", "rollback"):
        share = 1.0 if a != "move_canary" else dec.share
        n = sim.set_profile(dec.to_profile, share)
        return True, f"{n} instance(s) now on profile {dec.to_profile}"
    return True, "nothing to apply"


def _live_switch(ctx: Ctx, dep: str, dec: Any) -> tuple[bool, str]:
    """Pre-warm, canary, move all or roll back on a scaler that runs profiles (local processes, or
    Kubernetes with one workload per profile)."""
    a = dec.action.value
    inner = ctx.scaler(dep).inner
    if a in ("cancel", "none"):
        return True, "nothing to apply (the planner scales pre-warmed instances in when not needed)"
    if not hasattr(inner, "set_profile"):
        return False, f"not applied: the {ctx.dep(dep).scaler.kind} scaler cannot switch profiles"
    try:
        if a == "prewarm":
            out = inner.prewarm(dec.to_profile, dec.instances)
            return True, f"started {dec.instances} {dec.to_profile} instance(s): {', '.join(out['started'])}"
        out = inner.set_profile(dec.to_profile, dec.share if a == "move_canary" else 1.0)
    except WarmcastError as err:  # recorded as not applied; the machine's next tick decides again
        return False, f"failed: {err}"
    moved = f"restarted {', '.join(out['restarted'])}" if out["restarted"] else "none restarted"
    return True, f"{out['on_profile']} of {out['of']} instance(s) on {dec.to_profile} ({a}; {moved})"
