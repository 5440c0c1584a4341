"""A deployment's policy state in Redis (cooldowns, stabilisation history, switch machine,
warmup state), the short lease every decision takes around read-decide-write of it, and
whether a decision may be applied now."""
from __future__ import annotations

import logging
import time
from dataclasses import replace
from typing import Any, ContextManager

from warmcast.state import StateStore
from warmup.core import PolicyState
from workers.context import Ctx
from workers.locks import Lease, lease
from workers.serde import policy_state_from_json, to_json

log = logging.getLogger(__name__)


def load(state: StateStore, dep: str) -> tuple[PolicyState, dict[str, Any]]:
    """(policy state, the whole stored document) of ``dep``; the initial state when none is stored."""
    doc = state.get("policy", dep) or {}
    return policy_state_from_json(doc.get("state")), doc


def document(ps: PolicyState, old: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """The document to store for ``ps``, keeping the other keys of ``old`` (manual profile ...)."""
    return {**old, **extra, "state": to_json(ps), "updated": time.time()}


def note_lost_state(ctx: Ctx, dep: str, pdoc: dict[str, Any]) -> None:
    """Audit a policy state that this worker had seen and Redis no longer has (restarted empty, a
    failover to an empty replica, a flush): the decision goes on from the defaults and says so. Every
    job that reads and stores the policy state calls it (the tick, the scrape's warmup fast path), so
    whichever comes first after the loss writes the audit entry."""
    seen = ("policy-seen", dep)
    if pdoc:
        ctx.cache[seen] = True
    elif ctx.cache.pop(seen, False):
        ctx.state.audit(dep, "state", "policy state lost", "the deployment's policy state (cooldowns, stabilisation "
                        "history, switch machine, warmup) was gone from Redis; this decision starts from the defaults "
                        "and stores them again", False, "re-created")
        log.warning("%s: policy state missing from Redis; re-created from the defaults", dep)


def note_stored(ctx: Ctx, dep: str) -> None:
    """This worker has seen ``dep``'s policy state stored (so its absence later is a loss)."""
    ctx.cache[("policy-seen", dep)] = True


def without_scale_action(old: PolicyState, new: PolicyState) -> PolicyState:
    """``new`` with the cooldown bookkeeping of ``old``: for a scale decision that was not applied
    (forecast-only mode, paused), so the cooldowns do not think an action happened."""
    return replace(new, last_scale_up=old.last_scale_up, last_scale_down=old.last_scale_down,
                   scale_actions=old.scale_actions)


def locked(ctx: Ctx, dep: str) -> ContextManager[Lease]:
    """The short lease around read-decide-write of a deployment's policy state (all decision jobs)."""
    return lease(ctx.r, ctx.prefix, "policy", dep, ctx.options.lease_s, wait_s=5.0)


def why_not_applied(ctx: Ctx, dep: str) -> str | None:
    """Why a decision is recorded but not applied now (forecast-only mode, paused), or None."""
    if ctx.settings.dry_run:
        return "forecast-only mode (dry_run): decision recorded, not applied"
    paused = ctx.state.paused(dep)
    if paused:
        return f"automatic actions paused by {paused.get('by', '?')}: {paused.get('reason', '')}".rstrip(": ")
    return None
