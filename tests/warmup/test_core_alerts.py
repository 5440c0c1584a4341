"""The pure tier decisions of warmup.core.alerts: every tier, escalation, duplicates, reordering,
and the guard (paused / forecast-only: recorded, not applied)."""
from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta

import pytest

from warmup.core.alerts import (AlertConfig, AlertNote, ProfileSpell, Tier, adjusted_seqs, decide_alert,
                                last_stable_profile, variant_name)
from warmup.core.reasons import ReasonCode

T0 = datetime(2026, 1, 5, 12, 0, 0)
CFG = AlertConfig(windows={Tier.PRIMARY: timedelta(minutes=10), Tier.MEDIUM: timedelta(minutes=15)})


def note(status: str = "firing", tier: Tier = Tier.PRIMARY, starts: datetime = T0, ends: datetime | None = None,
         key: str = "{}:{deployment=\"d\"}", names: tuple[str, ...] = ("WarmcastTTFTHigh",)) -> AlertNote:
    return AlertNote(key, "d", status, tier, names, starts, ends, "up")


def kinds(dec) -> list[tuple[str, str]]:
    return [(r.tier.name.lower(), r.kind) for r in dec.responses]


def run(notes_at: list[tuple[AlertNote, datetime]], blocked: str | None = None):
    """Feed notifications in order, storing each decision's episode as the receiver does."""
    ep, out = None, []
    for n, at in notes_at:
        dec = decide_alert(n, ep, CFG, at, blocked)
        ep = dec.episode or ep
        out.append(dec)
    return out, ep


def test_primary_opens_with_report_and_adjustment():
    dec = decide_alert(note(), None, CFG, T0 + timedelta(seconds=5))
    assert kinds(dec) == [("primary", "report"), ("primary", "adjust")]
    assert all(r.apply for r in dec.responses)
    assert dec.reason.code == ReasonCode.ALERT_OPENED and "WarmcastTTFTHigh" in dec.reason.text
    assert dec.episode.tier == Tier.PRIMARY and dec.episode.done == ("primary:report", "primary:adjust")


def test_medium_opens_with_report_standby_and_rollback():
    dec = decide_alert(note(tier=Tier.MEDIUM), None, CFG, T0)
    assert kinds(dec) == [("medium", "report"), ("medium", "standby"), ("medium", "rollback")]


def test_severe_opens_with_report_and_failover():
    dec = decide_alert(note(tier=Tier.SEVERE), None, CFG, T0)
    assert kinds(dec) == [("severe", "report"), ("severe", "failover")]


def test_duplicate_and_repeated_firing_within_window_do_nothing():
    decs, ep = run([(note(), T0), (note(), T0), (note(), T0 + timedelta(minutes=4))])
    assert [len(d.responses) for d in decs] == [2, 0, 0]
    assert decs[1].reason.code == ReasonCode.ALERT_DUPLICATE and decs[2].reason.code == ReasonCode.ALERT_WAITING
    assert decs[1].episode is None and decs[2].episode is None  # nothing new to store
    assert ep.tier == Tier.PRIMARY


def test_escalates_to_medium_when_primary_did_not_clear_within_window_then_severe():
    decs, ep = run([(note(), T0), (note(), T0 + timedelta(minutes=10)), (note(), T0 + timedelta(minutes=11)),
                    (note(), T0 + timedelta(minutes=25))])
    assert kinds(decs[1]) == [("medium", "standby"), ("medium", "rollback")]  # no second report
    assert decs[1].reason.code == ReasonCode.ALERT_ESCALATED and "did not clear" in decs[1].reason.text
    assert decs[2].responses == ()  # the medium window starts at the escalation
    assert kinds(decs[3]) == [("severe", "failover")]
    top = decide_alert(note(), ep, CFG, T0 + timedelta(hours=2))
    assert top.responses == () and top.reason.code == ReasonCode.ALERT_TOP


def test_a_higher_tier_alert_in_the_group_raises_at_once():
    decs, ep = run([(note(), T0), (note(tier=Tier.MEDIUM, names=("WarmcastTTFTUsersAffected",)),
                                   T0 + timedelta(minutes=1))])
    assert kinds(decs[1]) == [("medium", "standby"), ("medium", "rollback")]
    assert decs[1].reason.code == ReasonCode.ALERT_RAISED
    assert ep.alertnames == ("WarmcastTTFTHigh", "WarmcastTTFTUsersAffected")


