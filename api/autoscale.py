"""Numbers autoscalers act on: KEDA metrics-api JSON and Prometheus gauges.

KEDA metrics-api scaler: ``GET /v1/keda/{deployment}`` returns a flat JSON
object; point ``valueLocation`` at ``desiredReplicas`` (with ``targetValue: "1"``
and ``metricType: AverageValue`` KEDA sets exactly that many replicas) or at
``forecastDemandRpm`` (with ``targetValue`` = requests/min one replica should
serve).  See docs/keda/.
"""
from __future__ import annotations

import json
from typing import Iterator

from fastapi import APIRouter, Request, Response
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from api import query, service
from api.deps import ApiContext, check_read, configured_deployment
from api.hot import Rendered
from api.ondemand import utcnow
from api.staleness import freshness
from api.routes import READ_ERR
from api.schemas import KedaOut
from forecaster.base import per_minute_rate
from warmcast.state import forecast_from_dict

KEDA_TTL_S = 5.0
LEAD_MINUTES = 30  # /metrics exports the next 30 minutes, as its HELP says
_BEARER = {"security": [{"HTTPBearer": []}]}  # hot routes check the token by hand; the schema still says so


# Parsed by hand (api/query.py): the route takes no FastAPI parameters, which were most of its cost.
_KEDA_PARAMS = [query.path("deployment"), query.doc("quantile", "number", 0.01, 0.99, 0.9),
                query.doc("lead", "integer", 0, 29, None,
                          "minutes ahead (default: the workers' planner's lead, measured launch-to-ready "
                          "first, named in leadSource)"),
                query.doc("utilisation", "number", 0.01, 1, 1.0)]


def keda_router(ctx: ApiContext) -> APIRouter:
    """``/v1/keda/{deployment}``: a hot route (see api/hot.py).

    An answer is reused for KEDA_TTL_S: its render (forecast, plan, pause state, peak search)
    costs as much CPU as hundreds of cached answers, while KEDA polls every 30 s by default
    and the workers write forecasts and plans once a minute."""
    r = APIRouter(tags=["autoscalers"])
    bodies = Rendered(ttl_s=KEDA_TTL_S, stale_s=3 * KEDA_TTL_S)

    @r.get("/v1/keda/{deployment}", response_model=KedaOut, responses={**READ_ERR, **query.INVALID},
           openapi_extra={**_BEARER, "parameters": _KEDA_PARAMS},
           summary="KEDA metrics-api scaler: desiredReplicas and forecastDemandRpm")
    async def keda_metrics(request: Request) -> Response:
        check_read(request, ctx)
        quantile = query.number(request, "quantile", 0.9, 0.01, 0.99)
        lead = query.number(request, "lead", None, 0, 29, int)
        utilisation = query.number(request, "utilisation", 1.0, 0.01, 1)
        deployment = request.path_params["deployment"]
        dep = ctx.configured(deployment) or await configured_deployment(deployment, ctx)  # 404 says why
        ahead = lead  # None: the lead the workers' planner resolves (workers.lead), not the file's

        def render() -> bytes:
            return json.dumps(service.autoscaler_values(ctx, dep, quantile, ahead, utilisation)).encode()

        body = await bodies.get((dep.name, quantile, ahead, utilisation), render)
        return Response(body, media_type="application/json")

    return r


