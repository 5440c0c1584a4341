"""Numbers autoscalers act on: KEDA metrics-api JSON and Prometheus gauges.

KEDA metrics-api scaler: ``GET /v1/keda/{deployment}`` returns a flat JSON
object; point ``valueLocation`` at ``desiredReplicas`` (with ``targetValue: "1"``
and ``metricType: AverageValue`` KEDA sets exactly that many replicas) or at
``forecastDemandRpm`` (with ``targetValue`` = requests/min one replica should
serve).  See docs/keda/.
"""
from __future__ import annotations

from typing import Annotated, Any, Iterator, Optional

from fastapi import APIRouter, Depends, Query, Response
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from api import service
from api.deps import ApiContext, configured_deployment, get_ctx, require_read
from api.routes import READ_ERR
from api.schemas import KedaOut
from warmcast.deployments import Deployment
from warmcast.state import forecast_from_dict

router = APIRouter(dependencies=[Depends(require_read)], tags=["autoscalers"])


@router.get("/v1/keda/{deployment}", response_model=KedaOut, responses=READ_ERR,
            summary="KEDA metrics-api scaler: desiredReplicas and forecastDemandRpm")
def keda_metrics(dep: Annotated[Deployment, Depends(configured_deployment)],
                 ctx: Annotated[ApiContext, Depends(get_ctx)],
                 quantile: float = Query(0.9, ge=0.01, le=0.99),
                 lead: Optional[int] = Query(None, ge=0, le=29, description="minutes ahead (default: cold start)"),
                 utilisation: float = Query(1.0, ge=0.01, le=1)) -> dict[str, Any]:
    if lead is None:
        lead = min(29, int(round(dep.cold_start_min)))
    return service.autoscaler_values(ctx, dep, quantile, lead, utilisation)


class ForecastCollector:
    """Reads the stored forecasts at scrape time (never computes one: scrapes stay cheap)."""

    def __init__(self, ctx: ApiContext) -> None:
        self.ctx = ctx

    def collect(self) -> Iterator[GaugeMetricFamily]:
        q = GaugeMetricFamily("warmcast_forecast_requests_per_minute",
                              "Forecast requests/min by deployment, quantile and lead (minutes after origin, 1-based)",
                              labels=["deployment", "quantile", "lead"])
        mean = GaugeMetricFamily("warmcast_forecast_mean_requests_per_minute", "Forecast mean requests/min",
                                 labels=["deployment", "lead"])
        age = GaugeMetricFamily("warmcast_forecast_age_seconds", "Seconds since the forecast was made",
                                labels=["deployment", "model"])
        desired = GaugeMetricFamily("warmcast_desired_replicas", "Replicas the planner wants now",
                                    labels=["deployment"])
        paused = GaugeMetricFamily("warmcast_paused", "1 while automatic actions are paused", labels=["deployment"])
        up = GaugeMetricFamily("warmcast_api_redis_up", "1 when Redis answered this scrape")
        try:
            names = self.ctx.known_names()
        except Exception:  # noqa: BLE001 - a scrape must answer even with Redis down
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        for dep in names:
            self._one(dep, q, mean, age, desired, paused)
        yield from (q, mean, age, desired, paused, up)

    def _one(self, dep, q, mean, age, desired, paused) -> None:
        doc = service.cached_or_stored(self.ctx, dep)
        paused.add_metric([dep], 1.0 if self.ctx.state.paused(dep) else 0.0)
        planned = service.plan_desired(self.ctx.state.get("plan", dep))
        if planned is not None:
            desired.add_metric([dep], planned)
        if not doc:
            return
        fc = forecast_from_dict(doc)
        for level, path in sorted(fc.quantiles.items()):
            for i, v in enumerate(path):
                q.add_metric([dep, f"{level:g}", str(i + 1)], float(v))
        for i, v in enumerate(fc.mean):
            mean.add_metric([dep, str(i + 1)], float(v))
        a = service.forecast_age_s(doc)
        if a is not None:
            age.add_metric([dep, str(doc.get("model", ""))], a)


def metrics_router(ctx: ApiContext) -> APIRouter:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ForecastCollector(ctx))
    r = APIRouter(dependencies=[Depends(require_read)], tags=["autoscalers"])

    @r.get("/metrics", response_class=Response, responses={200: {"content": {"text/plain": {}}}, **READ_ERR},
           summary="Prometheus metrics: forecast gauges per deployment, quantile and lead")
    def metrics() -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    return r
