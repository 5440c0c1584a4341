"""Tiered responses to alerts (Alertmanager notifications), as pure decisions.

One *episode* per alert group (Alertmanager's group key): opened by its first firing
notification, resolved by a resolved one.  The alerts' fingerprints (Alertmanager's hash of
each alert's labels) say what a notification carries: the same fingerprints with the same
statuses as the last one is a re-delivery; a new fingerprint is an alert joining the group.
Each tier's responses are decided once per episode; a tier that did not clear the alert
within its window escalates to the next:

- primary (a signal past its threshold): diagnostic report, max-num-seqs +-10% as a derived profile
- medium (users affected): a standby instance, roll back to the last stable profile
- severe (service unavailable): fail over to the DR target and call the redeploy webhook

Notifications arrive more than once (Alertmanager retries, repeats, several receivers) and
out of order; a notification that changes nothing decides nothing, and says why.  While the
deployment is paused or in forecast-only mode, responses are decided and recorded as not
applied, and the episode counts them as done (nothing runs later by surprise).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from enum import IntEnum

from warmup.core.reasons import Reason, ReasonCode


class Tier(IntEnum):
    NONE = 0
    PRIMARY = 1
    MEDIUM = 2
    SEVERE = 3

    @classmethod
    def parse(cls, label: str | None) -> "Tier":
        """The tier of an alert's ``tier`` label; an alert without one is primary."""
        try:
            return cls[(label or "primary").strip().upper()]
        except KeyError:
            raise ValueError(f"tier label {label!r} is not one of primary, medium, severe") from None


RESPONSES: dict[Tier, tuple[str, ...]] = {
    Tier.PRIMARY: ("adjust",),
    Tier.MEDIUM: ("standby", "rollback"),
    Tier.SEVERE: ("failover",),
}


@dataclass(frozen=True)
class AlertNote:
    """One Alertmanager notification, reduced to what decides: group, status, highest tier."""

    group_key: str
    deployment: str
    status: str                      # firing | resolved
    tier: Tier
    alertnames: tuple[str, ...]
    starts_at: datetime              # earliest startsAt of the group's alerts
    ends_at: datetime | None = None  # latest endsAt, for a resolved group
    adjust: str = ""                 # up | down: which way a primary adjustment moves max-num-seqs
    received_at: datetime | None = None  # when the receiver got it (None: the decision's ``now``)
    alerts: tuple[tuple[str, str], ...] = ()  # (fingerprint, status) of each alert in it


@dataclass(frozen=True)
class Episode:
    group_key: str
    deployment: str
    starts_at: datetime
    opened: datetime
    tier: Tier = Tier.NONE           # highest tier whose responses were decided
    tier_at: datetime | None = None  # when they were
    done: tuple[str, ...] = ()       # "tier:response" decided (applied or recorded as not applied)
    alertnames: tuple[str, ...] = ()
    resolved_at: datetime | None = None
    fingerprints: tuple[str, ...] = ()           # every alert seen in the episode, in the order first seen
    last_alerts: tuple[tuple[str, str], ...] = ()  # (fingerprint, status) of the last notification that
    #                                                changed the episode: what a re-delivery repeats


@dataclass(frozen=True)
class AlertConfig:
    """How long a tier's responses get to clear the alert before the next tier's run."""

    windows: dict[Tier, timedelta] = field(default_factory=lambda: {
        Tier.PRIMARY: timedelta(minutes=10), Tier.MEDIUM: timedelta(minutes=15)})
    # A firing that repeats a resolved episode's alert (its startsAt is older than the resolution)
    # received within this long of the resolution is a late copy; received later, the alert fires
    # again (Alertmanager resolves an alert whose endsAt passed when Prometheus's resend comes late,
    # then merges the next resend into it, old startsAt and all) and the episode reopens.
    late_copy: timedelta = timedelta(seconds=30)
    # A new firing this soon after the group resolved continues its episode (a flapping alert):
    # its responses are not decided again, and its tier's window goes on.
    reopen_within: timedelta = timedelta(minutes=10)


