"""The README's main job, on a short generated log: every step runs and decisions are audited."""
from __future__ import annotations

import re

import pandas as pd

from workers.demo import run_demo
from warmcast.config.settings import load_settings
from warmcast.state import StateStore


def test_demo_generates_ingests_forecasts_and_audits_plans(tmp_path, redis_server_url, key_prefix, redis_client):
    settings = load_settings(redis_url=redis_server_url, key_prefix=key_prefix, state_dir=tmp_path / "state")
    lines: list[str] = []
    run_demo(settings, days=3, deployment="demo", workdir=tmp_path / "work", echo=lines.append)
    text = "\n".join(lines)
    assert "1/4 generated" in text and "stored 4,319 minutes" in text and "4/4 replaying" in text
    plans = StateStore(redis_client, key_prefix).audit_log("demo", kind="scale")
    assert all(p["reason"] and p["applied"] is False for p in plans)
    # each row names the active profile and one replica's capacity under it (night 22:00-07:00)
    table = text[text.index("time (UTC)"):text.index("\nnext:")].splitlines()
    assert "profile" in table[0] and "rpm/replica" in table[0]
    rows = [line.split() for line in table[1:] if line.strip()]
    assert len(plans) == len(rows) >= 12   # every row is an audited decision: every 2 hours, and more
    at = {f"{r[0]} {r[1]}": r for r in rows}
    # one row every 2 hours from about midnight (the log's unfinished last minute is not stored, so the
    # rows fall a minute before the hour): the first is night, the one at about 16:00 day
    first = rows[0]
    assert first[2:4] == ["night", "200"] and first[1] == "23:59"
    assert next(r for k, r in at.items() if k.endswith("15:59"))[2:4] == ["day", "300"]
    # issue 46: the morning switch is decided minute by minute from its pre-warm (shown as night>day while
    # it runs), so it takes the minutes it takes, not one phase per 2-hour decision (it read 8 hours)
    times = [pd.Timestamp(f"{r[0]} {r[1]}") for r in rows]
    morning = [i for i, r in enumerate(rows) if r[2] == "night>day"]
    assert morning, rows
    done = next(i for i in range(morning[-1] + 1, len(rows)) if rows[i][2] == "day")
    assert times[done] - times[morning[0]] <= pd.Timedelta(hours=2), (rows[morning[0]], rows[done])
    assert times[morning[0]] < pd.Timestamp(f"{rows[morning[0]][0]} 07:00")   # warmed before the day window
    assert "1 replicas" not in text
    for fields in rows:  # a reason that names a capacity names the one the row shows
        said = re.search(r"at (\d+) req/min per replica", " ".join(fields))
        assert said is None or said.group(1) == fields[3], fields
    assert lines[-1].startswith("\nnext: .venv/bin/warmcast backtest fleet ")   # as the README runs it
