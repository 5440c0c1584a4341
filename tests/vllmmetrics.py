"""Reading a real vLLM server's own request records from its /metrics text (no warmcast code, so
tests can check warmcast's readings against it)."""
from __future__ import annotations

import re


def waited_longer_than(before: str, after: str, at_least_s: float,
                       name: str = "vllm:request_queue_time_seconds") -> tuple[float, int]:
    """(bound, requests) of the load between two /metrics texts whose time in the WAITING phase,
    by the server's own ``vllm:request_queue_time_seconds`` histogram (or the histogram ``name``),
    exceeded ``bound`` (its smallest bucket edge at or above ``at_least_s``)."""
    def hist(text: str) -> tuple[dict[float, float], float]:
        buckets: dict[float, float] = {}
        for le, v in re.findall(rf'^{name}_bucket\{{[^}}]*le="([^"]+)"[^}}]*\}} (\S+)$', text, re.M):
            buckets[float(le)] = buckets.get(float(le), 0.0) + float(v)
        return buckets, sum(float(v) for v in re.findall(rf'^{name}_count\{{[^}}]*\}} (\S+)$', text, re.M))

    (b0, c0), (b1, c1) = hist(before), hist(after)
    bound = min(le for le in b1 if le >= at_least_s)
    return bound, round((c1 - c0) - (b1[bound] - b0.get(bound, 0.0)))