def test_resolved_records_the_episode_and_late_copies_change_nothing():
    end = T0 + timedelta(minutes=3)
    decs, ep = run([(note(), T0), (note("resolved", ends=end), end + timedelta(seconds=2)),
                    (note("resolved", ends=end), end + timedelta(seconds=9)),   # retried delivery
                    (note(), end + timedelta(seconds=10))])                     # reordered: an old firing copy
    assert decs[1].reason.code == ReasonCode.ALERT_RESOLVED and ep.resolved_at == end
    assert "primary:report, primary:adjust" in decs[1].reason.text
    assert decs[2].reason.code == ReasonCode.ALERT_DUPLICATE and decs[2].responses == ()
    assert decs[3].reason.code == ReasonCode.ALERT_STALE and decs[3].responses == ()


def test_a_new_firing_after_resolution_opens_a_new_episode():
    end = T0 + timedelta(minutes=3)
    later = T0 + timedelta(minutes=30)
    decs, ep = run([(note(), T0), (note("resolved", ends=end), end), (note(starts=later), later)])
    assert kinds(decs[2]) == [("primary", "report"), ("primary", "adjust")]
    assert ep.resolved_at is None and ep.starts_at == later


def test_a_premature_resolution_reopens_the_episode_when_the_alert_fires_on():
    """Seen on CI: Prometheus's resend came late, Alertmanager resolved the alert when its endsAt
    passed, then merged the next resend into it, so every later firing carried the old startsAt.
    Within the late-copy window such a firing is a late copy; after it, the same episode reopens
    (nothing reruns) and escalates when its window passes, as if never resolved."""
    end = T0 + timedelta(minutes=1)
    decs, ep = run([(note(), T0), (note("resolved", ends=end), end + timedelta(seconds=2)),
                    (note(), end + timedelta(seconds=10)),        # within 30 s: a late copy
                    (note(), end + timedelta(seconds=40)),        # fires on: reopened, primary done already
                    (note(), end + timedelta(seconds=50)),        # open again: waiting, nothing stored
                    (note(), T0 + timedelta(minutes=10))])        # the primary window passed
    assert [len(d.responses) for d in decs] == [2, 0, 0, 0, 0, 2]
    assert decs[2].reason.code == ReasonCode.ALERT_STALE and "within 30 s" in decs[2].reason.text
    assert decs[3].reason.code == ReasonCode.ALERT_REOPENED and "premature" in decs[3].reason.text
    assert decs[3].episode.resolved_at is None and decs[3].episode.done == ("primary:report", "primary:adjust")
    assert decs[4].reason.code == ReasonCode.ALERT_WAITING and decs[4].episode is None
    assert kinds(decs[5]) == [("medium", "standby"), ("medium", "rollback")]
    assert decs[5].reason.code == ReasonCode.ALERT_ESCALATED
    assert ep.opened == T0 and ep.starts_at == T0 and ep.resolved_at is None


def test_a_flapping_alert_continues_its_episode_and_a_later_one_opens_a_new_one():
    """Seen on CI: the TTFT alert resolved for a few seconds under steady overload and fired again
    with a new startsAt; a second primary report and +10% adjustment would only compound."""
    end = T0 + timedelta(minutes=1)
    again = end + timedelta(seconds=20)
    decs, ep = run([(note(), T0), (note("resolved", ends=end), end + timedelta(seconds=2)),
                    (note(starts=again), again + timedelta(seconds=3))])
    assert decs[2].responses == () and decs[2].reason.code == ReasonCode.ALERT_REOPENED
    assert "flapping" in decs[2].reason.text and ep.resolved_at is None and ep.opened == T0
    end2 = T0 + timedelta(minutes=5)
    later = end2 + timedelta(minutes=11)  # past the 10-minute reopen window: a new episode
    decs, ep = run([(note(), T0), (note("resolved", ends=end2), end2), (note(starts=later), later)])
    assert kinds(decs[2]) == [("primary", "report"), ("primary", "adjust")] and ep.opened == later


def test_the_late_copy_window_counts_from_receipt_not_from_processing():
    """A backlog processed late (workers down) must not turn late copies into reopenings."""
    end = T0 + timedelta(minutes=1)
    copy = replace(note(), received_at=end + timedelta(seconds=5))
    decs, _ = run([(note(), T0), (note("resolved", ends=end), end), (copy, end + timedelta(minutes=20))])
    assert decs[2].reason.code == ReasonCode.ALERT_STALE and decs[2].responses == ()
    tight = decide_alert(note(), decs[1].episode, replace(CFG, late_copy=timedelta(0)), end + timedelta(seconds=1))
    assert tight.reason.code == ReasonCode.ALERT_REOPENED  # a zero window trusts every firing


