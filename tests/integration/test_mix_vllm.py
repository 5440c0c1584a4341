"""The live context mix from a REAL vLLM CPU server's ``vllm:request_prompt_tokens`` histogram, read
through both signal sources (its /metrics and a real Prometheus), stored per minute as ``long_share``
by the loop's signals and ingest steps, and read back by the tick's mix trigger.  The server
is the shared one (tests/integration/conftest.py)."""
from __future__ import annotations

import time

import httpx
import pytest

from promserver import NEEDS_PROMETHEUS, Prometheus
from warmcast.config.deployments import Deployment
from warmcast.config.settings import load_settings
from warmup.actuators.launch import default_vllm_python_path
from workers.context import Ctx
from workers.live_signals import prometheus_live, scrape_live
from workers.options import WorkerOptions
from workers.steps import ingest, signals
from workers.steps.switch_inputs import live_mix

VLLM_PY = default_vllm_python_path()
pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(not VLLM_PY.exists(), reason=f"no vLLM virtualenv at {VLLM_PY}: run scripts/setup-vllm.sh"),
              NEEDS_PROMETHEUS]

SHORT, LONG = 20, 800   # prompt tokens; the line is 500, one of vLLM's bucket bounds (1-2-5 series)
N_SHORT, N_LONG = 6, 4
DEPLOYMENTS = """
deployments:
  - name: mixdep
    instances: [{url}]
    signals: {{source: {source}, prometheus_url: {prom}, selector: 'job="vllm"'}}
    profiles: {{day: {{capacity_rpm: 60}}, night: {{capacity_rpm: 30}}}}
    schedule: {{mix_trigger: {{profile: night, long_tokens: 500, share: 0.3, sustain_min: 1}}}}
"""


@pytest.fixture
def prometheus(server, tmp_path):
    prom = Prometheus(tmp_path, static=[server.url])
    try:
        yield prom.url
    finally:
        prom.stop()


def _prom_count(url: str) -> float | None:
    """Prompts Prometheus has seen (None until it has scraped the histogram)."""
    try:
        r = httpx.get(f"{url}/api/v1/query", params={"query": 'sum(vllm:request_prompt_tokens_count{job="vllm"})'})
        res = r.json()["data"]["result"]
        return float(res[0]["value"][1]) if res else None
    except (httpx.HTTPError, KeyError, ValueError):
        return None


def _wait(cond, timeout_s: float, what: str):
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        got = cond()
        if got:
            return got
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


def _send(url: str) -> None:
    with httpx.Client(timeout=120) as c:
        model = c.get(f"{url}/v1/models").json()["data"][0]["id"]
        for n in [SHORT] * N_SHORT + [LONG] * N_LONG:
            r = c.post(f"{url}/v1/completions", json={"model": model, "prompt": list(range(10, 10 + n)),
                                                      "max_tokens": 2, "temperature": 0.0})
            assert r.status_code == 200, r.text


def test_long_share_from_scrape_and_prometheus_stored_and_read_by_the_trigger(server, prometheus, tmp_path,
                                                                              redis_client, key_prefix,
                                                                              redis_server_url):
    deps = tmp_path / "deployments.yaml"
    deps.write_text(DEPLOYMENTS.format(url=server.url, source="scrape", prom=prometheus))
    ctx = Ctx(load_settings(redis_url=redis_server_url, key_prefix=key_prefix, deployments_file=deps,
                            state_dir=tmp_path / "state"), WorkerOptions(simulate=False), redis_client)
    dep: Deployment = ctx.dep("mixdep")
    _wait(lambda: _prom_count(prometheus) is not None, 120, "Prometheus to scrape the server's histogram")
    base = _prom_count(prometheus)
    _, scrape0 = scrape_live(dep, [server.url], None, None, warmed=set())
    _, prom0 = prometheus_live(dep, [server.url], None, warmed=set())
    signals.step(ctx, "mixdep")  # the loop's own baseline round
    _send(server.url)
    _wait(lambda: _prom_count(prometheus) == base + N_SHORT + N_LONG, 60, "Prometheus to see every prompt")
    by_scrape, _ = scrape_live(dep, [server.url], scrape0, None, warmed=set())
    by_prom, _ = prometheus_live(dep, [server.url], prom0, warmed=set())
    for doc in (by_scrape, by_prom):
        assert (doc["mix"]["long"], doc["mix"]["total"], doc["mix"]["long_tokens"]) == (N_LONG, N_SHORT + N_LONG, 500)
    mix_minute = signals.step(ctx, "mixdep").doc["mix"]["minute"]
    time.sleep(max(0.0, (mix_minute + 1) * 60 - time.time()) + 0.5)  # ingest stores completed minutes
    ingest.step(ctx, "mixdep")
    stored = ctx.store.series("mixdep", "long_share").dropna()
    assert list(stored) == [pytest.approx(N_LONG / (N_SHORT + N_LONG))], stored
    from datetime import datetime, timezone

    ask = live_mix(ctx, "mixdep", datetime.now(timezone.utc))
    assert ask is not None and ask.profile == "night" and "40%" in ask.why
