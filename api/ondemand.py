"""On-demand forecasts: computed from the load store when the workers have stored none.

A fit costs seconds of CPU, so each (deployment, horizon, levels) is computed by one
thread at a time and concurrent requests wait for that one result (single flight).
A result is reused for ``cache_ttl_s``; for another ``cache_ttl_s`` after that it is
still served while one background refresh runs, so pollers never queue behind a refit.
A request waits at most ``deadline_s`` (then 503 with Retry-After); the computation
goes on in its own daemon thread and the next request picks its result up.
"""
from __future__ import annotations

import asyncio
import json
import threading
import time
from concurrent.futures import Future, TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import Any, Sequence

import pandas as pd

from api.deps import ApiContext
from api.errors import DeadlineExceeded
from warmcast.forecast import Forecast
from warmcast.errors import NotFoundError
from warmcast.resolution import bin_label, resolution_of, steps_for
from warmcast.state import forecast_from_dict, forecast_to_dict

TS = "%Y-%m-%d %H:%M:%S"


@dataclass(frozen=True)
class Computed:
    """One computed forecast: the stored-form document, the route's answer and its JSON body."""

    at: float                 # time.monotonic() when computed
    doc: dict[str, Any]       # forecast_to_dict form, source "computed"
    shaped: dict[str, Any]    # the forecast route's answer
    body: bytes               # shaped, rendered once


def utcnow() -> pd.Timestamp:
    """Now in UTC, naive, to the second: how stored documents stamp times."""
    return pd.Timestamp.now(tz="UTC").tz_localize(None).floor("s")


def shape(doc: dict[str, Any], dep: str, horizon: int, quantiles: Sequence[float]) -> dict[str, Any]:
    """A forecast document cut to ``horizon`` minutes and the requested levels (the route's answer)."""
    fc = forecast_from_dict(doc)
    h = min(steps_for(horizon, fc.step_min), fc.horizon)  # horizon in minutes; leads in the series' bins
    levels = {f"{q:g}": [round(float(v), 4) for v in fc.quantile(q)[:h]] for q in quantiles}
    return {
        "deployment": dep, "source": doc.get("source", "stored"), "origin": doc["origin"],
        "created_at": doc.get("created_at"), "model": doc["model"], "version": str(doc.get("version", "0")),
        "trained_at": doc.get("trained_at"), "note": doc.get("note", ""), "horizon": h,
        "times": [t.strftime(TS) for t in fc.index[:h]],
        "mean": [round(float(v), 4) for v in fc.mean[:h]], "quantiles": levels,
        "resolution_min": fc.step_min, "unit": bin_label(fc.step_min),
    }


def _key(dep: str, horizon: int, levels: Sequence[float]) -> tuple:
    return ("computed", dep, horizon, tuple(levels))


def cached(ctx: ApiContext, dep: str, horizon: int, levels: Sequence[float]) -> Computed | None:
    """A computed forecast without waiting: a fresh one, or a stale one with its refresh started."""
    hit: Computed | None = ctx.cache.get(_key(dep, horizon, levels))
    if hit is None:
        return None
    age, ttl = time.monotonic() - hit.at, ctx.config.cache_ttl_s
    if age >= 2 * ttl:
        return None
    if age >= ttl:
        start(ctx, dep, horizon, levels)
    return hit


def start(ctx: ApiContext, dep: str, horizon: int, levels: Sequence[float]) -> "Future[Computed]":
    """The computation in flight for this request, started now if none is."""
    key = _key(dep, horizon, levels)
    with ctx.flight_lock:
        fut = ctx.inflight.get(key)
        if fut is None:
            fut = ctx.inflight[key] = Future()
            # A daemon thread, not a pool: a fit in progress must not hold up the process exit.
            threading.Thread(target=_run, args=(ctx, key, fut, dep, horizon, tuple(levels)), daemon=True,
                             name=f"forecast-{dep}").start()
    return fut


