"""vLLM's Prometheus ``/metrics`` text turned into the signals warmcast acts on.

Pure functions, no I/O: :func:`parse_metrics` reads the exposition text with
``prometheus_client.parser.text_string_to_metric_families`` and sums every series
of a metric across its labels (one instance may expose several engines or model
names).  Latency histograms are cumulative since the server started; the latency
*over a window* is the difference of two snapshots (:meth:`Histogram.minus`),
and a quantile of it is computed like PromQL's ``histogram_quantile``: find the
bucket holding the rank, interpolate linearly inside it, and answer the upper
bound of the last finite bucket when the rank falls into ``+Inf``.

Metric names differ between vLLM versions; each signal lists the names it
accepts, first match wins (e.g. KV-cache usage is ``vllm:kv_cache_usage_perc``
in V1 and ``vllm:gpu_cache_usage_perc`` before; both are fractions 0..1 despite
the name).
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Iterable, Mapping

from prometheus_client.parser import text_string_to_metric_families

from warmcast.errors import InputError

WAITING = ("vllm:num_requests_waiting",)
RUNNING = ("vllm:num_requests_running",)
KV_USAGE = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
TTFT = ("vllm:time_to_first_token_seconds",)
E2E = ("vllm:e2e_request_latency_seconds",)
QUEUE_TIME = ("vllm:request_queue_time_seconds",)
SUCCESS = ("vllm:request_success_total",)
PROMPT_TOKENS = ("vllm:request_prompt_tokens",)  # prompt length per request: the live context mix
DEFAULT_QUANTILES: tuple[float, ...] = (0.5, 0.95, 0.99)


@dataclass(frozen=True)
class Histogram:
    """A cumulative Prometheus histogram: ``buckets`` are (upper bound, cumulative count), sorted, last is +Inf."""

    buckets: tuple[tuple[float, float], ...]
    count: float
    sum: float

    def minus(self, earlier: "Histogram | None") -> "Histogram":
        """Observations made between ``earlier`` and this snapshot.

        A counter reset (server restarted: some bucket went down) means the
        earlier snapshot belongs to another process, so the whole of this one is
        the window, as PromQL's ``rate`` treats resets.
        """
        if earlier is None:
            return self
        before = dict(earlier.buckets)
        if any(c < before.get(le, 0.0) for le, c in self.buckets) or self.count < earlier.count:
            return self
        return Histogram(
            buckets=tuple((le, c - before.get(le, 0.0)) for le, c in self.buckets),
            count=self.count - earlier.count,
            sum=self.sum - earlier.sum,
        )

    def quantile(self, q: float) -> float | None:
        """PromQL ``histogram_quantile(q, ...)``; None when there are no observations."""
        return histogram_quantile(q, self.buckets)

    def quantiles(self, qs: Iterable[float] = DEFAULT_QUANTILES) -> dict[float, float | None]:
        return {q: self.quantile(q) for q in qs}

    @property
    def mean(self) -> float | None:
        return self.sum / self.count if self.count > 0 else None


def histogram_quantile(q: float, buckets: Iterable[tuple[float, float]]) -> float | None:
    """Quantile of cumulative ``(le, count)`` buckets, the way Prometheus computes it.

    Mirrors ``bucketQuantile`` in Prometheus' ``promql/quantile.go``: buckets are
    sorted by upper bound, made monotonic, the rank ``q * total`` is located and
    interpolated linearly between the bucket's lower and upper bound (lower
    bound 0 for the first bucket).  Returns None where PromQL would give NaN (no
    observations, no +Inf bucket, fewer than two buckets).
    """
    if not 0.0 <= q <= 1.0:
        raise InputError(f"quantile must be within [0, 1], got {q}")
    bs = sorted((float(le), float(c)) for le, c in buckets)
    if len(bs) < 2 or not math.isinf(bs[-1][0]):
        return None
    # Make counts monotonic: scrapes are not atomic, a later bucket may lag.
    fixed: list[tuple[float, float]] = []
    running_max = 0.0
    for le, c in bs:
        running_max = max(running_max, c)
        fixed.append((le, running_max))
    total = fixed[-1][1]
    if total <= 0:
        return None
    rank = q * total
    b = next(i for i, (_, c) in enumerate(fixed) if c >= rank)
    if b == len(fixed) - 1:
        return fixed[-2][0]
    if b == 0 and fixed[0][0] <= 0:
        return fixed[0][0]
    start, end, count = 0.0, fixed[b][0], fixed[b][1]
    if b > 0:
        start = fixed[b - 1][0]
        count -= fixed[b - 1][1]
        rank -= fixed[b - 1][1]
    if count <= 0:  # only possible when rank == 0 and the bucket is empty
        return start
    return start + (end - start) * (rank / count)


@dataclass(frozen=True)
class MetricsSnapshot:
    """What one scrape of one instance says; latency histograms are cumulative."""

    instance: str
    taken_at: float
    waiting: float
    running: float
    kv_cache_usage: float | None
    ttft: Histogram | None
    e2e: Histogram | None
    queue_time: Histogram | None = None
    # Every counter (``*_total`` sample) summed across labels, e.g.
    # "vllm:request_success_total", "vllm:prompt_tokens_total".
    counters: Mapping[str, float] = field(default_factory=dict)
    prompt_tokens: Histogram | None = None

    def counter(self, name: str) -> float:
        return float(self.counters.get(name, 0.0))


@dataclass(frozen=True)
class LatencyWindow:
    """P50/P95/P99 (or any levels) of TTFT and end-to-end latency over a window, in seconds."""

    instance: str
    seconds: float
    requests: float
    ttft: dict[float, float | None]
    e2e: dict[float, float | None]

    def ttft_p(self, q: float) -> float | None:
        return self.ttft.get(q)

    def e2e_p(self, q: float) -> float | None:
        return self.e2e.get(q)


def _sum_histogram(samples: list[tuple[str, dict[str, str], float]], base: str) -> Histogram | None:
    by_le: dict[float, float] = {}
    count = total = 0.0
    seen = False
    for name, labels, value in samples:
        if name == base + "_bucket":
            le = float(labels["le"])
            by_le[le] = by_le.get(le, 0.0) + value
            seen = True
        elif name == base + "_count":
            count += value
        elif name == base + "_sum":
            total += value
    if not seen:
        return None
    return Histogram(buckets=tuple(sorted(by_le.items())), count=count, sum=total)


def parse_metrics(text: str, instance: str = "", taken_at: float | None = None) -> MetricsSnapshot:
    """Parse vLLM's ``/metrics`` exposition text into a :class:`MetricsSnapshot`.

    Raises :class:`InputError` when the text is not Prometheus exposition format
    or carries no vLLM metric at all (e.g. a proxy answered instead of vLLM).
    """
    try:
        families = list(text_string_to_metric_families(text))
    except (ValueError, TypeError) as err:
        raise InputError(f"instance {instance or '?'}: /metrics is not Prometheus text format: {err}") from None
    gauges: dict[str, float] = {}
    counters: dict[str, float] = {}
    by_family: dict[str, list[tuple[str, dict[str, str], float]]] = {}
    for fam in families:
        for s in fam.samples:
            by_family.setdefault(fam.name, []).append((s.name, dict(s.labels), float(s.value)))
            if fam.type == "gauge":
                gauges[s.name] = gauges.get(s.name, 0.0) + float(s.value)
            elif fam.type == "counter" and s.name.endswith("_total"):
                counters[s.name] = counters.get(s.name, 0.0) + float(s.value)
    if not any(name.startswith("vllm:") for name in by_family):
        raise InputError(f"instance {instance or '?'}: /metrics has no vllm:* metric; is this a vLLM server?")

    def first_gauge(names: tuple[str, ...]) -> float | None:
        for n in names:
            if n in gauges:
                return gauges[n]
        return None

    def first_hist(names: tuple[str, ...]) -> Histogram | None:
        for n in names:
            if n in by_family:
                h = _sum_histogram(by_family[n], n)
                if h is not None:
                    return h
        return None

    return MetricsSnapshot(
        instance=instance,
        taken_at=time.time() if taken_at is None else taken_at,
        waiting=first_gauge(WAITING) or 0.0,
        running=first_gauge(RUNNING) or 0.0,
        kv_cache_usage=first_gauge(KV_USAGE),
        ttft=first_hist(TTFT),
        e2e=first_hist(E2E),
        queue_time=first_hist(QUEUE_TIME),
        counters=counters,
        prompt_tokens=first_hist(PROMPT_TOKENS),
    )


def latency_window(
    before: MetricsSnapshot | None, after: MetricsSnapshot, qs: Iterable[float] = DEFAULT_QUANTILES
) -> LatencyWindow:
    """Latency quantiles of the requests finished between two snapshots of one instance.

    ``before=None`` means "since the server started" (the cumulative histogram).
    """
    qs = tuple(qs)
    ttft = after.ttft.minus(before.ttft if before else None) if after.ttft else None
    e2e = after.e2e.minus(before.e2e if before else None) if after.e2e else None
    return LatencyWindow(
        instance=after.instance,
        seconds=after.taken_at - before.taken_at if before else float("nan"),
        requests=e2e.count if e2e else 0.0,
        ttft=ttft.quantiles(qs) if ttft else {q: None for q in qs},
        e2e=e2e.quantiles(qs) if e2e else {q: None for q in qs},
    )


def merge_histograms(hs: Iterable[Histogram | None]) -> Histogram | None:
    """Sum histograms of several instances (same buckets), like ``sum by (le)``."""
    by_le: dict[float, float] = {}
    count = total = 0.0
    any_h = False
    for h in hs:
        if h is None:
            continue
        any_h = True
        for le, c in h.buckets:
            by_le[le] = by_le.get(le, 0.0) + c
        count += h.count
        total += h.sum
    return Histogram(tuple(sorted(by_le.items())), count, total) if any_h else None
