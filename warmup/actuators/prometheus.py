"""The same signals as the per-instance scrape, read with PromQL from a Prometheus server.

This is how KEDA's Prometheus scaler and the vLLM production stack read a
fleet: one query against ``/api/v1/query`` instead of scraping every instance.
The queries (``{sel}`` is the deployment's label selector, e.g.
``model_name="llama"``, possibly empty)::

    sum(vllm:num_requests_waiting{sel})
    sum(vllm:num_requests_running{sel})
    max(vllm:kv_cache_usage_perc{sel}) or max(vllm:gpu_cache_usage_perc{sel})
    histogram_quantile(0.99, sum by (le) (rate(vllm:time_to_first_token_seconds_bucket{sel}[1m])))
    histogram_quantile(0.99, sum by (le) (rate(vllm:e2e_request_latency_seconds_bucket{sel}[1m])))
    sum by (instance, le) (vllm:request_prompt_tokens_bucket{sel})      (the live context mix)

Arrivals are counted from raw per-target series, not from ``increase()``: one query,
``sum by (__name__, instance) ({__name__=~"<waiting>|<running>|<finished>",sel})``, gives
each target's counter and gauges from one scrape, and ``warmup.actuators.arrivals`` counts them as it
counts the instances' own /metrics (reset-aware as ``increase()``, in-flight requests counted on
arrival, a target missing from the answer held at its last reading, never read as zero).

With ``window=None`` the quantile is over the cumulative buckets (everything
since each server started), which equals the scrape client's cumulative
histogram once the servers are idle; that is what the live test compares.
Empty results (no series yet) and NaN (no requests in the window) read as None.
"""
from __future__ import annotations

import asyncio
import math
import re
from dataclasses import dataclass
from typing import Any

import httpx

from warmcast.errors import InputError, WarmcastError
from warmup.actuators.metrics import (DEFAULT_QUANTILES, E2E, KV_USAGE, PROMPT_TOKENS, RUNNING, SUCCESS, TTFT,
                                      WAITING, Histogram)

_WINDOW_UNITS = ("ms", "s", "m", "h", "d")


class PrometheusError(WarmcastError):
    """The Prometheus server could not answer a query; the message names server and query."""


def _sel(selector: str) -> str:
    s = selector.strip()
    if s.startswith("{") and s.endswith("}"):
        s = s[1:-1]
    return "{" + s + "}" if s else ""


def _check_window(window: str) -> str:
    if not (window and window[:-1].rstrip("m").isdigit() and window.endswith(_WINDOW_UNITS)):
        raise InputError(f"PromQL range window must look like 30s, 1m, 5m; got {window!r}")
    return window


def gauge_query(names: tuple[str, ...], selector: str = "", agg: str = "sum") -> str:
    return " or ".join(f"{agg}({n}{_sel(selector)})" for n in names)


def quantile_query(metric: str, q: float, selector: str = "", window: str | None = "1m") -> str:
    """``histogram_quantile(q, sum by (le) (rate(metric_bucket{sel}[window])))``."""
    if not 0 <= q <= 1:
        raise InputError(f"quantile must be within [0, 1], got {q}")
    series = f"{metric}_bucket{_sel(selector)}"
    inner = f"rate({series}[{_check_window(window)}])" if window else series
    return f"histogram_quantile({q:g}, sum by (le) ({inner}))"


def queries(selector: str = "", window: str | None = "1m", qs: tuple[float, ...] = DEFAULT_QUANTILES) -> dict[str, str]:
    """Every query :class:`PrometheusSignals` sends, by signal name."""
    out = {
        "waiting": gauge_query(WAITING, selector),
        "running": gauge_query(RUNNING, selector),
        "kv_cache_usage": gauge_query(KV_USAGE, selector, agg="max"),
    }
    for q in qs:
        out[f"ttft_p{q * 100:g}"] = quantile_query(TTFT[0], q, selector, window)
        out[f"e2e_p{q * 100:g}"] = quantile_query(E2E[0], q, selector, window)
    return out


@dataclass(frozen=True)
class PromSignals:
    waiting: float | None
    running: float | None
    kv_cache_usage: float | None
    ttft: dict[float, float | None]
    e2e: dict[float, float | None]