def test_resolved_arriving_before_its_firing_leaves_the_firing_stale():
    end = T0 + timedelta(minutes=1)
    decs, _ = run([(note("resolved", ends=end), end), (note(), end + timedelta(seconds=1))])
    assert decs[0].reason.code == ReasonCode.ALERT_RESOLVED and "before any firing" in decs[0].reason.text
    assert decs[1].responses == () and decs[1].reason.code == ReasonCode.ALERT_STALE


@pytest.mark.parametrize("why", ["automatic actions paused by api: maintenance",
                                 "forecast-only mode (dry_run): decision recorded, not applied"])
def test_paused_or_dry_run_records_responses_as_not_applied_and_never_replays_them(why):
    decs, ep = run([(note(), T0)], blocked=why)
    assert kinds(decs[0]) == [("primary", "report"), ("primary", "adjust")]
    assert not any(r.apply for r in decs[0].responses) and all(r.why_not == why for r in decs[0].responses)
    assert "not applied" in decs[0].reason.text
    again = decide_alert(note(), ep, CFG, T0 + timedelta(minutes=1))  # resumed: nothing replays
    assert again.responses == ()


def test_unknown_tier_label_is_a_clear_error():
    with pytest.raises(ValueError, match="tier label 'critical'"):
        Tier.parse("critical")
    assert Tier.parse(None) == Tier.PRIMARY and Tier.parse("Severe") == Tier.SEVERE


def test_adjustment_is_ten_percent_at_least_one_and_named_after_its_base():
    assert adjusted_seqs(16, "up") == 18 and adjusted_seqs(16, "down") == 14
    assert adjusted_seqs(4, "up") == 5 and adjusted_seqs(1, "down") == 1
    assert variant_name("day", 18) == "day-seqs18" and variant_name("day-seqs18", 20) == "day-seqs20"


def test_last_stable_profile_skips_profiles_an_alert_overlapped():
    h = timedelta(hours=1)
    spells = (ProfileSpell("day", T0 - 5 * h, T0 - 2 * h), ProfileSpell("night", T0 - 2 * h, T0 - h),
              ProfileSpell("day-seqs18", T0 - h, None))
    quiet, why = last_stable_profile(spells, (), timedelta(minutes=30), T0, "day-seqs18")
    assert quiet == "night" and "held its SLO" in why
    firing = ((T0 - 2 * h + timedelta(minutes=5), T0 - h - timedelta(minutes=50)),)  # night was noisy
    assert last_stable_profile(spells, firing, timedelta(minutes=30), T0, "day-seqs18")[0] == "night"
    firing = ((T0 - 2 * h + timedelta(minutes=20), T0 - h - timedelta(minutes=20)),)
    assert last_stable_profile(spells, firing, timedelta(minutes=30), T0, "day-seqs18")[0] == "day"
    none, why = last_stable_profile(spells[2:], (), timedelta(minutes=30), T0, "day-seqs18")
    assert none is None and "no profile" in why


def test_a_late_resolution_of_the_previous_episode_does_not_close_the_new_one():
    end = T0 + timedelta(minutes=3)
    later = T0 + timedelta(minutes=30)
    decs, ep = run([(note(), T0), (note("resolved", ends=end), end), (note(starts=later), later),
                    (note("resolved", ends=end), later + timedelta(seconds=5))])  # a retried old delivery
    assert decs[3].reason.code == ReasonCode.ALERT_STALE and decs[3].episode is None
    assert ep.resolved_at is None and ep.starts_at == later


def test_an_alert_joining_the_group_is_recorded_without_running_anything():
    decs, ep = run([(note(names=("WarmcastQueueBuilding",)), T0),
                    (note(names=("WarmcastQueueBuilding", "WarmcastTTFTHigh")), T0 + timedelta(seconds=20)),
                    (note(names=("WarmcastQueueBuilding", "WarmcastTTFTHigh")), T0 + timedelta(seconds=25))])
    assert decs[1].responses == () and decs[1].episode.alertnames == ("WarmcastQueueBuilding", "WarmcastTTFTHigh")
    assert decs[2].episode is None  # nothing new: nothing to store
    assert ep.alertnames == ("WarmcastQueueBuilding", "WarmcastTTFTHigh") and ep.done == ("primary:report",
                                                                                          "primary:adjust")


