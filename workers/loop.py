"""The loop's steps, one function per job: load inputs, call the pure core, apply, record.

The Celery tasks in :mod:`workers.tasks` are one-line wrappers around these, and
the benchmark calls them directly.  Every decision goes to the audit stream with
its reason, ``applied=False`` in forecast-only mode (``settings.dry_run``) or
while the deployment is paused.

Planning is exactly-once in effect: the decision and the new policy state are
written together (a MULTI) to the plan journal before anything is applied; a run
that finds a journal entry still ``decided`` (its first attempt died) finishes
that entry (apply the *target* again, which is a no-op if it was reached, then
audit) instead of deciding anew, and a run for a tick already ``applied`` does
nothing.
"""
from __future__ import annotations

import json
import logging
import math
import time
from datetime import datetime, timezone
from typing import Any

import numpy as np
import pandas as pd

from warmcast.errors import NotFoundError, WarmcastError
from warmcast.state import StateStore
from warmup.core import (
    ForecastInput,
    Instance,
    InstanceState,
    PolicyState,
    WarmupAction,
    decide_scale,
    decide_switch,
    decide_warmup,
    planning_capacity,
    replicas_for,
)
from workers import metrics
from workers.context import Ctx
from workers.locks import LockBusy, deployment_lock
from workers.serde import policy_state_from_json, to_json

log = logging.getLogger("warmcast.workers.loop")
TS = "%Y-%m-%d %H:%M:%S"


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


