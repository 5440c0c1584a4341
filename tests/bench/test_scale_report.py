"""bench/scale.py says when its two windows are not alike: one held a top of the hour (the hourly
tasks and every deployment's model re-resolution ran in it) and the other did not."""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from scale import holds_top_of_hour, hour_note  # noqa: E402


def _mode(name: str, start: str | None, minutes: int = 3) -> dict:
    return {"mode": name, "minutes": minutes, **({"window_start": start} if start else {})}


def test_a_window_holds_the_top_of_the_hour_when_it_starts_there_or_runs_across_it():
    assert holds_top_of_hour(_mode("a", "2026-12-07T19:00:00"))
    assert holds_top_of_hour(_mode("a", "2026-12-07T18:58:00"))
    assert not holds_top_of_hour(_mode("a", "2026-12-07T18:57:00"))   # 18:57-19:00, the top after it
    assert not holds_top_of_hour(_mode("a", "2026-12-07T19:09:00"))
    assert holds_top_of_hour(_mode("a", None)) is None


def test_the_report_says_not_like_for_like_when_only_one_window_held_it():
    base, ours = _mode("per-deployment", "2026-12-07T18:58:00"), _mode("sharded", "2026-12-07T19:09:00")
    assert "NOT LIKE FOR LIKE" in hour_note(base, ours)
    assert "NOT LIKE FOR LIKE" not in hour_note(_mode("p", "2026-12-07T19:20:00"), ours)
    assert "not recorded" in hour_note(_mode("p", None), ours)