def test_a_redelivery_is_told_by_fingerprints_and_statuses_and_news_is_recorded():
    """Episodes are keyed by the group key; the alerts' fingerprints say what a notification carries:
    the same fingerprints with the same statuses is a re-delivery, a new fingerprint an alert joining
    the group, a changed status news that runs nothing."""
    one = replace(note(), alerts=(("a1", "firing"),))
    two = replace(note(), alerts=(("b2", "firing"), ("a1", "firing")))  # another instance's alert, same name
    half = replace(note(), alerts=(("a1", "firing"), ("b2", "resolved")))
    decs, ep = run([(one, T0), (one, T0 + timedelta(minutes=4)), (two, T0 + timedelta(minutes=5)),
                    (two, T0 + timedelta(minutes=6)), (half, T0 + timedelta(minutes=7)),
                    (half, T0 + timedelta(minutes=10))])
    codes = [d.reason.code for d in decs]
    assert codes == [ReasonCode.ALERT_OPENED, ReasonCode.ALERT_DUPLICATE, ReasonCode.ALERT_WAITING,
                     ReasonCode.ALERT_DUPLICATE, ReasonCode.ALERT_WAITING, ReasonCode.ALERT_ESCALATED]
    assert "re-delivery" in decs[1].reason.text and decs[1].episode is None  # nothing new: nothing stored
    assert "1 new alert(s) in the group (fingerprint b2)" in decs[2].reason.text
    assert decs[2].responses == () and decs[2].episode.fingerprints == ("a1", "b2")
    assert "statuses changed: b2 resolved" in decs[4].reason.text and decs[4].responses == ()
    assert kinds(decs[5]) == [("medium", "standby"), ("medium", "rollback")]  # a repeat past the window
    assert ep.last_alerts == (("a1", "firing"), ("b2", "resolved")) and ep.alertnames == ("WarmcastTTFTHigh",)


def test_the_resolution_keeps_the_fingerprints_and_its_redelivery_is_a_duplicate():
    end = T0 + timedelta(minutes=3)
    gone = replace(note("resolved", ends=end), alerts=(("a1", "resolved"),))
    decs, ep = run([(replace(note(), alerts=(("a1", "firing"),)), T0), (gone, end), (gone, end + timedelta(seconds=5))])
    assert decs[1].reason.code == ReasonCode.ALERT_RESOLVED and ep.last_alerts == (("a1", "resolved"),)
    assert decs[2].reason.code == ReasonCode.ALERT_DUPLICATE and decs[2].episode is None


def test_an_open_episode_past_its_window_escalates_on_a_check_without_a_repeat():
    """The periodic check: only the first notification arrives; at ``now`` past the tier's window the
    same decision escalates, once; a resolved, severe or still-waiting episode is not due."""
    from warmup.core.alerts import escalation_due, still_firing

    first = decide_alert(replace(note(), alerts=(("a1", "firing"),)), None, CFG, T0)
    ep = first.episode
    assert not escalation_due(ep, CFG, T0 + timedelta(minutes=9, seconds=59))
    at = T0 + timedelta(minutes=10)
    assert escalation_due(ep, CFG, at)
    check = decide_alert(still_firing(ep, at), ep, CFG, at)
    assert check.reason.code == ReasonCode.ALERT_ESCALATED and kinds(check) == [("medium", "standby"),
                                                                               ("medium", "rollback")]
    ep = check.episode
    assert ep.tier == Tier.MEDIUM and ep.tier_at == at and not escalation_due(ep, CFG, at + timedelta(minutes=1))
    again = decide_alert(still_firing(ep, at), ep, CFG, at)  # a second check at the same time: nothing
    assert again.responses == () and again.reason.code == ReasonCode.ALERT_DUPLICATE
    later = at + timedelta(minutes=15)
    top = decide_alert(still_firing(ep, later), ep, CFG, later)
    assert kinds(top) == [("severe", "failover")] and not escalation_due(top.episode, CFG, later + timedelta(hours=1))
    assert not escalation_due(replace(ep, resolved_at=at), CFG, later)
    blocked = decide_alert(still_firing(ep, later), ep, CFG, later, "forecast-only mode (dry_run)")
    assert kinds(blocked) == [("severe", "failover")] and not any(r.apply for r in blocked.responses)