@dataclass(frozen=True)
class Response:
    kind: str        # report | adjust | standby | rollback | failover
    tier: Tier
    apply: bool      # False: paused or forecast-only; recorded, not run
    why_not: str = ""


@dataclass(frozen=True)
class AlertDecision:
    responses: tuple[Response, ...]
    episode: Episode | None          # the episode to store (None: nothing to store)
    reason: Reason
    tier: Tier = Tier.NONE
    reopened: bool = False           # a premature resolution undone: what it released is due again


def decide_alert(note: AlertNote, episode: Episode | None, cfg: AlertConfig, now: datetime,
                 blocked: str | None = None) -> AlertDecision:
    """The responses ``note`` calls for, given the stored ``episode`` of its group (or None).

    ``blocked``: why actions may not run now (paused, forecast-only), or None."""
    stale = _stale(note, episode, cfg.late_copy, note.received_at or now)
    if stale is not None:
        return AlertDecision((), None, stale, episode.tier if episode else Tier.NONE)
    if note.status == "resolved":
        return _resolve(note, episode, now)
    reopened = _reopened(note, episode, cfg.reopen_within, note.received_at or now)
    if reopened is not None:
        resolved_at, episode = episode.resolved_at, reopened
    elif episode is None or episode.resolved_at is not None:  # first notification, or a new episode
        episode = Episode(note.group_key, note.deployment, note.starts_at, now)
    tier, reason = _target_tier(note, episode, cfg, now)
    if reopened is not None and tier <= episode.tier:
        reason = _reopen_reason(reopened, resolved_at, note, reason)
    if tier <= episode.tier:  # nothing to run; store the episode if it reopened or the note told news
        seen = _seen(episode, note)
        store = reopened is not None or seen != episode
        return AlertDecision((), seen if store else None, reason, episode.tier, reopened is not None)
    return replace(_respond(episode, tier, reason, note, now, blocked), reopened=reopened is not None)


def escalation_due(ep: Episode, cfg: AlertConfig, now: datetime) -> bool:
    """Whether ``ep`` is open at a tier whose window has passed: a periodic check then re-decides
    it (:func:`still_firing`), so escalation does not wait for Alertmanager to repeat the group."""
    if ep.resolved_at is not None or ep.tier in (Tier.NONE, Tier.SEVERE):
        return False
    return now - (ep.tier_at or ep.opened) >= _window(cfg, ep.tier)


def still_firing(ep: Episode, now: datetime) -> AlertNote:
    """The notification a repeat of ``ep``'s group would be: its alerts firing as last seen, at its
    tier.  An open episode means no resolution came, so its alerts are taken to fire on."""
    return AlertNote(ep.group_key, ep.deployment, "firing", ep.tier, ep.alertnames, ep.starts_at,
                     received_at=now, alerts=ep.last_alerts)


def _reopened(note: AlertNote, ep: Episode | None, within: timedelta, seen: datetime) -> Episode | None:
    """The resolved ``ep`` open again, or None: when ``note`` is its alert still firing (started
    before the resolution; not stale, so received well after it), or a new firing within
    ``within`` of the resolution (flapping)."""
    if ep is None or ep.resolved_at is None:
        return None
    if note.starts_at < ep.resolved_at or seen - ep.resolved_at <= within:
        return replace(ep, resolved_at=None)
    return None


def _reopen_reason(ep: Episode, resolved_at: datetime, note: AlertNote, then: Reason) -> Reason:
    names = ", ".join(note.alertnames)
    why = (f"fires again with its startsAt {note.starts_at:%H:%M:%S}: the resolution at {resolved_at:%H:%M:%S} "
           "was premature" if note.starts_at < resolved_at else
           f"fires again since {note.starts_at:%H:%M:%S}, soon after the group resolved at {resolved_at:%H:%M:%S}: "
           "flapping")
    return Reason(ReasonCode.ALERT_REOPENED, f"{names} {why}; the episode goes on at tier "
                                             f"{ep.tier.name.lower()} ({then.text})")


