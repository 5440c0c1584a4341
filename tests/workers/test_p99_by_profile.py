"""Issue 26: the switch breaker reads the canary's own P99, so the live signals give one per profile.

Each profile's P99 merges only its own instances' TTFT histograms (the /metrics text captured from a
real vLLM 0.32 CPU server, and the same text with every request moved past 1 s: a slower profile).
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from warmup.actuators.metrics import parse_metrics
from warmup.actuators.vllm_client.fleet import FleetSignals, InstanceResult
from workers.live_signals import p99_by_profile

CAPTURED = Path(__file__).parents[1] / "integration" / "data" / "vllm-0.32.0-cpu-metrics.txt"


def _slower(text: str) -> str:
    """The captured text with the 32 TTFT observations between 1.0 and 2.5 s instead of under 1 s."""
    def bucket(m: re.Match) -> str:
        le = m.group(2)
        return f"{m.group(1)}{'0.0' if le != '+Inf' and float(le) <= 1.0 else '32.0'}"
    return re.sub(r'(vllm:time_to_first_token_seconds_bucket\{engine="0",le="([^"]+)"[^}]*\} )[0-9.]+', bucket, text)


def test_each_profile_gets_its_own_instances_p99_and_the_fleet_the_merged_one() -> None:
    text = CAPTURED.read_text()
    day, night = parse_metrics(text, "http://a"), parse_metrics(_slower(text), "http://b")
    sig = FleetSignals([InstanceResult("http://a", day), InstanceResult("http://b", night)], 0.0, 0.0, None, 2)
    own = p99_by_profile(sig, {"http://a": "day", "http://b": "night"})
    assert own["day"] == pytest.approx(0.75 + 0.25 * 5.68 / 6)        # the captured histogram's own P99
    assert own["night"] == pytest.approx(1.0 + 1.5 * 31.68 / 32)       # rank 31.68 of 32 in (1.0, 2.5]
    fleet = sig.ttft_quantile(0.99)
    assert own["day"] < fleet <= own["night"]
    assert p99_by_profile(sig, {"http://a": "day"}) == {"day": own["day"]}   # an instance of no named profile
    assert p99_by_profile(None, {"http://a": "day"}) == {}                    # nothing scraped
