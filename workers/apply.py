"""Decisions applied through the deployment's actuators: the scaler (targets, idempotent),
warmup runs, profile switches.  Each function returns what happened, in words, for the audit."""
from __future__ import annotations

from typing import Any

from warmcast.errors import WarmcastError
from warmcast.text import clip
from warmup.core import WarmupAction
from warmup.core.switch_capacity import single_workload_replicas
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


def backend(ctx: Ctx, dep: str) -> Any:
    """The deployment's fleet itself (the simulated one, or the scaler's backend) for the calls only some
    backends have: replicas per profile, sleep mode, ready per profile."""
    return ctx.sim(dep) if ctx.simulate else ctx.scaler(dep).inner


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
        hit = ctx.sim(dep).warm(list(targets), wd.requests_per_instance, wd.duration_s)
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
    """(applied, outcome) of a switch decision on the fleet: replicas per profile where the scaler
    runs profiles side by side (simulated fleet, local processes, one Kubernetes workload per
    profile), a surge-only rollout of a single Kubernetes workload, or why it cannot be applied."""
    a = dec.action.value
    inner = backend(ctx, dep)
    if dec.replicas and hasattr(inner, "set_replicas"):
        active = dec.to_profile if a in ("settled", "restored", "cancel") else None
        want = {p: int(n) for p, n in dec.replicas}
        try:
            out = inner.set_replicas(want, clip(f"profile switch ({a}): {dec.reason.text}", 500), active)
        except WarmcastError as err:  # recorded as not applied; the machine's next tick decides again
            return False, f"failed: {err}"
        return True, _replicas_outcome(want, out) + route_weights(inner, dec)
    if hasattr(inner, "roll_profile"):
        return roll(inner, dec)
    if a in ("cancel", "none"):
        return True, "nothing to apply"
    return False, f"not applied: the {ctx.dep(dep).scaler.kind} scaler cannot switch profiles"


def route_weights(inner: Any, dec: Any) -> str:
    """Set a weighted route's weights for the switch's phase (issue 42); the audit's words for it."""
    if not dec.weights:
        return ""
    per = ", ".join(f"{p} {w}" for p, w in dec.weights)
    if not hasattr(inner, "set_weights"):
        return f"; route weights {per} not set: this backend has no weighted route"
    try:
        inner.set_weights(dict(dec.weights))
    except WarmcastError as err:
        return f"; route weights {per} not set: {err}"
    return f"; route weights {per}"


def _replicas_outcome(want: dict[str, int], out: Any) -> str:
    """The audit's words for replicas set per profile ("no change: ..." when nothing moved)."""
    per = ", ".join(f"{p} {n}" for p, n in want.items())
    if "before" in out:  # Kubernetes workloads: the spec before and after
        if out["before"] == out["replicas"]:
            return f"no change: replicas per profile {per}"
        return f"replicas per profile {per} (before {out['before']})"
    started, stopped = out.get("started", 0), out.get("stopped", 0)
    n_started = len(started) if isinstance(started, list) else int(started)
    n_stopped = len(stopped) if isinstance(stopped, list) else int(stopped)
    if not n_started and not n_stopped:
        return f"no change: replicas per profile {per}"
    return f"replicas per profile {per}: {n_started} started, {n_stopped} stopped"


def roll(inner: Any, dec: Any) -> tuple[bool, str]:
    """A single workload: it rolls to the target at the canary (it cannot run a share of it) and
    back on a rollback, surge-only, with the pod count of the profile it rolls onto in the same
    patch (``single_workload_replicas``: never fewer pods while rolling, that profile's own count
    once its ready replicas cover the need); pre-warming a second profile beside it is impossible."""
    a = dec.action.value
    if a == "prewarm":
        return False, ("not applied: a single workload cannot pre-warm a second profile beside the first; at "
                       "the switch time its rollout starts new pods (maxSurge) before any old one goes")
    try:
        current = inner.current()
        want = single_workload_replicas(dec, current)
        if a in ("move_canary", "rollback"):
            out = inner.roll_profile(dec.to_profile, want)
            if out["patched"]:
                return True, (f"pod template patched to {dec.to_profile} with replicas {out['replicas_before']} -> "
                              f"{out['replicas']}: surge-only rolling update (maxUnavailable 0, maxSurge "
                              f"{out['max_surge']}); the whole workload moves, a single workload has no canary share")
        return _rescale(inner, dec, current, want)
    except Exception as err:  # noqa: BLE001 - an API server that fails: not applied, the next tick decides again
        return False, f"not applied: {err}"


def _rescale(inner: Any, dec: Any, current: int, want: int | None) -> tuple[bool, str]:
    """A single workload's count between template patches: raised when the need grows while it
    rolls, set to the profile's own count once that profile's ready replicas cover the need."""
    if want is None or want == current:
        return True, "no change: the rollout runs in Kubernetes"
    res = inner.scale_to(want, clip(f"profile switch ({dec.action.value}, {dec.phase.value}): {dec.reason.text}", 500))
    if not res.applied:
        return False, f"not applied: {res.error}"
    onto = dec.from_profile if dec.phase.value == "rollback" else dec.to_profile
    why = (f"{onto} needs {want} for the plan's need" if want > current
           else f"{onto}'s ready replicas cover the need: the surplus pods go")
    return True, f"replicas {current} -> {want} for {onto} ({why})"
