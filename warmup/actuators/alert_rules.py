"""Prometheus alert rules generated from each deployment's SLO (``slo:`` in the deployments file).

Rules read vLLM's own metrics (TTFT histogram, queue time, KV-cache usage, waiting requests,
finished requests by reason) and warmcast's (forecast error from the workers, planned vs
ready replicas).  Every rule carries ``deployment`` and ``tier`` (primary | medium | severe)
labels: Alertmanager routes on them and warmcast's receiver (``POST /v1/alerts``) picks the
response tier from them.  The method behind the tiers: *primary* -- a signal past its
threshold for a while (diagnose, adjust lightly); *medium* -- users affected (standby
instance, roll back); *severe* -- the service is unavailable (fail over, redeploy).

vLLM metric names are those of vLLM 0.32 (checked against a running CPU server):
``vllm:time_to_first_token_seconds``, ``vllm:e2e_request_latency_seconds``, ``vllm:request_queue_time_seconds``,
``vllm:kv_cache_usage_perc`` (a fraction 0..1), ``vllm:num_requests_waiting``,
``vllm:num_requests_running``, ``vllm:request_success_total{finished_reason}``.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from warmcast.config.deployments import Deployment
from warmcast.errors import InputError

DURATION_RE = re.compile(r"\A([0-9]+(ms|s|m|h|d))+\Z")
KV_FULL = 0.9          # the method's "GPU memory > 90%": vLLM's KV cache holds what grows with load
MEDIUM_TTFT_FACTOR = 2.0   # TTFT P99 this many times the bound: users wait visibly
FORECAST_ERR_SHARE = 0.5   # forecast MAE above half an instance's capacity: plans are off by an instance


@dataclass(frozen=True)
class RuleTiming:
    """How long a condition must hold per tier (Prometheus ``for:``), the rate window and the
    group's evaluation interval.  Defaults follow the method (5 minutes for the primary tier)."""

    interval: str = "30s"
    window: str = "5m"
    primary_for: str = "5m"
    medium_for: str = "10m"
    severe_for: str = "2m"
    slow_for: str = "30m"   # forecast error and plan vs actual: slow signals

    def __post_init__(self) -> None:
        for name, value in vars(self).items():
            if not DURATION_RE.fullmatch(value):
                raise InputError(f"{name}: {value!r} is not a Prometheus duration (e.g. 30s, 5m, 1h)")


def unscoped(deps: list[Deployment]) -> list[str]:
    """A warning per deployment whose rules would match every vLLM Prometheus scrapes (no
    ``signals.selector``): with more than one deployment their alerts fire on each other's load (issue 32)."""
    return [f"deployment {d.name}: signals.selector is empty, so its rules match every vLLM series in "
            "Prometheus (e.g. sum(vllm:num_requests_waiting{}) over all models); set signals.selector, e.g. "
            "'model_name=\"...\"' or 'namespace=\"...\"', to scope them" for d in deps if not d.signals.selector.strip()]


def _sel(dep: Deployment, *extra: str) -> str:
    parts = [p for p in (dep.signals.selector.strip(), *extra) if p]
    return "{" + ",".join(parts) + "}"


def _rule(dep: Deployment, name: str, expr: str, hold: str, tier: str, summary: str, adjust: str = "") -> dict:
    labels = {"deployment": dep.name, "tier": tier, "source": "warmcast"}
    if adjust:
        labels["adjust"] = adjust  # which way the primary tier moves max-num-seqs
    return {"alert": name, "expr": expr, "for": hold, "labels": labels,
            "annotations": {"summary": summary, "slo": dep.slo.describe(),
                            "description": f"{dep.name}: {summary} (value {{{{ $value | printf \"%.4g\" }}}})"}}


