"""Replicas per profile during a profile switch: make before break, in capacity terms.

One rule covers the move and the rollback: the side that is leaving keeps what the *ready*
capacity of the side that is arriving does not cover yet,

    keep(leaving) = ceil(max(0, need - ready(arriving) * capacity(arriving)) / capacity(leaving))

so old replicas go only as target replicas become ready, and on a rollback the target goes only
once the old profile's ready capacity is back.  ``need`` is the capacity in requests/min the plan
needs (the planner's need, or what the old profile served when the switch began).  Pure.
"""
from __future__ import annotations

import math
from dataclasses import replace
from typing import Mapping, Optional

from warmup.core.config import SwitchConfig
from warmup.core.decisions import SwitchAction, SwitchDecision
from warmup.core.inputs import Instance
from warmup.core.state import IN_SWITCH, SwitchPhase, SwitchState

Replicas = tuple[tuple[str, int], ...]


def whole(need_rpm: float, cap: float) -> int:
    """Replicas of capacity ``cap`` that serve ``need_rpm`` (at least one)."""
    return max(1, int(math.ceil(need_rpm / cap - 1e-9))) if cap > 0 else 1


def keep(need_rpm: float, ready_arriving: int, cap_arriving: float, cap_leaving: float) -> int:
    """Replicas the leaving side keeps: what the arriving side's ready capacity does not cover."""
    uncovered = max(0.0, need_rpm - ready_arriving * cap_arriving)
    return int(math.ceil(uncovered / cap_leaving - 1e-9)) if cap_leaving > 0 else 0


def canary_count(cfg: SwitchConfig, need_rpm: float, old: str, new: str, fallback_cap: float = 1.0) -> int:
    """The canary's target replicas.  Routed by weight, enough to serve ``canary_share`` of the need at
    the target's capacity (the route sends it that share, whatever the count).  Routed by round robin
    (each ready replica an equal share of requests), so many that beside the old side's whole need
    they get ``canary_share`` of the requests; at least one, so a small fleet's canary gets more
    (1 of 2 replicas: 50%; the decision says the share it really gets).  At most the target's whole
    need (all of it at a share of 1)."""
    ca, ct, s = cfg.capacity_of(old, fallback_cap), cfg.capacity_of(new, fallback_cap), cfg.canary_share
    target = whole(need_rpm, ct)
    if s >= 1.0:
        return target
    if cfg.routing == "weights":
        return min(target, whole(s * need_rpm, ct))
    return min(target, max(1, int(round(s * whole(need_rpm, ca) / (1.0 - s)))))


def canary_request_share(cfg: SwitchConfig, need_rpm: float, old: str, new: str, fallback_cap: float = 1.0) -> float:
    """The share of requests the canary gets as planned: its weight, or under round robin its share of
    the replicas beside what the old side keeps."""
    if cfg.routing == "weights" or cfg.canary_share >= 1.0:
        return cfg.canary_share
    n = canary_count(cfg, need_rpm, old, new, fallback_cap)
    kept = max(0, int(math.ceil((1.0 - cfg.canary_share) * need_rpm / cfg.capacity_of(old, fallback_cap) - 1e-9)))
    return n / (n + kept) if n + kept else 1.0


def route_weights(cfg: SwitchConfig, st: SwitchState, ready: Mapping[str, int]) -> dict[str, int]:
    """A weighted route's backend weights (percent) in ``st``'s phase: all to the active profile, the
    canary its share, the move and the rollback in proportion to each side's ready capacity, the
    settle all to the target."""
    old, new = st.active_profile or cfg.default_profile, st.target_profile
    if not new or st.phase in (SwitchPhase.STEADY, SwitchPhase.PAUSED, SwitchPhase.PREWARM):
        return {old: 100, **({new: 0} if new else {})}
    if st.phase is SwitchPhase.CANARY:
        s = int(round(100 * cfg.canary_share))
        return {old: 100 - s, new: s}
    if st.phase is SwitchPhase.SETTLE:
        return {old: 0, new: 100}
    cap = {p: ready.get(p, 0) * cfg.capacity_of(p, 1.0) for p in (old, new)}
    total = sum(cap.values())
    if total <= 0:
        return {old: 100, new: 0}
    w_new = int(round(100 * cap[new] / total))
    return {old: 100 - w_new, new: w_new}


def request_shares(cfg: SwitchConfig, st: Optional[SwitchState], ready: Mapping[str, int]) -> dict[str, float]:
    """Each profile's share of the requests, where the traffic is routed: by the route's weights over the
    profiles with a ready replica, or by round robin over the ready replicas (issue 42)."""
    live = {p: n for p, n in ready.items() if n > 0}
    if cfg.routing == "weights" and st is not None:
        w = {p: x for p, x in route_weights(cfg, st, ready).items() if live.get(p)}
        if sum(w.values()) > 0:
            return {p: x / sum(w.values()) for p, x in w.items() if x > 0}
    total = sum(live.values())
    return {p: n / total for p, n in live.items()} if total else {}


def ready_by_profile(instances: tuple[Instance, ...], active: str) -> dict[str, int]:
    """Ready instances per profile (an untagged instance runs the active profile)."""
    out: dict[str, int] = {}
    for i in instances:
        if i.state.ready:
            p = i.profile or active
            out[p] = out.get(p, 0) + 1
    return out


