"""Actuators: where warmcast's decisions meet real vLLM instances and autoscalers.

Everything here does I/O; the pure decision core (``warmup.core``) never imports
it.  Adapters take the core's typed decisions and apply them:

- :mod:`.vllm_client`: async client per vLLM instance (health, metrics, models,
  warmup requests, sleep/wake, prefix-cache reset) and fleet helpers that return
  one result per instance instead of raising.
- :mod:`.metrics`: vLLM's Prometheus text -> queue depth, running, KV usage,
  TTFT / e2e histograms and PromQL-style quantiles over a window (pure).
- :mod:`.prometheus`: the same signals read with PromQL from a Prometheus server.
- :mod:`.tokens`: prompt/output length distribution fitted from the load store.
- :mod:`.scalers`: ``Scaler`` (``current()``, ``scale_to(n, reason)``) for
  Kubernetes, local processes, webhooks and dry-run.
- :mod:`.launch` / :mod:`.local`: engine args -> launch command (validated by
  vLLM's own parser) and vLLM server processes on loopback.
- :mod:`.coldstart` and :mod:`.cli`: ``warmcast measure-coldstart``.
"""