def tick_id(every_s: float, now: float | None = None) -> str:
    """The schedule slot a run belongs to (same for a redelivery of the same message)."""
    now = time.time() if now is None else now
    slot = int(now // every_s) * every_s
    return datetime.fromtimestamp(slot, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")


# --------------------------------------------------------------------------- inputs


def forecast_input(doc: dict[str, Any] | None) -> ForecastInput | None:
    if not doc or not doc.get("quantiles"):
        return None
    qs = sorted(doc["quantiles"].items(), key=lambda kv: float(kv[0]))
    origin = pd.Timestamp(doc["origin"]).to_pydatetime().replace(tzinfo=timezone.utc)
    return ForecastInput(origin=origin, levels=tuple(float(k) for k, _ in qs),
                         values=tuple(tuple(float(x) for x in v) for _, v in qs), model=str(doc.get("model", "")))


def instances_of(signals: dict[str, Any]) -> tuple[Instance, ...]:
    out = []
    for i in signals.get("instances", []):
        launched = i.get("launched_at")
        out.append(Instance(id=str(i["id"]), state=InstanceState(i["state"]), profile=i.get("profile") or "",
                            load_rpm=float(i.get("load_rpm") or 0.0), warmed=bool(i.get("warmed")),
                            launched_at=datetime.fromtimestamp(launched, timezone.utc) if launched else None))
    return tuple(out)


def _num(x: Any, default: float = math.nan) -> float:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return default
    return v


# --------------------------------------------------------------------------- policy state


def load_policy(state: StateStore, dep: str) -> tuple[PolicyState, dict[str, Any]]:
    doc = state.get("policy", dep) or {}
    return policy_state_from_json(doc.get("state")), doc


def policy_doc(ps: PolicyState, old: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {**old, **extra, "state": to_json(ps), "updated": time.time()}


def policy_lock(ctx: Ctx, dep: str, token: str | None = None):
    """The short lock around read-decide-write of a deployment's policy state (all decision jobs)."""
    return _spin(lambda: deployment_lock(ctx.r, ctx.prefix, "policy", dep, 30.0, token), 5.0)


class _spin:
    """Enter a lock context, retrying for up to ``wait_s`` while it is busy."""

    def __init__(self, make, wait_s: float) -> None:
        self.make, self.wait_s, self.cm = make, wait_s, None

    def __enter__(self):
        deadline = time.monotonic() + self.wait_s
        while True:
            cm = self.make()
            try:
                got = cm.__enter__()
                self.cm = cm
                return got
            except LockBusy:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def __exit__(self, *exc):
        return self.cm.__exit__(*exc)


def why_not_applied(ctx: Ctx, dep: str) -> str | None:
    if ctx.settings.dry_run:
        return "forecast-only mode (dry_run): decision recorded, not applied"
    paused = ctx.state.paused(dep)
    if paused:
        return f"automatic actions paused by {paused.get('by', '?')}: {paused.get('reason', '')}".rstrip(": ")
    return None


# --------------------------------------------------------------------------- signals


def scrape(ctx: Ctx, dep: str) -> dict[str, Any]:
    """Read the deployment's live signals and store them (``<prefix>:signals:<dep>``)."""
    if ctx.simulate:
        doc = ctx.sim(dep).signals()
    else:
        from workers.actuation import instance_urls, prometheus_live, scrape_live

        d = ctx.dep(dep)
        scaler = ctx.scaler(dep)
        urls = instance_urls(scaler.inner, d)
        warmed = {m.decode() for m in ctx.r.smembers(f"{ctx.prefix}:warmed:{dep}")}
        warming = {m.decode() for m in ctx.r.smembers(f"{ctx.prefix}:warming:{dep}")}
        prev = ctx.cache.get(("scrape", dep))
        profile_of = getattr(scaler.inner, "profile_of", None)
        profiles = profile_of() if profile_of else None
        if d.signals.source == "prometheus":
            doc, snap = prometheus_live(d, urls, prev, warmed, warming, profiles)
        else:
            doc, snap = scrape_live(d, urls, prev, ctx.token(dep), warmed, warming, profiles=profiles)
        ctx.cache[("scrape", dep)] = snap
        _record_counter(ctx, dep, doc)
    ctx.state.put("signals", dep, doc, ttl_s=3600)
    metrics.SIGNAL.labels(dep, "queue_depth").set(_num(doc.get("queue_depth"), 0.0))
    metrics.SIGNAL.labels(dep, "ready").set(_num(doc.get("ready"), 0.0))
    metrics.SIGNAL.labels(dep, "provisioned").set(_num(doc.get("provisioned"), 0.0))
    return doc


def _record_counter(ctx: Ctx, dep: str, doc: dict[str, Any]) -> None:
    """Keep the fleet's cumulative request count per minute, for :func:`ingest`."""
    total = doc.get("requests_total")
    if total is None:
        return
    minute = int(doc["ts"] // 60)
    ctx.r.hset(f"{ctx.prefix}:counter:{dep}", str(minute), repr(float(total)))


def fresh_signals(ctx: Ctx, dep: str) -> dict[str, Any]:
    doc = ctx.state.get("signals", dep)
    if doc is None or time.time() - float(doc.get("ts", 0)) > ctx.options.signals_max_age_s:
        doc = scrape(ctx, dep)
    return doc


# --------------------------------------------------------------------------- ingest


def ingest(ctx: Ctx, dep: str) -> int:
    """Add the minutes completed since the last ingest to the load store; returns minutes written."""
    now_min = int(time.time() // 60)
    mark_key = f"{ctx.prefix}:ingested:{dep}"
    last = ctx.r.get(mark_key)
    start = int(last) + 1 if last is not None else now_min - 60
    if start >= now_min:
        return 0
    if ctx.simulate:
        values = ctx.sim(dep).traffic(start, now_min)
    else:
        values = _counter_minutes(ctx, dep, start, now_min)
    if values:
        idx = pd.DatetimeIndex(pd.to_datetime(np.array(sorted(values), np.int64) * 60, unit="s"), name="time")
        ctx.store.upsert_frame(dep, pd.DataFrame({"requests": [values[m] for m in sorted(values)]}, index=idx))
    ctx.r.set(mark_key, now_min - 1)
    return len(values)


def _counter_minutes(ctx: Ctx, dep: str, start: int, end: int) -> dict[int, float]:
    raw = ctx.r.hgetall(f"{ctx.prefix}:counter:{dep}")
    counts = {int(k): float(v) for k, v in raw.items()}
    out = {}
    for m in range(start, end):
        if m in counts and (m - 1) in counts:
            out[m] = max(0.0, counts[m] - counts[m - 1])  # a reset (restart) reads as 0, not negative
    return out


# --------------------------------------------------------------------------- forecast


def _model_for(ctx: Ctx, dep: str):
    """The serving model (cached per process and champion version) wrapped in the fallback rules."""
    from forecaster.fallback import FallbackForecaster
    from forecaster.registry import Registry

    reg = ctx.cache.setdefault("registry", Registry(ctx.settings.models_dir))
    try:
        version = reg.champion(dep)
    except Exception:  # noqa: BLE001 - an unreadable index is handled by serving_model below
        version = None
    key = ("model", dep)
    cached = ctx.cache.get(key)
    if cached and cached[0] == version and time.time() - cached[2] < 3600:
        return cached[1]
    model, note = reg.serving_model(dep)
    # Cheap baselines only: the fallback answers every minute and must not refit UC models each time.
    from forecaster.baselines import Persistence, SeasonalNaive

    fb = FallbackForecaster(model, baselines=[SeasonalNaive(), Persistence()],
                            primary_missing_reason=note or "no trained model")
    ctx.cache[key] = (version, fb, time.time())
    return fb


def forecast(ctx: Ctx, dep: str) -> dict[str, Any] | None:
    """Forecast the next 30 minutes from the stored load; store it; track the error of the previous one."""
    now = pd.Timestamp.now(tz="UTC").tz_localize(None)
    start = now - pd.Timedelta(days=ctx.options.forecast_history_days)
    try:
        frame = ctx.store.frame(dep, start=start)
    except NotFoundError:
        return None
    if frame.dropna(how="all").empty:
        return None
    _track_error(ctx, dep, frame)
    fb = _model_for(ctx, dep)
    fc = fb.predict(frame, horizon=30)
    trained = getattr(getattr(fb, "primary", None), "meta", {}) or {}
    doc = ctx.state.put_forecast(dep, fc, trained_at=trained.get("created_at") or trained.get("train_end"))
    metrics.FORECASTS.labels(dep, fc.model).inc()
    log.info("forecast", extra={"event": {"deployment": dep, "model": fc.model, "origin": doc["origin"],
                                          "p50_lead1": doc["mean"][0] if doc["mean"] else None,
                                          "note": fc.note}})
    return doc


def _track_error(ctx: Ctx, dep: str, frame: pd.DataFrame) -> None:
    """Once actuals arrive, score the forecast stored before: MAE over the leads now observed."""
    prev = ctx.state.get_forecast(dep)
    if not prev or "0.5" not in prev.get("quantiles", {}):
        return
    origin = pd.Timestamp(prev["origin"])
    p50 = np.asarray(prev["quantiles"]["0.5"], float)
    idx = pd.date_range(origin, periods=len(p50), freq="min")
    actual = frame["requests"].reindex(idx).to_numpy(float) if "requests" in frame else np.full(len(p50), np.nan)
    ok = np.isfinite(actual)
    if not ok.any():
        return
    err = np.abs(p50[ok] - actual[ok])
    metrics.FORECAST_MAE.labels(dep).set(float(err.mean()))
    if ok[0]:
        metrics.FORECAST_ERR.labels(dep, "1").observe(float(err[0]))
    ctx.r.hset(f"{ctx.prefix}:forecast-error:{dep}", mapping={
        "origin": prev["origin"], "model": prev.get("model", ""), "leads_observed": int(ok.sum()),
        "mae": round(float(err.mean()), 4), "lead1_abs_error": round(float(err[0]), 4) if ok[0] else "",
        "scored_at": time.time()})


# --------------------------------------------------------------------------- plan (pre-scale)


def plan(ctx: Ctx, dep: str, tick: str, task_id: str) -> dict[str, Any]:
    """One planning run for ``tick``; exactly-once in effect under redelivery (see module doc)."""
    jkey = "plan-journal"
    with deployment_lock(ctx.r, ctx.prefix, "plan", dep, ctx.options.lock_timeout_s, token=task_id):
        journal = ctx.state.get(jkey, dep)
        if journal and journal.get("status") == "decided":
            done = _finish_plan(ctx, dep, journal, recovered=True)
            if journal["tick"] == tick:
                return done
        elif journal and journal.get("tick") == tick:
            metrics.DUPLICATES.labels("plan").inc()
            return {"tick": tick, "status": "duplicate", "desired": journal["decision"]["desired"]}
        journal = _decide_plan(ctx, dep, tick, task_id)
        return _finish_plan(ctx, dep, journal, recovered=False)


def _tick_inputs(ctx: Ctx, dep: str, sig: dict[str, Any] | None = None):
    """What every decision reads first: config, fresh signals, the stored forecast (raw and as
    the core's input), instances, now."""
    sig = sig or fresh_signals(ctx, dep)
    fdoc = ctx.state.get_forecast(dep)
    return ctx.cfg(dep), sig, fdoc, forecast_input(fdoc), instances_of(sig), utcnow()


def _decide_plan(ctx: Ctx, dep: str, tick: str, task_id: str) -> dict[str, Any]:
    cfg, sig, fdoc, fc, insts, now = _tick_inputs(ctx, dep)
    with policy_lock(ctx, dep):
        ps, pdoc = load_policy(ctx.state, dep)
        cap = planning_capacity(cfg, ps, ps.switch.active_profile or cfg.switch.default_profile)
        dec, new_ps = decide_scale(cfg.scaling, now, insts, _num(sig.get("observed_rpm")),
                                   _num(sig.get("queue_depth"), 0.0), fc, ps, capacity_rpm=cap)
        blocked = why_not_applied(ctx, dep)
        journal = {"tick": tick, "task_id": task_id, "status": "decided", "decided_at": time.time(),
                   "decision": to_json(dec), "apply": blocked is None, "blocked": blocked,
                   "inputs": {"observed_rpm": sig.get("observed_rpm"), "queue_depth": sig.get("queue_depth"),
                              "p99_s": sig.get("p99_s"), "ready": sig.get("ready"),
                              "provisioned": sig.get("provisioned"), "signals_ts": sig.get("ts"),
                              "capacity_rpm": cap, "forecast_model": fdoc.get("model") if fdoc else None,
                              "forecast_origin": fdoc.get("origin") if fdoc else None},
                   "plan": _plan_steps(cfg, fc, now, cap, dec.desired)}
        pipe = ctx.r.pipeline(transaction=True)
        st = StateStore(pipe, ctx.prefix)
        st.put("plan-journal", dep, journal)
        # In forecast-only mode the cooldowns must not think an action happened.
        st.put("policy", dep, policy_doc(new_ps if blocked is None else _unapplied(ps, new_ps), pdoc))
        pipe.execute()
    _fault("fault_pause_after_decide_s", ctx)
    return journal


def _unapplied(old: PolicyState, new: PolicyState) -> PolicyState:
    from dataclasses import replace

    return replace(new, last_scale_up=old.last_scale_up, last_scale_down=old.last_scale_down,
                   scale_actions=old.scale_actions)


def _fault(name: str, ctx: Ctx) -> None:
    """Fault injection for the crash tests (0 in production): sleep so a test can kill the worker here."""
    pause = getattr(ctx.options, name)
    if pause > 0:
        log.warning("fault injection: sleeping %.1f s (%s)", pause, name)
        time.sleep(pause)


def _plan_steps(cfg, fc: ForecastInput | None, now: datetime, cap: float, desired: int) -> list[dict[str, Any]]:
    """Replicas the forecast needs minute by minute over the next 30 (what the API shows as the plan)."""
    if fc is None or not fc.usable():
        return [{"time": now.strftime(TS), "desired": desired, "demand_rpm": None, "reason": "no usable forecast"}]
    s = cfg.scaling
    path = fc.path(s.quantile)
    lead = int(math.ceil(s.lead_min))
    origin = fc.origin
    steps = []
    for i in range(len(path)):
        window = path[i:i + lead + 1]
        peak = max(window)
        n = min(max(replicas_for(peak, cap, s.target_utilisation), s.min_replicas), s.max_replicas)
        t = (origin + pd.Timedelta(minutes=i)).strftime(TS)
        steps.append({"time": t, "desired": n, "demand_rpm": round(float(path[i]), 2),
                      "reason": f"P{s.quantile * 100:.0f} peak {peak:,.0f} req/min within the {lead}-min lead"})
    return steps


def _finish_plan(ctx: Ctx, dep: str, journal: dict[str, Any], recovered: bool) -> dict[str, Any]:
    d = journal["decision"]
    reason = f"{d['reason']['code']}: {d['reason']['text']}"
    scaler = ctx.scaler(dep)
    if journal["apply"]:
        out = scaler.scale_to(int(d["desired"]), reason, tick=journal["tick"], remove=tuple(d.get("remove", ())))
        outcome = ("scaled " + out.detail) if out.changed else (
            "no change needed" if not recovered else "target already reached by an earlier attempt")
        actual = out.after
    else:
        outcome = journal["blocked"]
        actual = _safe_current(scaler)
    if recovered:
        outcome += " (finished after the first attempt died)"
    _fault("fault_pause_after_apply_s", ctx)
    journal = {**journal, "status": "applied", "outcome": outcome, "actual": actual, "finished_at": time.time()}
    pipe = ctx.r.pipeline(transaction=True)
    st = StateStore(pipe, ctx.prefix)
    st.put("plan-journal", dep, journal)
    st.audit(dep, "scale", f"{d['action']} {d['current']}->{d['desired']}", reason, bool(journal["apply"]),
             outcome, {**journal["inputs"], "tick": journal["tick"], "reactive_replicas": d["reactive_replicas"],
                       "forecast_replicas": d["forecast_replicas"], "raw": d["raw"]})
    ts = pd.Timestamp(journal["decided_at"], unit="s")
    st.record_fleet(dep, ts, int(d["desired"]), actual)
    st.put("plan", dep, {"created_at": ts.strftime(TS), "tick": journal["tick"],
                         "forecast_model": journal["inputs"].get("forecast_model"), "desired": int(d["desired"]),
                         "current": int(d["current"]), "action": d["action"], "reason": reason,
                         "applied": bool(journal["apply"]), "outcome": outcome, "steps": journal["plan"],
                         "warmups": _warmup_summary(ctx, dep), "switches": _switch_summary(ctx, dep)})
    pipe.execute()
    metrics.DECISIONS.labels(dep, "scale", d["reason"]["code"], str(bool(journal["apply"])).lower()).inc()
    log.info("plan", extra={"event": {"deployment": dep, "tick": journal["tick"], "action": d["action"],
                                      "current": d["current"], "desired": d["desired"], "reason": reason,
                                      "applied": journal["apply"], "outcome": outcome}})
    return {"tick": journal["tick"], "status": "applied", "desired": d["desired"], "actual": actual,
            "outcome": outcome, "recovered": recovered}


def _safe_current(scaler) -> int | None:
    try:
        return scaler.current()
    except Exception:  # noqa: BLE001 - a scaler we may not call (paused/dry-run) need not answer
        return None


def _warmup_summary(ctx: Ctx, dep: str) -> list[dict[str, Any]]:
    ps, _ = load_policy(ctx.state, dep)
    w = ps.warmup
    if w.active_until is None:
        return []
    return [{"tier": w.tier, "until": w.active_until.strftime(TS)}]


def _switch_summary(ctx: Ctx, dep: str) -> list[dict[str, Any]]:
    ps, _ = load_policy(ctx.state, dep)
    s = ps.switch
    if s.phase.value == "steady":
        return []
    return [{"phase": s.phase.value, "from": s.active_profile, "to": s.target_profile,
             "since": s.since.strftime(TS) if s.since else None}]


# --------------------------------------------------------------------------- warmup


def warmup_check(ctx: Ctx, dep: str, sig: dict[str, Any] | None = None) -> dict[str, Any]:
    """Decide warmup from queue depth (and predicted growth); start or stop warmup runs."""
    cfg, sig, _, fc, insts, now = _tick_inputs(ctx, dep, sig)
    with policy_lock(ctx, dep):
        ps, pdoc = load_policy(ctx.state, dep)
        cap = planning_capacity(cfg, ps, ps.switch.active_profile or cfg.switch.default_profile)
        wd, wstate = decide_warmup(cfg.warmup, now, insts, _num(sig.get("observed_rpm"), 0.0),
                                   _num(sig.get("queue_depth"), 0.0),
                                   None if sig.get("p99_s") is None else _num(sig.get("p99_s")), fc, ps.warmup, cap)
        from dataclasses import replace

        blocked = why_not_applied(ctx, dep)
        ctx.state.put("policy", dep, policy_doc(replace(ps, warmup=wstate), pdoc))
    result = {"action": wd.action.value, "reason": str(wd.reason), "instances": list(wd.instances)}
    metrics.DECISIONS.labels(dep, "warmup", wd.reason.code.value, str(blocked is None).lower()).inc()
    fresh = _new_targets(ctx, dep, wd)
    if wd.action == WarmupAction.STOP or fresh:
        applied = blocked is None
        outcome = blocked or ""
        if applied and wd.action != WarmupAction.STOP:
            ctx.r.delete(f"{ctx.prefix}:warmup-abort:{dep}")
            outcome = _start_warmup(ctx, dep, wd, sig, fresh)
        elif applied:
            ctx.r.set(f"{ctx.prefix}:warmup-abort:{dep}", "1", ex=600)
            outcome = "running warmups told to stop"
        ctx.state.audit(dep, "warmup", f"{wd.action.value} {wd.tier}".strip(), str(wd.reason), applied, outcome,
                        {"queue_depth": sig.get("queue_depth"), "observed_rpm": sig.get("observed_rpm"),
                         "p99_s": sig.get("p99_s"), "instances": list(fresh or wd.instances),
                         "requests_per_instance": wd.requests_per_instance, "concurrency": wd.concurrency,
                         "duration_s": wd.duration_s})
        log.info("warmup", extra={"event": {"deployment": dep, **result, "applied": applied, "outcome": outcome}})
        result.update(applied=applied, outcome=outcome)
    return result


def _new_targets(ctx: Ctx, dep: str, wd) -> list[str]:
    """Instances a START/CONTINUE asks for that this warmup episode has not sent to yet.

    An episode starts with START and ends with STOP or NONE; a change of tier inside it (a ramp
    becoming a queue tier, low becoming high) sends to every target again at the new intensity.
    """
    key = f"{ctx.prefix}:warmup-episode:{dep}"
    if wd.action not in (WarmupAction.START, WarmupAction.CONTINUE) or not wd.instances:
        ctx.r.delete(key)
        return []
    raw = ctx.r.get(key)
    ep = {} if raw is None else json.loads(raw)
    if wd.action == WarmupAction.START or ep.get("tier") != wd.tier:
        ep = {"tier": wd.tier, "sent": []}
    fresh = [i for i in wd.instances if i not in ep["sent"]]
    ep["sent"] = ep["sent"] + fresh
    ctx.r.set(key, json.dumps(ep), ex=600)
    return fresh


def _start_warmup(ctx: Ctx, dep: str, wd, sig: dict[str, Any], targets: list[str]) -> str:
    by_id = {i["id"]: i for i in sig.get("instances", [])}
    if ctx.simulate:
        hit = ctx.sim(dep).warm(list(targets), wd.requests_per_instance)
        return f"simulated warmup of {hit} instance(s), {wd.requests_per_instance} requests each"
    urls = [by_id[i]["url"] for i in targets if by_id.get(i, {}).get("url")]
    if not urls:
        return "no instance URL to warm"
    from workers.tasks import run_warmup

    run_warmup.apply_async(kwargs={"deployment": dep, "urls": urls, "requests": wd.requests_per_instance,
                                   "concurrency": wd.concurrency, "duration_s": wd.duration_s},
                           expires=max(30.0, wd.duration_s))
    ctx.r.sadd(f"{ctx.prefix}:warmed:{dep}", *urls)
    return f"warmup of {len(urls)} instance(s) sent: {wd.requests_per_instance} requests, concurrency {wd.concurrency}"


def run_warmup(ctx: Ctx, dep: str, urls: list[str], requests: int, concurrency: int, duration_s: float):
    from workers.actuation import send_live_warmup

    abort_key = f"{ctx.prefix}:warmup-abort:{dep}"
    tokens = None
    try:
        from warmup.actuators.tokens import TokenDistribution

        tokens = TokenDistribution.from_frame(ctx.store.frame(dep, start=pd.Timestamp.now() - pd.Timedelta(hours=1)))
    except Exception:  # noqa: BLE001 - no token columns stored: the client's default distribution
        tokens = None
    warming = f"{ctx.prefix}:warming:{dep}"
    ctx.r.sadd(warming, *urls)
    ctx.r.expire(warming, int(duration_s) + 120)
    try:
        res = send_live_warmup(urls, requests, concurrency, duration_s, ctx.token(dep), tokens,
                               should_abort=lambda: bool(ctx.r.exists(abort_key)))
    finally:
        ctx.r.srem(warming, *urls)
    sent = sum(r["sent"] for r in res)
    metrics.WARMUP_REQUESTS.labels(dep).inc(sent)
    ctx.state.audit(dep, "warmup-run", "finished", f"{sent} warmup requests sent to {len(urls)} instance(s)",
                    True, "; ".join(f"{r['instance']}: {r['completed']} ok, {r['failed']} failed"
                                    + (f" ({r['error']})" if r["error"] else "") for r in res))
    return res


# --------------------------------------------------------------------------- profile switch


def switch_tick(ctx: Ctx, dep: str) -> dict[str, Any]:
    """Advance the profile-switch state machine one step (schedule, context mix or a manual request)."""
    cfg = ctx.cfg(dep)
    sig = fresh_signals(ctx, dep)
    fc = forecast_input(ctx.state.get_forecast(dep))
    insts = instances_of(sig)
    now = utcnow()
    with policy_lock(ctx, dep):
        ps, pdoc = load_policy(ctx.state, dep)
        req = ctx.state.take_profile_request(dep)
        if req:
            pdoc = {**pdoc, "manual_profile": req["profile"], "manual_by": req.get("by")}
        manual = pdoc.get("manual_profile")
        if manual:
            # A manual request is an all-day window for that profile: the same safe state machine runs it.
            from dataclasses import replace
            from datetime import time as dtime

            from warmup.core import ScheduleWindow

            cfg = replace(cfg, switch=replace(cfg.switch, enabled=True, trigger="schedule",
                                              windows=(ScheduleWindow(manual, dtime(0), dtime(0)),)))
        if not cfg.switch.enabled:
            return {"action": "none", "reason": "profile switching is off (no schedule windows)"}
        dec, sstate, events = decide_switch(cfg.switch, now, insts, None if sig.get("p99_s") is None
                                            else _num(sig.get("p99_s")), fc, ps.switch, len(insts),
                                            ps.switch.active_profile or cfg.switch.default_profile)
        from dataclasses import replace as _r

        ctx.state.put("policy", dep, policy_doc(_r(ps, switch=sstate), pdoc))
    blocked = why_not_applied(ctx, dep)
    metrics.DECISIONS.labels(dep, "switch", dec.reason.code.value, str(blocked is None).lower()).inc()
    result = {"action": dec.action.value, "reason": str(dec.reason), "phase": dec.phase.value}
    if dec.action.value != "none" or events or sstate.phase != ps.switch.phase:
        applied, outcome = (False, blocked) if blocked else _apply_switch(ctx, dep, dec)
        ctx.state.audit(dep, "switch", f"{dec.action.value} {dec.from_profile}->{dec.to_profile}".strip(),
                        str(dec.reason), applied, outcome,
                        {"phase": dec.phase.value, "share": dec.share, "instances": dec.instances,
                         "p99_s": sig.get("p99_s"), "events": [str(e.reason) for e in events]})
        for e in events:
            ctx.state.audit(dep, "alert" if e.kind == "alert" else "event", e.kind, str(e.reason), False, "")
        result.update(applied=applied, outcome=outcome)
    return result


def _apply_switch(ctx: Ctx, dep: str, dec) -> tuple[bool, str]:
    """(applied, outcome) of a switch decision on the fleet."""
    a = dec.action.value
    if ctx.simulate:
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
    return _apply_live_switch(ctx, dep, dec)


def _apply_live_switch(ctx: Ctx, dep: str, dec) -> tuple[bool, str]:
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


# --------------------------------------------------------------------------- nightly jobs


def retrain(ctx: Ctx, dep: str, config=None, baselines: list | None = None) -> dict[str, Any]:
    """Train a challenger on the last 28 days, promote it only if it beats the champion and the
    baselines on the latest day (``forecaster.live.train_deployment``), and audit the outcome."""
    from forecaster.live import train_deployment
    from forecaster.registry import Registry

    frame = ctx.store.frame(dep, start=pd.Timestamp.now() - pd.Timedelta(days=28))
    rep = train_deployment(frame, Registry(ctx.settings.models_dir), dep, config=config, progress=False,
                           baselines=baselines)
    promoted = bool(rep.decision and rep.decision.promoted)
    ctx.state.audit(dep, "retrain", f"challenger {rep.version}" + (" promoted" if promoted else " kept"),
                    rep.decision.reason if rep.decision else rep.note, True, rep.summary()[:2000],
                    {"maes": rep.maes, "window": list(rep.window)})
    ctx.cache.pop(("model", dep), None)
    return {"version": rep.version, "promoted": promoted, "maes": rep.maes}


def expire(ctx: Ctx, dep: str) -> dict[str, Any]:
    """Drop load older than the retention, and the loop's own short-lived bookkeeping."""
    days = ctx.store.apply_retention(dep)
    cutoff_min = int(time.time() // 60) - 24 * 60
    dropped = 0
    for key in (f"{ctx.prefix}:counter:{dep}", f"{ctx.prefix}:sim-traffic:{dep}"):
        old = [k for k in ctx.r.hkeys(key) if int(k) < cutoff_min]
        for i in range(0, len(old), 1000):
            dropped += ctx.r.hdel(key, *old[i:i + 1000])
    return {"days_dropped": days, "fields_dropped": dropped}