def split(cfg: SwitchConfig, st: SwitchState, need_rpm: Optional[float], ready: Mapping[str, int],
          fallback_cap: float = 1.0) -> Replicas:
    """Replicas per profile for ``st``'s phase (empty outside a switch): old first, target second,
    both together within ``cfg.min_replicas`` and ``cfg.max_replicas``."""
    old, new = st.active_profile, st.target_profile
    if st.phase in (SwitchPhase.STEADY, SwitchPhase.PAUSED) or not new or need_rpm is None:
        return ()
    ca, ct = cfg.capacity_of(old, fallback_cap), cfg.capacity_of(new, fallback_cap)
    target = whole(need_rpm, ct)
    if st.phase is SwitchPhase.PREWARM:       # the old side untouched; the canary's targets boot
        return within_bounds(cfg, (old, whole(need_rpm, ca)),
                             (new, canary_count(cfg, need_rpm, old, new, fallback_cap)), old)
    left = keep(need_rpm, ready.get(new, 0), ct, ca)
    if st.phase is SwitchPhase.CANARY:        # the old side gives up the canary share, if covered
        kept = max(0, int(math.ceil((1.0 - cfg.canary_share) * need_rpm / ca - 1e-9)))
        return within_bounds(cfg, (old, max(kept, left)),
                             (new, canary_count(cfg, need_rpm, old, new, fallback_cap)), old)
    if st.phase in (SwitchPhase.MOVE, SwitchPhase.SETTLE):
        return within_bounds(cfg, (old, left), (new, target), new)
    back = keep(need_rpm, ready.get(old, 0), ca, ct)   # ROLLBACK: the old side first
    return within_bounds(cfg, (old, whole(need_rpm, ca)), (new, back), old)


def within_bounds(cfg: SwitchConfig, first: tuple[str, int], second: tuple[str, int], onto: str) -> Replicas:
    """The two sides within the deployment's ``max_replicas`` (:func:`within_max`) and at least its
    ``min_replicas``: a shortfall goes to ``onto``, the profile the fleet ends the phase on, so the
    floor is never met by replicas the next phase stops (issue 41: a rollback at min = max = 3 asked
    for day 2, night 0, and the next tick cold-started the third).  min <= max, so both hold."""
    a, b = within_max(cfg, first, second)
    short = cfg.min_replicas - a[1] - b[1]
    if short <= 0:
        return a, b
    return ((a[0], a[1] + short), b) if onto == a[0] else (a, (b[0], b[1] + short))


def within_max(cfg: SwitchConfig, first: tuple[str, int], second: tuple[str, int]) -> Replicas:
    """The two sides within the deployment's ``max_replicas``: the side that serves now (``first``)
    keeps its count up to the bound, the other gets the headroom left (issue 31: a switch provisioned
    12 instances against a max of 9).  The switch then moves as fast as that headroom allows: each
    replica of the arriving side that becomes ready lets the leaving side shrink."""
    cap = cfg.max_replicas
    if cap is None or first[1] + second[1] <= cap:
        return first, second
    kept = min(first[1], cap)
    return (first[0], kept), (second[0], max(0, cap - kept))


ROLLING = (SwitchPhase.CANARY, SwitchPhase.MOVE, SwitchPhase.ROLLBACK)


def single_workload_replicas(dec: SwitchDecision, current: int) -> Optional[int]:
    """``spec.replicas`` of a single workload after ``dec`` (None: leave it as it is).

    One workload runs one pod template, so its count is that of the profile it rolls onto (the
    target; the old profile during a rollback).  While the rollout runs the count never falls:
    ``maxUnavailable: 0`` keeps *pods* ready, not capacity, so cutting to the count of a target
    that serves more per replica would retire old pods before the new ones cover the need.  Once
    the target's ready replicas cover the need (settle, or the switch's end) it is the target's
    count.  Nothing is set while pre-warming (no second profile can run beside the first)."""
    if dec.phase is SwitchPhase.PREWARM or dec.action is SwitchAction.CANCEL or not dec.replicas:
        return None
    onto = dec.from_profile if dec.phase is SwitchPhase.ROLLBACK else dec.to_profile
    n = dict(dec.replicas).get(onto)
    if n is None:
        return None
    if dec.phase is SwitchPhase.CANARY:   # the whole workload rolls now: the target's whole need
        n = max(int(n), dec.target_need)
    return max(int(current), int(n)) if dec.phase in ROLLING else int(n)


def replicas_of(cfg: SwitchConfig, before: SwitchState, after: SwitchState, need_rpm: Optional[float],
                ready: Mapping[str, int]) -> Replicas:
    """Replicas per profile after a tick: the phase's split, or the end of a switch (the profile
    that stays keeps the whole need, the other goes to zero)."""
    if after.phase in IN_SWITCH:
        return split(cfg, after, need_rpm if need_rpm is not None else after.need_rpm, ready)
    if before.phase not in IN_SWITCH or not before.target_profile:
        return ()
    need = need_rpm if need_rpm is not None else before.need_rpm
    stays = after.active_profile
    gone = before.target_profile if stays == before.active_profile else before.active_profile
    n = None if need is None else max(whole(need, cfg.capacity_of(stays, 1.0)), cfg.min_replicas)
    return ((gone, 0),) if n is None else ((gone, 0), (stays, min(n, cfg.max_replicas or n)))


def sized(cfg: SwitchConfig, dec: SwitchDecision, before: SwitchState, after: SwitchState,
          need_rpm: Optional[float], ready: Mapping[str, int]) -> SwitchDecision:
    """``dec`` with its replicas per profile and the target's whole need for ``need_rpm``."""
    target = after.target_profile if after.phase in IN_SWITCH else ""
    full = whole(need_rpm, cfg.capacity_of(target, 1.0)) if target and need_rpm is not None else 0
    moving = after.phase in IN_SWITCH or before.phase in IN_SWITCH
    weights = tuple(route_weights(cfg, after, ready).items()) if cfg.routing == "weights" and moving else ()
    return replace(dec, replicas=replicas_of(cfg, before, after, need_rpm, ready), target_need=full, weights=weights)
