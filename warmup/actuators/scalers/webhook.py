"""Webhook backend: POSTs the desired replica count as JSON to any other autoscaler."""
from __future__ import annotations

import time
from datetime import datetime, timezone
from typing import Any, Mapping

import httpx

from warmcast.errors import InputError, WarmcastError
from warmup.actuators.scalers.base import Scaler


class WebhookScaler(Scaler):
    """POSTs the desired replica count as JSON; any 2xx answer means accepted.

    Body: ``{"deployment", "replicas", "reason", "previous", "forecast", "sent_at"}``.
    If the answer is JSON with an integer ``replicas``, that becomes ``current()``;
    otherwise ``current()`` is the last accepted target (``initial`` before any).
    """

    backend = "webhook"

    def __init__(self, deployment: str, url: str, *, token: str | None = None, timeout_s: float = 10.0,
                 retries: int = 3, backoff_s: float = 0.5, initial: int = 0,
                 transport: httpx.BaseTransport | None = None) -> None:
        super().__init__(deployment)
        if not url.startswith(("http://", "https://")):
            raise InputError(f"webhook url must be http(s)://..., got {url!r}")
        self.url = url
        self.retries = max(1, retries)
        self.backoff_s = backoff_s
        self._target = initial
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.Client(timeout=timeout_s, headers=headers, transport=transport)

    def current(self) -> int:
        return self._target

    def _apply(self, n: int, reason: str, forecast: Mapping[str, Any] | None) -> dict[str, Any]:
        body = {"deployment": self.deployment, "replicas": n, "reason": reason, "previous": self._target,
                "forecast": dict(forecast) if forecast else None,
                "sent_at": datetime.now(timezone.utc).isoformat(timespec="seconds")}
        last = ""
        for attempt in range(self.retries):
            try:
                r = self._http.post(self.url, json=body)
            except httpx.TransportError as err:
                last = f"{type(err).__name__}: {err}"
            else:
                if r.is_success:
                    try:
                        answer = r.json()
                    except ValueError:
                        answer = None
                    got = answer.get("replicas") if isinstance(answer, dict) else None
                    self._target = got if isinstance(got, int) and not isinstance(got, bool) else n
                    return {"status": r.status_code, "answer": answer}
                if r.status_code < 500 and r.status_code != 429:
                    raise WarmcastError(f"{self.url} answered HTTP {r.status_code}: {r.text[:200]}")
                last = f"HTTP {r.status_code}: {r.text[:200]}"
            if attempt + 1 < self.retries:
                time.sleep(self.backoff_s * 2 ** attempt)
        raise WarmcastError(f"{self.url} failed after {self.retries} attempts: {last}")

    def close(self) -> None:
        self._http.close()