def _data(payload: dict[str, Any], query: str, url: str, kinds: tuple[str, ...]) -> dict[str, Any]:
    """The answer's ``data``, once its status is success and its result type one of ``kinds``."""
    if payload.get("status") != "success":
        raise PrometheusError(f"Prometheus {url}: query {query!r} failed: {payload.get('errorType')}: "
                              f"{payload.get('error')}")
    data = payload.get("data") or {}
    if data.get("resultType") not in kinds:
        raise PrometheusError(f"Prometheus {url}: query {query!r} gave a {data.get('resultType')}, not a vector")
    return data


def _scalar(payload: dict[str, Any], query: str, url: str) -> float | None:
    data = _data(payload, query, url, ("scalar", "vector"))
    result = data.get("result")
    if data["resultType"] == "scalar":
        value = float(result[1])
    elif not result:
        return None
    else:
        value = sum(float(r["value"][1]) for r in result)
    return None if math.isnan(value) else value


class PrometheusSignals:
    """Queries one Prometheus server for one deployment's signals."""

    def __init__(self, url: str, selector: str = "", *, window: str | None = "1m", timeout_s: float = 10.0,
                 retries: int = 3, backoff_s: float = 0.25, token: str | None = None,
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        if not url.startswith(("http://", "https://")):
            raise InputError(f"prometheus_url must be http(s)://..., got {url!r}")
        self.url = url.rstrip("/")
        self.selector = selector
        self.window = _check_window(window) if window else None
        self.retries = max(1, retries)
        self.backoff_s = backoff_s
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.AsyncClient(base_url=self.url, timeout=timeout_s, headers=headers, transport=transport)
        self.sent = 0   # queries sent (a shard's reader sends three for all its deployments)

    async def __aenter__(self) -> "PrometheusSignals":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self._http.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def query(self, promql: str) -> float | None:
        """Instant query; the vector's values summed (None when empty or NaN)."""
        return _scalar(await self._payload(promql), promql, self.url)

    async def per_instance(self) -> dict[str, dict[str, float]]:
        """Waiting, running and finished requests of each scrape target (Prometheus' ``instance``
        label, ``host:port``): what the loop's per-instance scrape reads from each server.

        One query for all three: Prometheus answers it from one consistent view, so a target's
        counter and gauges come from the same scrape.  Three queries could straddle a scrape and
        read a request both finished and still running, which counts it twice."""
        return (await self._per_instance_by(None)).get(None, {})

    async def _per_instance_by(self, label: str | None) -> dict[Any, dict[str, dict[str, float]]]:
        """:meth:`per_instance`, per value of ``label`` (None: one group, keyed None)."""
        names = {WAITING[0]: "waiting", RUNNING[0]: "running", SUCCESS[0]: "success"}
        inner = _sel(self.selector)[1:-1]
        matcher = f'__name__=~"{"|".join(names)}"' + (f",{inner}" if inner else "")
        promql = f"sum by (__name__, instance{_by(label)}) ({{{matcher}}})"
        data = _data(await self._payload(promql), promql, self.url, ("vector",))
        out: dict[Any, dict[str, dict[str, float]]] = {}
        for r in data.get("result") or []:
            v, labels = float(r["value"][1]), r["metric"]
            if not math.isnan(v) and labels.get("__name__") in names:
                group = out.setdefault(labels.get(label) if label else None, {})
                group.setdefault(labels.get("instance", ""), {})[names[labels["__name__"]]] = v
        return out

    async def prompt_histograms(self) -> dict[str, Histogram]:
        """Each target's cumulative prompt-token histogram (``sum by (instance, le)`` of
        ``vllm:request_prompt_tokens_bucket``), for the live context mix."""
        return (await self._prompt_histograms_by(None)).get(None, {})

    async def _prompt_histograms_by(self, label: str | None) -> dict[Any, dict[str, Histogram]]:
        promql = f"sum by (instance, le{_by(label)}) ({PROMPT_TOKENS[0]}_bucket{_sel(self.selector)})"
        data = _data(await self._payload(promql), promql, self.url, ("vector",))
        by: dict[Any, dict[str, dict[float, float]]] = {}
        for r in data.get("result") or []:
            v = float(r["value"][1])
            if not math.isnan(v):
                group = by.setdefault(r["metric"].get(label) if label else None, {})
                group.setdefault(r["metric"].get("instance", ""), {})[float(r["metric"].get("le", "+Inf"))] = v
        return {g: {inst: Histogram(tuple(sorted(b.items())), b.get(math.inf, 0.0), 0.0) for inst, b in hs.items()}
                for g, hs in by.items()}

    async def _payload(self, promql: str) -> dict[str, Any]:
        self.sent += 1
        last = ""
        for attempt in range(self.retries):
            try:
                r = await self._http.get("/api/v1/query", params={"query": promql})
            except httpx.TransportError as err:
                last = f"{type(err).__name__}: {err}"
            else:
                if r.status_code < 500 and r.status_code != 429:
                    try:
                        return r.json()
                    except ValueError:
                        raise PrometheusError(f"Prometheus {self.url}: non-JSON answer HTTP {r.status_code}: "
                                              f"{r.text[:200]}") from None
                last = f"HTTP {r.status_code}: {r.text[:200]}"
            if attempt + 1 < self.retries:
                await asyncio.sleep(self.backoff_s * 2 ** attempt)
        raise PrometheusError(f"Prometheus {self.url}: query {promql!r} failed after {self.retries} attempts: {last}")

    async def queue_depth(self) -> float | None:
        return await self.query(gauge_query(WAITING, self.selector))

    async def running(self) -> float | None:
        return await self.query(gauge_query(RUNNING, self.selector))

    async def kv_cache_usage(self) -> float | None:
        return await self.query(gauge_query(KV_USAGE, self.selector, agg="max"))

    async def ttft_quantile(self, q: float) -> float | None:
        return await self.query(quantile_query(TTFT[0], q, self.selector, self.window))

    async def e2e_quantile(self, q: float) -> float | None:
        return await self.query(quantile_query(E2E[0], q, self.selector, self.window))

    async def signals(self, qs: tuple[float, ...] = DEFAULT_QUANTILES) -> PromSignals:
        waiting, running, kv, *lat = await asyncio.gather(
            self.queue_depth(), self.running(), self.kv_cache_usage(),
            *(self.ttft_quantile(q) for q in qs), *(self.e2e_quantile(q) for q in qs))
        n = len(qs)
        return PromSignals(waiting, running, kv, dict(zip(qs, lat[:n])), dict(zip(qs, lat[n:])))


def _by(label: str | None) -> str:
    return f", {label}" if label else ""


Reading3 = tuple   # (per_instance, ttft P99, prompt histograms): what the signals step reads per deployment


def equality_matcher(selector: str) -> tuple[str, str] | None:
    """(label, value) when ``selector`` is one ``label="value"`` matcher, the form a shard's
    deployments can be read by together; None for any other selector (read on its own)."""
    m = re.fullmatch(r'\s*\{?\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*"([^"\\]*)"\s*\}?\s*', selector or "")
    return (m.group(1), m.group(2)) if m else None


class ShardPrometheus(PrometheusSignals):
    """Many deployments whose selectors are ``label="value"`` on one label, read in one query per
    signal (``sum by (..., label)`` over ``label=~"v1|v2|..."``) instead of one per deployment and
    signal (issue 44); each value's answer is what :class:`PrometheusSignals` gives that deployment."""

    def __init__(self, url: str, label: str, values: list[str], **kwargs: Any) -> None:
        alternation = "|".join(re.escape(v).replace("\\", "\\\\") for v in values)
        super().__init__(url, f'{label}=~"{alternation}"', **kwargs)
        self.label, self.values = label, list(values)

    async def ttft_p99_by(self) -> dict[str, float | None]:
        series = f"{TTFT[0]}_bucket{_sel(self.selector)}"
        inner = f"rate({series}[{self.window}])" if self.window else series
        promql = f"histogram_quantile(0.99, sum by (le, {self.label}) ({inner}))"
        data = _data(await self._payload(promql), promql, self.url, ("vector",))
        out: dict[str, float | None] = {}
        for r in data.get("result") or []:
            v = float(r["value"][1])
            out[r["metric"].get(self.label, "")] = None if math.isnan(v) else v
        return out

    async def read_all(self) -> dict[str, Reading3]:
        """value -> (per-instance readings, TTFT P99, prompt histograms), for every value asked."""
        per, p99, hists = await asyncio.gather(self._per_instance_by(self.label), self.ttft_p99_by(),
                                               self._prompt_histograms_by(self.label))
        return {v: (per.get(v, {}), p99.get(v), hists.get(v, {})) for v in self.values}