def _stale(note: AlertNote, ep: Episode | None, late_copy: timedelta, seen: datetime) -> Reason | None:
    """Why ``note`` tells nothing new about the stored episode, or None.  ``seen``: when it arrived."""
    if ep is None:
        return None
    if ep.resolved_at is None:
        if note.status == "resolved" and note.ends_at is not None and note.ends_at < ep.starts_at:
            return Reason(ReasonCode.ALERT_STALE, f"resolution at {note.ends_at:%H:%M:%S} of an earlier episode; "
                                                  f"this one fires since {ep.starts_at:%H:%M:%S}")
        return None
    if note.status == "resolved":
        return Reason(ReasonCode.ALERT_DUPLICATE, f"group already resolved at {ep.resolved_at:%H:%M:%S}")
    if note.starts_at < ep.resolved_at and seen - ep.resolved_at <= late_copy:
        return Reason(ReasonCode.ALERT_STALE, f"firing since {note.starts_at:%H:%M:%S}, received "
                                              f"{_mins(seen - ep.resolved_at)} after the group resolved at "
                                              f"{ep.resolved_at:%H:%M:%S} (within {_mins(late_copy)}): a late copy "
                                              "of an older notification")
    return None


def _resolve(note: AlertNote, ep: Episode | None, now: datetime) -> AlertDecision:
    at = note.ends_at or now
    if ep is None:
        ep = Episode(note.group_key, note.deployment, note.starts_at, at)
        text = "resolved before any firing notification reached warmcast: nothing was done"
    else:
        text = (f"resolved after {_mins(at - ep.opened)} at tier {ep.tier.name.lower()} "
                f"({', '.join(ep.done) or 'no response'})")
    return AlertDecision((), replace(_seen(ep, note), resolved_at=at), Reason(ReasonCode.ALERT_RESOLVED, text),
                         ep.tier)


def _target_tier(note: AlertNote, ep: Episode, cfg: AlertConfig, now: datetime) -> tuple[Tier, Reason]:
    """The tier the episode should be at now: the notification's, or one above the handled tier
    when that tier's window passed with the alert still firing."""
    names = ", ".join(note.alertnames)
    if ep.tier == Tier.NONE:
        return note.tier, Reason(ReasonCode.ALERT_OPENED, f"{names} firing at tier {note.tier.name.lower()}")
    if note.tier > ep.tier:
        return note.tier, Reason(ReasonCode.ALERT_RAISED, f"{names} now at tier {note.tier.name.lower()} "
                                                          f"(was {ep.tier.name.lower()})")
    if ep.tier == Tier.SEVERE:
        return ep.tier, Reason(ReasonCode.ALERT_TOP, "still firing at the severe tier; every response was decided")
    window = _window(cfg, ep.tier)
    since = now - (ep.tier_at or ep.opened)
    if since >= window:
        nxt = Tier(ep.tier + 1)
        return nxt, Reason(ReasonCode.ALERT_ESCALATED, f"{ep.tier.name.lower()} responses did not clear {names} "
                                                       f"within {_mins(window)} ({_mins(since)}): tier {nxt.name.lower()}")
    if note.starts_at < ep.starts_at:
        return ep.tier, Reason(ReasonCode.ALERT_STALE, "an older notification of the open episode")
    return ep.tier, _handled(note, ep, since, window)


def _window(cfg: AlertConfig, tier: Tier) -> timedelta:
    return cfg.windows.get(tier, timedelta(minutes=10))


def _alerts(note: AlertNote) -> tuple[tuple[str, str], ...]:
    """The note's (fingerprint, status) pairs in one order, so two deliveries compare equal."""
    return tuple(sorted(set(note.alerts)))


