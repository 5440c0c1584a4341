"""The stored cold-start figure round-trips through the real Redis at 127.0.0.1:6379."""
from __future__ import annotations

import uuid

import pytest
import redis

from warmcast.errors import WarmcastError
from warmup.actuators.coldstart import ColdStartResult, coldstart_key, load_coldstart, store_coldstart


@pytest.fixture()
def r_prefix():
    r = redis.Redis()
    prefix = f"wctest-{uuid.uuid4().hex[:8]}"
    yield r, prefix
    for key in r.scan_iter(f"{prefix}:*"):
        r.delete(key)


def _result(**kw) -> ColdStartResult:
    base = dict(deployment="chat", backend="local", model="m", engine_args={"max-num-seqs": 4},
                time_to_healthy_s=24.0, first_request_cold_s=0.05, first_request_warm_s=0.02, warmup_s=6.0,
                warmup_requests=8, probe_prompt_tokens=128, probe_output_tokens=16)
    return ColdStartResult(**{**base, **kw})


def test_store_and_load_roundtrip(r_prefix):
    r, prefix = r_prefix
    res = _result(notes=["sleep/wake not measured: cpu"])
    assert store_coldstart(r, prefix, res) == f"{prefix}:coldstart:chat" == coldstart_key(prefix, "chat")
    got = load_coldstart(r, prefix, "chat")
    assert got == res and got.cold_start_min == pytest.approx(0.5)
    assert load_coldstart(r, prefix, "other") is None
    assert "not measured" in got.summary()
    with_wake = _result(sleep_s=1.5, wake_s=2.25, first_request_after_wake_s=0.03)
    assert "wake_up: 2.25 s" in with_wake.summary()


def test_unreadable_figure_is_a_clear_error(r_prefix):
    r, prefix = r_prefix
    r.set(coldstart_key(prefix, "chat"), "{not json")
    with pytest.raises(WarmcastError, match="chat"):
        load_coldstart(r, prefix, "chat")
