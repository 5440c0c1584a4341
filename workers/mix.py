"""The live context mix of one signals round (pure): prompts seen since the last round, and how
many were long, from each instance's cumulative ``vllm:request_prompt_tokens`` histogram.

Each instance is differenced against its own previous reading (reset-aware: a restarted server's
whole histogram is new, as PromQL's ``increase()`` treats it); an instance seen for the first time
only sets its baseline (its history is not this round's).  The round's counts go to the minute it
ends in; the ingest step stores ``long_share = long / total`` per minute like load.
"""
from __future__ import annotations

from typing import Any

from warmup.actuators.metrics import Histogram
from warmup.core.mix_trigger import count_above

DEFAULT_LONG_TOKENS = 4096  # where a deployment has no mix_trigger: the seed's long-context line


def round_mix(prev: dict[str, Any] | None, current: dict[str, Histogram | None], long_tokens: int,
              now: float) -> tuple[dict[str, Any], dict[str, Any]]:
    """({"minute", "long", "total", "long_tokens"}, carry of the instances' buckets for the next round)."""
    before = {u: Histogram(tuple((float(le), float(c)) for le, c in b["buckets"]), float(b["count"]), 0.0)
              for u, b in ((prev or {}).items())}
    long_ = total = 0.0
    carry: dict[str, Any] = {}
    for url, h in current.items():
        if h is None:
            if url in (prev or {}):
                carry[url] = prev[url]  # not read this round: keep its baseline
            continue
        carry[url] = {"buckets": [[le, c] for le, c in h.buckets], "count": h.count}
        if url not in before:
            continue
        delta = h.minus(before[url])
        lg, tot = count_above(delta.buckets, long_tokens)
        long_, total = long_ + lg, total + tot
    return {"minute": int(now // 60), "long": long_, "total": total, "long_tokens": long_tokens}, carry
