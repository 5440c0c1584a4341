"""The live context-mix trigger (pure): ask for a profile while long prompts hold a large share.

Input: the stored per-minute ``long_share`` (share of requests whose prompt exceeds
``long_tokens``, counted from vLLM's ``vllm:request_prompt_tokens`` histograms) and ``now``.
The mix asks for ``profile`` once the share has been at or above ``share`` for ``sustain_min``
consecutive minutes, and stops asking once it has been below for as long (hysteresis: a
mixed stretch keeps the last sustained state, so one noisy minute never flips a switch).
Minutes with no reading break a run on either side.  The switch machine treats the ask like
a schedule window: same pre-warm, canary, breaker and rollback.

``count_above`` reads a histogram delta the way PromQL's ``histogram_quantile`` does:
uniform within a bucket, so a threshold between two bucket bounds is interpolated.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Optional, Sequence

from warmup.core.inputs import MixAsk, as_utc  # noqa: F401 - MixAsk is this module's answer


@dataclass(frozen=True, slots=True)
class MixTriggerConfig:
    profile: str
    long_tokens: int = 4096
    share: float = 0.3
    sustain_min: int = 10

    def __post_init__(self) -> None:
        if not (0.0 < self.share <= 1.0) or self.sustain_min < 1 or self.long_tokens < 1:
            raise ValueError("mix trigger needs 0 < share <= 1, sustain_min >= 1 and long_tokens >= 1")


def count_above(buckets: Sequence[tuple[float, float]], tokens: float) -> tuple[float, float]:
    """(observations above ``tokens``, all observations) of cumulative ``(le, count)`` buckets."""
    bs = sorted((float(le), float(c)) for le, c in buckets)
    if not bs or not math.isinf(bs[-1][0]):
        return 0.0, 0.0
    total = bs[-1][1]
    lo, below_lo = 0.0, 0.0
    for le, c in bs:
        if tokens < le:
            if math.isinf(le):  # above the last finite bound: all of the +Inf bucket is long
                return total - below_lo, total
            below = below_lo + (c - below_lo) * (tokens - lo) / (le - lo)
            return max(0.0, total - below), total
        lo, below_lo = le, c
    return 0.0, total


def _points(series: Sequence[tuple[datetime, float]], now: datetime) -> list[tuple[float, datetime, bool]]:
    """Finite readings before ``now``, oldest first: (share, minute, follows the previous minute?)."""
    out: list[tuple[float, datetime, bool]] = []
    prev: Optional[datetime] = None
    for at, v in sorted(((as_utc(a), v) for a, v in series if as_utc(a) < now), key=lambda p: p[0]):
        if v is None or not math.isfinite(v):
            prev = None  # a missing minute breaks a run on either side
            continue
        out.append((float(v), at, prev is not None and at - prev == timedelta(minutes=1)))
        prev = at
    return out


def decide_mix(cfg: MixTriggerConfig, series: Sequence[tuple[datetime, float]], now: datetime) -> MixAsk:
    """The profile the long-context share asks for now: the side of the last run that lasted
    ``sustain_min`` minutes decides, with the run named in the reason."""
    now = as_utc(now)
    points = _points(series, now)
    if not points:
        return MixAsk("", f"no live long-context share stored before {now:%H:%M}: the clock decides")
    held, side, run = False, None, 0
    for v, _at, joined in points:
        above = v >= cfg.share
        run = run + 1 if joined and above == side else 1
        side = above
        if run >= cfg.sustain_min:
            held = above
    share_now, at = points[-1][0], points[-1][1]
    last = (f"long-context share (prompts > {cfg.long_tokens} tokens) {share_now:.0%} at {at:%H:%M}, "
            f"{'at or above' if side else 'below'} {cfg.share:.0%} for {run} min")
    if held:
        return MixAsk(cfg.profile, f"{last}; last held >= {cfg.share:.0%} for {cfg.sustain_min} min: "
                                   f"mix asks for {cfg.profile}", share_now)
    return MixAsk("", f"{last}; not held >= {cfg.share:.0%} for {cfg.sustain_min} min since it last fell "
                      "below: the clock decides", share_now)