class ForecastCollector:
    """Reads the stored forecasts at scrape time (never computes one: scrapes stay cheap)."""

    def __init__(self, ctx: ApiContext) -> None:
        self.ctx = ctx

    def collect(self) -> Iterator[GaugeMetricFamily]:
        # The label is "level", not "quantile": Prometheus reserves "quantile" for summaries
        # (quantiles of observed values, with _sum and _count); these are quantiles of a forecast.
        q = GaugeMetricFamily("warmcast_forecast_requests_per_minute",
                              "Forecast requests/min (a coarse series' bins divided by their width) by "
                              "deployment, quantile level and lead (minutes after origin, 1-based)", labels=["deployment", "level", "lead"])
        mean = GaugeMetricFamily("warmcast_forecast_mean_requests_per_minute", "Forecast mean requests/min",
                                 labels=["deployment", "lead"])
        age = GaugeMetricFamily("warmcast_forecast_age_seconds", "Seconds since the forecast was made",
                                labels=["deployment", "model"])
        desired = GaugeMetricFamily("warmcast_desired_replicas", "Replicas the planner wants now",
                                    labels=["deployment"])
        paused = GaugeMetricFamily("warmcast_paused", "1 while automatic actions are paused", labels=["deployment"])
        up = GaugeMetricFamily("warmcast_api_redis_up", "1 when Redis answered this scrape")
        corr = GaugeMetricFamily("warmcast_calibration_correction", "Observed / calibrated TTFT P99 at the observed "
                                 "load per instance (smoothed; 1 = as calibrated)", labels=["deployment", "profile"])
        drift = GaugeMetricFamily("warmcast_calibration_drift", "1 while the correction is more than 15% off 1: "
                                  "recalibrate", labels=["deployment", "profile"])
        stale = GaugeMetricFamily("warmcast_plan_stale", "1 while the workers' plan or forecast is older than "
                                  "WARMCAST_API_PLAN_MAX_AGE_S: its plan and forecast gauges are then left out",
                                  labels=["deployment"])
        plan_age = GaugeMetricFamily("warmcast_plan_age_seconds", "Seconds since the workers stored the plan",
                                     labels=["deployment"])
        try:
            names = self.ctx.known_names()
        except Exception:  # noqa: BLE001 - a scrape must answer even with Redis down
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        for dep in names:
            self._one(dep, q, mean, age, desired, paused, stale, plan_age)
            d = self.ctx.state.get("calibration-drift", dep)  # written by the workers' signals step
            if d and d.get("factor") is not None:
                corr.add_metric([dep, d["profile"]], float(d["factor"]))
                drift.add_metric([dep, d["profile"]], 1.0 if d.get("drifted") else 0.0)
        yield from (q, mean, age, desired, paused, stale, plan_age, up, corr, drift)

    def _one(self, dep, q, mean, age, desired, paused, stale, plan_age) -> None:
        doc = service.cached_or_stored(self.ctx, dep)
        paused.add_metric([dep], 1.0 if self.ctx.state.paused(dep) else 0.0)
        # a deployment no longer configured keeps no plan gauges: nothing plans for it any more
        plan = self.ctx.state.get("plan", dep) if self.ctx.configured(dep) is not None else None
        fresh = freshness(doc, plan, self.ctx.config.plan_max_age_s, utcnow())
        if fresh.plan_age_s is not None:
            plan_age.add_metric([dep], fresh.plan_age_s)
        if doc and fresh.forecast_age_s is not None:
            age.add_metric([dep, str(doc.get("model", ""))], fresh.forecast_age_s)
        is_stale = fresh.stale(dep) is not None
        if plan is not None or doc:
            stale.add_metric([dep], 1.0 if is_stale else 0.0)
        if is_stale:
            return  # an autoscaler reading these would act on a stopped loop's numbers
        planned = service.plan_desired(plan)
        if planned is not None:
            desired.add_metric([dep], planned)
        if not doc:
            return
        # per minute whatever the series' bins (issue 32: a 10-minute series exported its per-bin values
        # under this per-minute name, and an HPA reading them over-scaled tenfold); leads in minutes
        fc = per_minute_rate(forecast_from_dict(doc))
        for level, path in sorted(fc.quantiles.items()):
            for i, v in enumerate(path[:LEAD_MINUTES]):
                q.add_metric([dep, f"{level:g}", str(i + 1)], float(v))
        for i, v in enumerate(fc.mean[:LEAD_MINUTES]):
            mean.add_metric([dep, str(i + 1)], float(v))


def metrics_router(ctx: ApiContext) -> APIRouter:
    """``/metrics``: a hot route (see api/hot.py); the exposition is rendered at most once a second."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ForecastCollector(ctx))
    r = APIRouter(tags=["autoscalers"])
    bodies = Rendered()

    @r.get("/metrics", response_class=Response, responses={200: {"content": {"text/plain": {}}}, **READ_ERR},
           openapi_extra=_BEARER, summary="Prometheus metrics: forecast gauges per deployment, level and lead")
    async def metrics(request: Request) -> Response:
        check_read(request, ctx)
        body = await bodies.get("metrics", lambda: generate_latest(registry))
        return Response(body, media_type=CONTENT_TYPE_LATEST)

    return r
