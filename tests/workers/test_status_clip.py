"""Issue 32: `warmcast run`'s status line (and the other one-line outputs of a reason) cut the reason
mid-word with a plain slice; they now end at a word boundary with an ellipsis."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from warmcast.text import ELLIPSIS, clip

REASON = ("scale up: the P90 forecast of 123,456 req/min in 15 minutes needs 7 replicas at 180 req/min per "
          "replica, calibrated; 4 are ready and 2 are starting")


@pytest.mark.parametrize("width", [10, 37, 60, 90, 119])
def test_clip_ends_on_a_whole_word_with_an_ellipsis(width):
    out = clip(REASON, width)
    assert len(out) <= width and out.endswith(ELLIPSIS)
    _assert_whole_words(out, REASON)


def _assert_whole_words(shown: str, original: str) -> None:
    """``shown`` is the first words of ``original``, each whole (the last may lose a trailing ':' or ','),
    then the ellipsis: a plain slice ends mid-word ('... 180 req/min per repl')."""
    assert shown.endswith(ELLIPSIS), shown
    kept = shown[:-1].split()
    words = original.split()[:len(kept)]
    assert kept and kept[:-1] == words[:-1] and kept[-1] == words[-1].rstrip(",;:-("), (shown, original)


def test_clip_leaves_short_text_and_cuts_one_long_word_where_it_must():
    assert clip(REASON, len(REASON)) == REASON
    assert clip("", 5) == ""
    assert clip("x" * 50, 10) == "x" * 9 + ELLIPSIS
    assert clip("needs 7 replicas", 9) == "needs 7" + ELLIPSIS  # the cut fell between words already
    with pytest.raises(ValueError, match="at least 1"):
        clip(REASON, 0)


class _State:
    def get_forecast(self, dep):
        return None

    def get(self, kind, dep):
        return {"action": "scale_up", "current": 4, "desired": 7, "reason": REASON} if kind == "plan" else None


def test_run_status_line_cuts_the_plan_reason_at_a_word():
    from workers.processes import status_line

    line = status_line(SimpleNamespace(state=_State()), "demo")
    shown = line.split("(", 1)[1].rsplit(")", 1)[0]
    assert len(shown) <= 90, line
    _assert_whole_words(shown, REASON)


def test_alert_report_cuts_each_decision_reason_at_a_word(monkeypatch):
    import workers.alerting.report as rep

    monkeypatch.setattr(rep, "_hour_text", lambda h: [])  # only the decisions' lines are looked at
    monkeypatch.setattr(rep, "_forecast_text", lambda f: [])
    long = f"{REASON}; {REASON}"
    doc = {"tier": "page", "deployment": "demo", "decision": "d", "slo": "s", "profile": "p", "switch_phase": "-",
           "instances": [], "alert": {"alertnames": ["A"], "starts_at": "t"}, "last_hour": {},
           "forecast_vs_actual": {}, "recent_decisions": [{"ts": "12:00", "kind": "scale", "decision": "up",
                                                           "reason": long}],
           "signals": {k: 0 for k in ("queue_depth", "running", "p99_s", "observed_rpm", "ready", "provisioned")}}
    line = next(l for l in rep.report_text(doc).splitlines() if l.startswith("  12:00"))
    shown = line.split(": ", 1)[1]
    assert len(shown) <= 160, line
    _assert_whole_words(shown, long)
