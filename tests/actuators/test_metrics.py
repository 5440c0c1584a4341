"""Metric parsing and histogram quantiles, on /metrics text captured from a real vLLM 0.32 CPU server."""
from __future__ import annotations

import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from warmcast.errors import InputError
from warmup.actuators.metrics import Histogram, histogram_quantile, latency_window, merge_histograms, parse_metrics

CAPTURED = Path(__file__).parents[1] / "integration" / "data" / "vllm-0.32.0-cpu-metrics.txt"


@pytest.fixture(scope="module")
def text() -> str:
    return CAPTURED.read_text()


def test_parse_captured_real_metrics(text):
    s = parse_metrics(text, "cap", taken_at=100.0)
    assert s.instance == "cap" and s.taken_at == 100.0
    assert s.waiting == 0 and s.running == 0
    assert s.kv_cache_usage == 0.0
    # 30 load requests + 2 probes were served before the capture.
    assert s.counter("vllm:request_success_total") == 32
    assert s.counter("vllm:prompt_tokens_total") == 3258
    assert s.ttft is not None and s.ttft.count == 32
    assert s.ttft.buckets[-1] == (math.inf, 32.0)
    assert s.e2e is not None and s.e2e.count == 32
    assert s.ttft.mean == pytest.approx(14.08550238609314 / 32)


def test_ttft_quantiles_of_captured_histogram(text):
    s = parse_metrics(text)
    # By hand from the captured buckets: 0.25 -> 11, 0.5 -> 18, 0.75 -> 26, 1.0 -> 32.
    # P50: rank 16 falls in (0.25, 0.5]: 0.25 + 0.25 * (16 - 11) / 7.
    assert s.ttft.quantile(0.5) == pytest.approx(0.25 + 0.25 * 5 / 7)
    # P99: rank 31.68 in (0.75, 1.0]: 0.75 + 0.25 * (31.68 - 26) / 6.
    assert s.ttft.quantile(0.99) == pytest.approx(0.75 + 0.25 * 5.68 / 6)


def test_prom_quantile_edge_cases():
    b = [(0.1, 0.0), (0.5, 10.0), (math.inf, 10.0)]
    assert histogram_quantile(0.5, b) == pytest.approx(0.1 + 0.4 * 0.5)
    assert histogram_quantile(1.0, [(0.1, 0), (0.5, 5), (math.inf, 10)]) == 0.5  # +Inf bucket: last finite bound
    assert histogram_quantile(0.5, [(0.1, 0), (math.inf, 0)]) is None  # no observations
    assert histogram_quantile(0.5, [(0.1, 3), (0.5, 5)]) is None  # no +Inf bucket
    assert histogram_quantile(0.0, b) == 0.0  # rank 0 in an empty first bucket: its lower bound
    # Non-monotonic scrape: later bucket lags; treated as the running max like Prometheus.
    assert histogram_quantile(0.5, [(1, 4), (2, 3), (math.inf, 8)]) == pytest.approx(1.0)
    assert histogram_quantile(0.75, [(1, 4), (2, 3), (math.inf, 8)]) == pytest.approx(2.0)  # (2, 3) -> (2, 4): rank 6 in +Inf
    with pytest.raises(InputError):
        histogram_quantile(1.5, b)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 50), min_size=1, max_size=12), st.floats(0, 1))
def test_quantile_lies_in_its_bucket_and_is_monotone(increments, q):
    les = [0.01 * 2 ** i for i in range(len(increments))]
    cum, buckets = 0, []
    for le, inc in zip(les, increments):
        cum += inc
        buckets.append((le, cum))
    buckets.append((math.inf, cum))
    v = histogram_quantile(q, buckets)
    if cum == 0:
        assert v is None
        return
    assert 0 <= v <= les[-1]
    assert histogram_quantile(min(1.0, q + 0.1), buckets) >= v - 1e-12


def test_window_difference_and_counter_reset(text):
    after = parse_metrics(text, "x", taken_at=10)
    h = after.ttft
    earlier = Histogram(tuple((le, c / 2) for le, c in h.buckets), h.count / 2, h.sum / 2)
    before = type(after)(**{**after.__dict__, "ttft": earlier, "taken_at": 4})
    w = latency_window(before, after)
    assert w.seconds == 6
    assert w.ttft[0.99] == pytest.approx(h.minus(earlier).quantile(0.99))
    assert h.minus(earlier).count == h.count / 2
    # A restart (counts went down) makes the window the new process's whole histogram.
    bigger = Histogram(tuple((le, c * 3) for le, c in h.buckets), h.count * 3, h.sum * 3)
    assert h.minus(bigger) == h
    assert latency_window(None, after).ttft[0.5] == pytest.approx(h.quantile(0.5))


def test_merge_sums_buckets(text):
    h = parse_metrics(text).ttft
    m = merge_histograms([h, None, h])
    assert m.count == 2 * h.count and m.quantile(0.9) == pytest.approx(h.quantile(0.9))
    assert merge_histograms([None]) is None


def test_old_metric_names_and_errors():
    old = (
        "# TYPE vllm:gpu_cache_usage_perc gauge\nvllm:gpu_cache_usage_perc{model_name=\"m\"} 0.25\n"
        "# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{model_name=\"m\"} 3\n"
        "vllm:num_requests_waiting{model_name=\"n\"} 4\n"
    )
    s = parse_metrics(old)
    assert s.kv_cache_usage == 0.25 and s.waiting == 7 and s.ttft is None
    with pytest.raises(InputError, match="no vllm"):
        parse_metrics("# TYPE up gauge\nup 1\n", "proxy")
    with pytest.raises(InputError, match="not Prometheus"):
        parse_metrics("<html>bad gateway {{</html>", "proxy")