def _run(ctx: ApiContext, key: tuple, fut: "Future[Computed]", dep: str, horizon: int,
         levels: tuple[float, ...]) -> None:
    try:
        res = _compute(ctx, dep, horizon, levels, ctx.cache.get(key))
        _prune(ctx)
        ctx.cache[key] = res
        ctx.cache[("latest", dep)] = res.doc
        fut.set_result(res)
    except BaseException as err:  # noqa: BLE001 - every waiter gets the error (404 for no load, ...)
        fut.set_exception(err)
    finally:
        with ctx.flight_lock:
            ctx.inflight.pop(key, None)


def wait(ctx: ApiContext, fut: "Future[Computed]") -> Computed:
    """Block until the computation ends or the request deadline passes."""
    try:
        return fut.result(timeout=ctx.config.deadline_s)
    except FutureTimeout:
        raise DeadlineExceeded(_late(ctx)) from None


async def wait_async(ctx: ApiContext, fut: "Future[Computed]") -> Computed:
    """``wait`` for the event loop; the computation is shielded from the request's cancellation."""
    try:
        return await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(fut)), ctx.config.deadline_s)
    except asyncio.TimeoutError:
        raise DeadlineExceeded(_late(ctx)) from None


def _late(ctx: ApiContext) -> str:
    return (f"the forecast is still being computed after {ctx.config.deadline_s:g} s; "
            "retry shortly (the computation goes on and its result will be served)")


def computed(ctx: ApiContext, dep: str, horizon: int, levels: Sequence[float]) -> Computed:
    """A computed forecast, from the cache or from the (shared) computation."""
    return cached(ctx, dep, horizon, levels) or wait(ctx, start(ctx, dep, horizon, levels))


def forget(ctx: ApiContext, dep: str) -> None:
    """Drop the computed forecasts of ``dep`` (new observations make them out of date)."""
    for k in [k for k in list(ctx.cache) if isinstance(k, tuple) and len(k) > 1 and k[:2] == ("computed", dep)]:
        ctx.cache.pop(k, None)
    ctx.cache.pop(("latest", dep), None)


def _prune(ctx: ApiContext) -> None:
    """Keep the cache bounded: past 256 entries, drop computed forecasts too old to serve."""
    if len(ctx.cache) <= 256:
        return
    limit = time.monotonic() - 2 * ctx.config.cache_ttl_s
    for k, v in list(ctx.cache.items()):
        if isinstance(v, Computed) and v.at < limit:
            ctx.cache.pop(k, None)


# --------------------------------------------------------------------------- the computation

def _compute(ctx: ApiContext, dep: str, horizon: int, levels: tuple[float, ...],
             prev: Computed | None = None) -> Computed:
    """Forecast now from the load store: the champion through the forecaster's fallback rules.

    When no newer minute was stored since ``prev`` was computed, ``prev`` is still the answer: a
    refresh then reads one day, and fits nothing.  It is stamped now, as a computation now would be
    (it would give the same numbers, forecaster.live.forecast_deployment): a process that computed it
    an hour ago and one that computed it a second ago serve it as equally fresh (issue 46: the first
    kept its old stamp and KEDA's HTTP route refused it as stale while the gRPC scaler served it)."""
    if prev is not None and _origin(_history(ctx, dep, days=1)) == prev.doc["origin"]:
        doc = {**prev.doc, "created_at": utcnow().strftime(TS)}
        shaped = {**prev.shaped, "created_at": doc["created_at"]}
        return Computed(time.monotonic(), doc, shaped, json.dumps(shaped, separators=(",", ":")).encode())
    frame = _history(ctx, dep)
    if frame.empty:
        raise NotFoundError(f"deployment {dep!r} has no recent load to forecast from")
    from forecaster.live import forecast_deployment

    with ctx.lock:  # one fit at a time: two would only share the same two cores
        fb, note = _fitted_model(ctx, dep, frame)
        fc = forecast_deployment(frame, None, dep, horizon, levels, fitted=fb)  # the CLI's and the workers' own
        ctx.computations += 1
    if note and not fc.note:
        fc = Forecast(fc.origin, fc.mean, fc.quantiles, fc.model, fc.version, note=note, step_min=fc.step_min)
    doc = forecast_to_dict(fc, utcnow(), _trained_at(ctx, fc.version))
    doc["source"] = "computed"
    shaped = shape(doc, dep, horizon, levels)
    return Computed(time.monotonic(), doc, shaped, json.dumps(shaped, separators=(",", ":")).encode())


