"""The pre-scaler's guardrails: small staged functions, each of which may change the number of
replicas and says why (stabilisation, max step, cooldowns, the reactive guard, min/max replicas, GPU
budget); bounds and budget run last, so they always hold.  Split from :mod:`warmup.core.prescale`."""
from __future__ import annotations

from datetime import datetime, timedelta
from typing import Callable, Optional

from warmup.core.config import ScalingConfig
from warmup.core.decisions import GuardrailStep
from warmup.core.inputs import as_utc
from warmup.core.reasons import Reason, ReasonCode
from warmup.core.state import PolicyState


class GuardrailContext:
    """What every guardrail stage sees besides the number it is handed."""

    __slots__ = ("cfg", "now", "current", "state", "raw", "hpa")

    def __init__(self, cfg: ScalingConfig, now: datetime, current: int, state: PolicyState, raw: int,
                 hpa: Optional[int] = None):
        self.cfg, self.now, self.current, self.state, self.raw = cfg, now, current, state, raw
        self.hpa = hpa   # what the replaced autoscaler holds now (None: no reactive guard)


Stage = Callable[[int, GuardrailContext], tuple[int, Optional[Reason]]]


def stage_stabilisation(n: int, c: GuardrailContext) -> tuple[int, Optional[Reason]]:
    """Scale-in goes only to the highest recommendation of the stabilisation window."""
    if n >= c.current or c.cfg.stabilisation_s <= 0:
        return n, None
    start = c.now - timedelta(seconds=c.cfg.stabilisation_s)
    recent = [r for t, r in c.state.history if as_utc(t) > start]
    hi = max(recent + [n])
    if hi > n:
        m = min(c.current, hi)
        return m, Reason(ReasonCode.STABILISATION,
                         f"scale-in held at {m}: a recommendation of {hi} within the last "
                         f"{c.cfg.stabilisation_s / 60:.0f} min stabilisation window")
    return n, None


def stage_max_step(n: int, c: GuardrailContext) -> tuple[int, Optional[Reason]]:
    up, down = c.cfg.max_step_up, c.cfg.max_step_down
    if up is not None and n > c.current + up:
        return c.current + up, Reason(ReasonCode.MAX_STEP, f"at most {up} replicas added per step")
    if down is not None and n < c.current - down:
        return c.current - down, Reason(ReasonCode.MAX_STEP, f"at most {down} replicas removed per step")
    return n, None


def stage_cooldown(n: int, c: GuardrailContext) -> tuple[int, Optional[Reason]]:
    last = c.state.last_scale
    if last is None:
        return n, None
    last = as_utc(last)
    since = (c.now - last).total_seconds()
    if n < c.current and since < c.cfg.cooldown_down_s:
        return c.current, Reason(ReasonCode.COOLDOWN_DOWN, f"no scale-in within {c.cfg.cooldown_down_s:.0f} s "
                                 f"of the last scale action ({since:.0f} s ago)")
    if n > c.current and since < c.cfg.cooldown_up_s:
        return c.current, Reason(ReasonCode.COOLDOWN_UP, f"no scale-up within {c.cfg.cooldown_up_s:.0f} s "
                                 f"of the last scale action ({since:.0f} s ago)")
    return n, None


def stage_bounds(n: int, c: GuardrailContext) -> tuple[int, Optional[Reason]]:
    lo, hi = c.cfg.min_replicas, c.cfg.max_replicas
    if n > hi:
        return hi, Reason(ReasonCode.MAX_REPLICAS, f"capped at max_replicas {hi} (asked for {n})")
    if n < lo:
        return lo, Reason(ReasonCode.MIN_REPLICAS, f"kept at min_replicas {lo}")
    return n, None


def gpu_cap(cfg: ScalingConfig) -> Optional[int]:
    if cfg.gpu_budget is None or cfg.gpus_per_replica <= 0:
        return None
    return cfg.gpu_budget // cfg.gpus_per_replica


def stage_gpu_budget(n: int, c: GuardrailContext) -> tuple[int, Optional[Reason]]:
    cap = gpu_cap(c.cfg)
    if cap is not None and n > cap:
        return cap, Reason(ReasonCode.GPU_BUDGET, f"GPU budget {c.cfg.gpu_budget} allows {cap} replicas of "
                           f"{c.cfg.gpus_per_replica} GPU(s) (asked for {n})")
    return n, None


def stage_reactive_guard(n: int, c: GuardrailContext) -> tuple[int, Optional[Reason]]:
    """Never below what the autoscaler warmcast replaces would hold on this load (warmup/core/hpa.py).
    It runs after max step and cooldown on purpose (never later than the HPA comes first); where it
    goes past either, its reason says so, so no earlier guardrail is undone in silence (issue 42)."""
    if c.hpa is None or n >= c.hpa:
        return n, None
    text = (f"held at {c.hpa}: the HPA it replaces (target {c.cfg.reactive_guard:.0%} of capacity, "
            f"{c.cfg.reactive_guard_window_min} min scale-down window) would hold {c.hpa} on this "
            f"load, and warmcast never holds less (its own need: {n})")
    return c.hpa, Reason(ReasonCode.REACTIVE_GUARD, text + _overrides(c.hpa, c))


def _overrides(n: int, c: GuardrailContext) -> str:
    """The earlier guardrails that ``n`` goes past, in words ("" where none)."""
    over = []
    up = c.cfg.max_step_up
    if up is not None and n > c.current + up:
        over.append(f"max_step_up {up} (+{n - c.current} from {c.current})")
    last = c.state.last_scale
    if n > c.current and last is not None and (c.now - as_utc(last)).total_seconds() < c.cfg.cooldown_up_s:
        over.append(f"the {c.cfg.cooldown_up_s:.0f} s scale-up cooldown")
    if not over:
        return ""
    return "; this goes past " + " and ".join(over) + ": never later than the HPA comes first"


GUARDRAILS: tuple[tuple[str, Stage], ...] = (
    ("stabilisation", stage_stabilisation),
    ("max_step", stage_max_step),
    ("cooldown", stage_cooldown),
    ("reactive_guard", stage_reactive_guard),
    ("bounds", stage_bounds),
    ("gpu_budget", stage_gpu_budget),
)


def hard_cap(cfg: ScalingConfig) -> int:
    cap = gpu_cap(cfg)
    return cfg.max_replicas if cap is None else min(cfg.max_replicas, cap)


def apply_guardrails(raw: int, ctx: GuardrailContext) -> tuple[int, tuple[GuardrailStep, ...], Optional[Reason]]:
    """(replicas after every guardrail, each guardrail's step, the last one that changed the number)."""
    n = raw
    steps: list[GuardrailStep] = []
    reason: Optional[Reason] = None
    for name, fn in GUARDRAILS:
        m, why = fn(n, ctx)
        steps.append(GuardrailStep(name, n, m, why))
        if m != n and why is not None:
            reason = why
        n = m
    return n, tuple(steps), reason
