"""The README's main job, on a short generated log: every step runs and decisions are audited."""
from __future__ import annotations

import re

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
    assert len(plans) == 12  # one decision every 2 hours of the last day
    assert all(p["reason"] and p["applied"] is False for p in plans)
    # each row names the active profile and one replica's capacity under it (night 22:00-07:00)
    table = text[text.index("time (UTC)"):].splitlines()
    assert "profile" in table[0] and "rpm/replica" in table[0]
    # one row every 2 hours from about midnight (the log's unfinished last minute is not stored,
    # so the rows fall a minute before the hour): row 0 is night; the morning switch is made
    # before it breaks (shown as night>day while it runs, one phase per 2-hour decision), and
    # row 8 (about 16:00) is day
    rows = {i: line.split() for i, line in enumerate(table[1:13])}
    assert rows[0][2:4] == ["night", "200"] and rows[8][2:4] == ["day", "300"]
    assert any(r[2] == "night>day" for r in rows.values()), rows
    assert "1 replicas" not in text
    for fields in rows.values():  # a reason that names a capacity names the one the row shows
        said = re.search(r"at (\d+) req/min per replica", " ".join(fields))
        assert said is None or said.group(1) == fields[3], fields