def _history(ctx: ApiContext, dep: str, days: int | None = None) -> pd.DataFrame:
    """The window every serving forecast reads (forecaster.live.serving_history: the CLI's and the
    workers' too); with ``days``, only the last ``days`` stored days (enough to find the origin)."""
    from forecaster.live import serving_history

    stored = ctx.store.days(dep)
    if not stored:
        raise NotFoundError(f"deployment {dep!r} has no stored load yet and no stored forecast; "
                            "push observations or ingest a log first")
    if days is None:   # the server's rolling copy: re-read from Redis only where a day changed (issue 44)
        from warmcast.history import HistoryCache

        cache = ctx.cache.get("history") or ctx.cache.setdefault("history", HistoryCache(ctx.store))
        return serving_history(ctx.store, dep, ctx.settings.forecast_history_days, cache=cache)
    return ctx.store.frame(dep, start=pd.Timestamp(0) + pd.Timedelta(days=stored[-1] - days + 1))


def _origin(frame: pd.DataFrame) -> str | None:
    """The minute a forecast from ``frame`` starts at."""
    step = pd.Timedelta(minutes=resolution_of(frame))  # after the last stored bin (ended: ingest keeps no other)
    return (frame.index[-1] + step).strftime(TS) if len(frame) else None


def _trained_at(ctx: ApiContext, version: str) -> str | None:
    """When the serving model was saved (registry metadata), if it is a registry model."""
    if "/" not in version:
        return None
    from forecaster.registry import ArtifactError, Registry

    from forecaster.global_lstm.artifacts import FLEET, fleet_registry

    owner, ver = version.split("/", 1)
    try:
        reg = Registry(ctx.settings.models_dir)
        return (fleet_registry(reg) if owner == FLEET else reg).read_meta(owner, ver).get("created")
    except (ArtifactError, OSError):
        return None


def _fitted_model(ctx: ApiContext, dep: str, frame: pd.DataFrame):
    """The resolved model (forecaster.resolver, as the CLI and the workers) wrapped in the
    fallback rules, fitted once per (deployment, newest minute); the note says why it was chosen.

    Fitting the fallback baselines costs seconds; asking the fitted model for other
    quantiles or horizons costs milliseconds, so the fitted object is what is cached."""
    from forecaster.registry import Registry
    from forecaster.resolver import resolve_forecaster

    key = ("model", dep, str(frame.index[-1]))
    hit = ctx.cache.get(key)
    if hit and time.monotonic() - hit[0] < ctx.config.cache_ttl_s:
        return hit[1]
    for k in [k for k in list(ctx.cache) if isinstance(k, tuple) and k[:2] == ("model", dep)]:
        ctx.cache.pop(k, None)  # one fitted model per deployment is enough
    from forecaster.live import serving_clients
    from forecaster.verdicts import SharedVerdicts

    clients = serving_clients(ctx.store, dep, ctx.settings.forecast_history_days)
    fb, resolution = resolve_forecaster(Registry(ctx.settings.models_dir), dep, frame, clients=clients,
                                        shared=SharedVerdicts(ctx.store.r, ctx.settings.key_prefix))
    ctx.cache[key] = (time.monotonic(), (fb, resolution.why))
    return fb, resolution.why