def _latency_rules(dep: Deployment, t: RuleTiming) -> list[dict]:
    slo, out = dep.slo, []
    if slo.ttft_p99_ms is not None:
        p99 = (f"histogram_quantile(0.99, sum by (le) (rate(vllm:time_to_first_token_seconds_bucket"
               f"{_sel(dep)}[{t.window}]))) * 1000")
        out.append(_rule(dep, "WarmcastTTFTHigh", f"{p99} > {slo.ttft_p99_ms:g}", t.primary_for, "primary",
                         f"TTFT P99 above {slo.ttft_p99_ms:g} ms", adjust="up"))
        out.append(_rule(dep, "WarmcastTTFTUsersAffected", f"{p99} > {slo.ttft_p99_ms * MEDIUM_TTFT_FACTOR:g}",
                         t.medium_for, "medium", f"TTFT P99 above {MEDIUM_TTFT_FACTOR:g}x the {slo.ttft_p99_ms:g} ms "
                         "bound", adjust="up"))
    if slo.e2e_p99_ms is not None:
        e2e = (f"histogram_quantile(0.99, sum by (le) (rate(vllm:e2e_request_latency_seconds_bucket"
               f"{_sel(dep)}[{t.window}]))) * 1000")
        out.append(_rule(dep, "WarmcastE2EHigh", f"{e2e} > {slo.e2e_p99_ms:g}", t.primary_for, "primary",
                         f"end-to-end P99 above {slo.e2e_p99_ms:g} ms", adjust="up"))
    # Late share: requests queued longer than late_wait_s, from the queue-time histogram.
    late = (f"histogram_quantile({1 - slo.late_share:.6g}, sum by (le) (rate(vllm:request_queue_time_seconds_bucket"
            f"{_sel(dep)}[{t.window}])))")
    out.append(_rule(dep, "WarmcastLateShare", f"{late} > {slo.late_wait_s:g}", t.medium_for, "medium",
                     f"more than {slo.late_share * 100:g}% of requests wait over {slo.late_wait_s:g} s", adjust="up"))
    out.append(_rule(dep, "WarmcastQueueBuilding", f"sum(vllm:num_requests_waiting{_sel(dep)}) > 0 and "
                     f"sum(vllm:num_requests_waiting{_sel(dep)}) >= sum(vllm:num_requests_running{_sel(dep)})",
                     t.primary_for, "primary", "requests queue as fast as they run", adjust="up"))
    return out


def _error_rules(dep: Deployment, t: RuleTiming) -> list[dict]:
    slo = dep.slo
    total = f"sum(rate(vllm:request_success_total{_sel(dep)}[{t.window}]))"
    bad = _sel(dep, 'finished_reason="error"')  # not "abort": a client that hangs up is no server error
    failed = f"sum(rate(vllm:request_success_total{bad}[{t.window}]))"
    return [
        _rule(dep, "WarmcastErrorRate", f"{failed} / {total} > {slo.error_share:g}", t.primary_for, "primary",
              f"more than {slo.error_share * 100:g}% of requests end in an error"),
        _rule(dep, "WarmcastKVCacheFull", f"max(vllm:kv_cache_usage_perc{_sel(dep)}) > {KV_FULL:g}", t.primary_for,
              "primary", f"KV cache above {KV_FULL:.0%} full", adjust="down"),
    ]


def _severe_rules(dep: Deployment, t: RuleTiming) -> list[dict]:
    s = _sel(dep)
    return [
        _rule(dep, "WarmcastNoInstance", f"absent(vllm:num_requests_running{s})", t.severe_for, "severe",
              "no instance exports metrics: the service is unavailable"),
        _rule(dep, "WarmcastStalled", f"sum(vllm:num_requests_waiting{s}) > 0 and "
              f"sum(rate(vllm:request_success_total{s}[{t.window}])) == 0", t.severe_for, "severe",
              "requests wait and none finish: the service is unavailable"),
    ]


def _warmcast_rules(dep: Deployment, t: RuleTiming) -> list[dict]:
    d = f'deployment="{dep.name}"'
    mae_bound = FORECAST_ERR_SHARE * dep.capacity_rpm
    return [
        _rule(dep, "WarmcastForecastError", f"max(warmcast_forecast_mae{{{d}}}) > {mae_bound:g}", t.slow_for,
              "primary", f"forecast MAE above {mae_bound:g} req/min (half an instance)"),
        _rule(dep, "WarmcastPlanNotMet", f"max by (deployment) (warmcast_desired_replicas{{{d}}}) > on(deployment) "
              f"max by (deployment) (warmcast_signal{{{d},signal=\"ready\"}})", t.slow_for, "primary",
              "fewer instances ready than the plan wants"),
    ]


def rule_groups(deployments: list[Deployment], timing: RuleTiming = RuleTiming()) -> dict[str, Any]:
    """The rules file's document: one group per deployment."""
    groups = []
    for dep in deployments:
        rules = _latency_rules(dep, timing) + _error_rules(dep, timing) + _severe_rules(dep, timing) + \
            _warmcast_rules(dep, timing)
        groups.append({"name": f"warmcast-{dep.name}", "interval": timing.interval, "rules": rules})
    return {"groups": groups}


def prometheus_rule(doc: dict[str, Any], name: str = "warmcast-alerts", namespace: str | None = None) -> dict:
    """The same groups as a prometheus-operator ``PrometheusRule`` manifest."""
    meta: dict[str, Any] = {"name": name, "labels": {"app.kubernetes.io/name": "warmcast", "role": "alert-rules"}}
    if namespace:
        meta["namespace"] = namespace
    return {"apiVersion": "monitoring.coreos.com/v1", "kind": "PrometheusRule", "metadata": meta, "spec": doc}