def _handled(note: AlertNote, ep: Episode, since: timedelta, window: timedelta) -> Reason:
    """Why a firing within its tier's window runs nothing: a re-delivery (the same fingerprints with
    the same statuses as the last notification), or news that changes no tier (an alert joining the
    group, an alert resolving while others fire)."""
    handled = f"tier {ep.tier.name.lower()} handled {_mins(since)} ago; window {_mins(window)}"
    got = _alerts(note)
    if not got or not all(f for f, _ in got):  # no fingerprints to compare: only the time tells
        return Reason(ReasonCode.ALERT_WAITING if since > timedelta(0) else ReasonCode.ALERT_DUPLICATE, handled)
    if got == ep.last_alerts:
        return Reason(ReasonCode.ALERT_DUPLICATE, f"the same {len(got)} alert(s) by fingerprint with the same "
                                                  f"statuses as the last notification: a re-delivery; {handled}")
    new = [f for f, _ in got if f not in ep.fingerprints]
    what = (f"{len(new)} new alert(s) in the group (fingerprint {', '.join(new)})" if new else
            "statuses changed: " + ", ".join(f"{f} {s}" for f, s in got if (f, s) not in ep.last_alerts))
    return Reason(ReasonCode.ALERT_WAITING, f"{what}; {handled}")


def _respond(ep: Episode, tier: Tier, reason: Reason, note: AlertNote, now: datetime,
             blocked: str | None) -> AlertDecision:
    """The responses of ``tier`` not decided yet (plus the report when the episode opens)."""
    kinds = (("report",) if not ep.done else ()) + RESPONSES[tier]
    todo = [k for k in kinds if f"{tier.name.lower()}:{k}" not in ep.done]
    out = tuple(Response(k, tier, blocked is None, blocked or "") for k in todo)
    done = ep.done + tuple(f"{tier.name.lower()}:{k}" for k in todo)
    new = replace(_seen(ep, note), tier=tier, tier_at=now, done=done)
    if blocked:
        reason = Reason(reason.code, f"{reason.text}; not applied: {blocked}")
    return AlertDecision(out, new, reason, tier)


def _seen(ep: Episode, note: AlertNote) -> Episode:
    """``ep`` with what ``note`` shows of its group: alert names and fingerprints added (in the
    order first seen), its statuses kept as the last notification's (a note without fingerprints
    keeps the ones before)."""
    names = tuple(dict.fromkeys(ep.alertnames + note.alertnames))
    got = _alerts(note)
    prints = tuple(dict.fromkeys(ep.fingerprints + tuple(f for f, _ in got if f)))
    return replace(ep, alertnames=names, fingerprints=prints, last_alerts=got or ep.last_alerts)


def _mins(d: timedelta) -> str:
    s = d.total_seconds()
    return f"{s:.0f} s" if s < 120 else f"{s / 60:.1f} min"


# --------------------------------------------------------------------------- response parameters

def adjusted_seqs(current: int, direction: str, share: float = 0.1) -> int:
    """max-num-seqs moved by ``share`` (at least one sequence) up or down, never below 1."""
    step = max(1, round(current * share))
    return current + step if direction == "up" else max(1, current - step)


def variant_name(profile: str, seqs: int) -> str:
    """The derived profile's name: the base profile's with the new max-num-seqs (day-seqs18)."""
    root = profile.split("-seqs")[0]
    return f"{root}-seqs{seqs}"


@dataclass(frozen=True)
class ProfileSpell:
    """A profile the fleet ran from ``start`` to ``end`` (None: still running)."""

    profile: str
    start: datetime
    end: datetime | None = None


def last_stable_profile(spells: tuple[ProfileSpell, ...], firing: tuple[tuple[datetime, datetime | None], ...],
                        settle: timedelta, now: datetime, current: str) -> tuple[str | None, str]:
    """The newest profile other than ``current`` that ran ``settle`` long with no alert firing
    (its SLO held), and why; None when there is none."""
    for sp in sorted(spells, key=lambda s: s.start, reverse=True):
        if sp.profile == current:
            continue
        end = sp.end or now
        quiet = end - sp.start
        for a, b in firing:
            if a < end and (b or now) > sp.start:  # an alert overlapped the spell
                quiet = min(quiet, max(a - sp.start, end - (b or now)))
        if quiet >= settle:
            return sp.profile, f"{sp.profile} held its SLO for {_mins(quiet)} (settle window {_mins(settle)})"
    return None, f"no profile other than {current} held its SLO for a {_mins(settle)} settle window"
