"""The example manifests parse and point at fields and metrics the API really serves."""
from __future__ import annotations

from pathlib import Path

import yaml

from api.schemas import KedaOut

DOCS = Path(__file__).resolve().parents[2] / "docs" / "keda"


def _docs(name: str) -> list[dict]:
    return [d for d in yaml.safe_load_all((DOCS / name).read_text()) if d]


def test_metrics_api_scaledobject_reads_served_fields():
    so = [d for d in _docs("scaledobject-metrics-api.yaml") if d["kind"] == "ScaledObject"][0]
    trig = so["spec"]["triggers"][0]
    assert trig["type"] == "metrics-api" and trig["metadata"]["valueLocation"] in KedaOut.model_fields
    assert "/v1/keda/" in trig["metadata"]["url"]


def test_external_scaler_metadata_is_what_the_scaler_reads():
    from api.keda.scaler import METRICS

    so = [d for d in _docs("scaledobject-external.yaml") if d["kind"] == "ScaledObject"][0]
    meta = so["spec"]["triggers"][0]["metadata"]
    assert so["spec"]["triggers"][0]["type"] == "external" and meta["metric"] in METRICS


def test_prometheus_manifests_use_exported_metric_names(client, seeded):
    text = (DOCS / "hpa-prometheus-adapter.yaml").read_text()
    kinds = {d["kind"] for d in _docs("hpa-prometheus-adapter.yaml")}
    assert {"ServiceMonitor", "HorizontalPodAutoscaler", "ScaledObject"} <= kinds
    exported = client.get("/metrics").text
    assert 'warmcast_forecast_requests_per_minute{deployment="demo",lead="15",level="0.9"}' in exported
    assert "warmcast_forecast_requests_per_minute" in text


def test_both_scaledobjects_fall_back_when_warmcast_answers_errors():
    """Issue 32 item 3: a stale plan is answered as an error; KEDA's ``fallback`` is what then runs."""
    for name in ("scaledobject-metrics-api.yaml", "scaledobject-external.yaml"):
        so = [d for d in _docs(name) if d["kind"] == "ScaledObject"][0]["spec"]
        fb = so.get("fallback") or {}
        assert fb.get("failureThreshold", 0) >= 1, name
        assert so["minReplicaCount"] <= fb.get("replicas", -1) <= so["maxReplicaCount"], name
        assert so["triggers"][0]["metricType"] == "AverageValue", name  # KEDA's fallback needs it
