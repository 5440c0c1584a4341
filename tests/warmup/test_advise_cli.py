"""`warmcast advise profiles` end to end: logs ingested into a real Redis, the CLI run as a user runs
it, its fragment checked by `warmcast deployments check`."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from warmcast.config.deployments import load_deployments
from warmcast.generate import WorkloadSpec, write_request_log
from warmcast.ingest import aggregate_file

ROOT = Path(__file__).resolve().parents[2]
WARMCAST = [sys.executable, "-m", "warmcast.cli"]


@pytest.fixture
def env(redis_server_url, key_prefix):
    base = {k: v for k, v in os.environ.items() if k != "WARMCAST_DEPLOYMENTS_FILE"}  # no file: a bare deployment
    return {**base, "PYTHONPATH": str(ROOT), "WARMCAST_REDIS_URL": redis_server_url, "WARMCAST_KEY_PREFIX": key_prefix}


def _run(args, env, cwd) -> subprocess.CompletedProcess:
    return subprocess.run(WARMCAST + args, capture_output=True, text=True, timeout=300, env=env, cwd=cwd)


def _minutes(hhmm: str) -> int:
    h, m = hhmm.split(":")
    return int(h) * 60 + int(m)


def _off_by(a: str, b: str) -> int:
    d = abs(_minutes(a) - _minutes(b)) % 1440
    return min(d, 1440 - d)


def test_generated_day_night_shift_found_within_30_minutes_and_accepted_by_check(store, env, tmp_path):
    log = tmp_path / "shift.csv"
    write_request_log(log, WorkloadSpec(days=4, mean_rpm=40, seed=3, night=("20:10", "07:40")))
    frame, _ = aggregate_file([log])
    store.upsert_frame("shift", frame)
    out, plot = tmp_path / "advised.yaml", tmp_path / "ctx.png"
    r = _run(["advise", "profiles", "--deployment", "shift", "--out", str(out), "--plot", str(plot)], env, tmp_path)
    assert r.returncode == 0, r.stderr
    window = yaml.safe_load(out.read_text())["deployments"][0]["schedule"]["windows"][0]
    assert window["profile"] == "night"
    assert _off_by(window["start"], "20:10") <= 30 and _off_by(window["end"], "07:40") <= 30, window
    dep = load_deployments(out).get("shift")  # loads: engine args valid for the recorded vLLM
    assert {p.engine_args["block-size"] for p in dep.profiles.values()} <= {16, 32, 64}
    assert dep.profiles["day"].engine_args["block-size"] < dep.profiles["night"].engine_args["block-size"]
    text = out.read_text()
    assert "# pre-warm night from 19:55" in text and "block-size 16: predicted length" in text
    check = _run(["deployments", "check", str(out)], env, tmp_path)
    assert check.returncode == 0 and f"{out}: OK, 1 deployments" in check.stdout, check.stderr
    assert plot.stat().st_size > 10_000 and plot.read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize("name,fmt,extra,mean_lo,mean_hi,block", [
    ("azure2023_conv_requests.csv", "azure", [], 800, 1500, 16),
    ("mooncake_conversation_requests.jsonl", "mooncake", ["--start", "2024-06-01"], 8000, 16000, 64),
])
def test_real_per_request_logs_give_one_window_with_reasons(shared_data, env, tmp_path, name, fmt, extra,
                                                            mean_lo, mean_hi, block):
    r = _run(["ingest", str(shared_data / name), "-d", "trace", "--format", fmt, *extra], env, tmp_path)
    assert r.returncode == 0, r.stderr
    out = tmp_path / "advised.yaml"
    r = _run(["advise", "profiles", "-d", "trace", "--out", str(out)], env, tmp_path)
    assert r.returncode == 0, r.stderr
    assert "cover only 1.0 h of the day" in r.stdout and "one window" in r.stdout
    dep = load_deployments(out).get("trace")
    assert list(dep.profiles) == ["day"] and dep.schedule.windows == []
    assert dep.profiles["day"].engine_args["block-size"] == block
    mean = float(out.read_text().split("mean context ")[1].split(" tokens")[0].replace(",", ""))
    assert mean_lo < mean < mean_hi


def test_a_log_without_token_counts_is_refused_with_exit_2(store, env, tmp_path, snap):
    counts = tmp_path / "counts.csv"
    counts.write_text("time,requests\n" + "".join(f"2024-01-01 00:{m:02d}:00,{m + 1}\n" for m in range(30)))
    frame, _ = aggregate_file([counts])
    store.upsert_frame("plain", frame)
    before = snap()
    out = tmp_path / "advised.yaml"
    r = _run(["advise", "profiles", "-d", "plain", "--out", str(out)], env, tmp_path)
    assert r.returncode == 2 and "carry no prompt-token counts" in r.stderr and not out.exists()
    assert snap() == before  # nothing stored changed


def test_a_deployment_in_the_file_keeps_its_other_keys_and_time_zone(store, tmp_path):
    from datetime import datetime, timezone

    from warmcast.config.deployments import parse_deployments
    from warmup.planning.advisor_io import advise

    dep = load_deployments(ROOT / "examples" / "deployments.yaml").get("chat-llama")
    log = tmp_path / "shift.csv"
    write_request_log(log, WorkloadSpec(days=3, mean_rpm=20, seed=1, night=("19:00", "06:00")))
    frame, _ = aggregate_file([log])
    store.upsert_frame(dep.name, frame)
    advice = advise(store, dep, datetime(2024, 1, 10, tzinfo=timezone.utc))
    got = parse_deployments(yaml.safe_load(advice.fragment)).get("chat-llama")
    assert got.scaler == dep.scaler and got.slo == dep.slo and got.signals == dep.signals
    assert got.schedule.timezone == "Europe/Berlin"  # 19:00 UTC in January is 20:00 there
    assert (got.schedule.windows[0].start.hour, got.schedule.windows[0].end.hour) == (20, 7)
    assert got.profiles["night"].capacity_rpm == dep.profiles["night"].capacity_rpm  # measured figure kept
    assert advice.as_doc()["windows"][1]["profile"] == "night"



def test_ingest_stores_each_minutes_median_context_within_6_percent(store, shared_data):
    import pandas as pd

    path = shared_data / "azure2023_conv_requests.csv"
    frame, _ = aggregate_file([path], fmt="azure")
    store.upsert_frame("trace", frame)
    stored = store.frame("trace")
    raw = pd.read_csv(path)
    minute = pd.to_datetime(raw["TIMESTAMP"]).dt.floor("min")
    for m in minute.value_counts().index[:5]:  # the five busiest minutes
        exact = raw.loc[minute == m, "ContextTokens"].median()
        assert abs(stored.loc[m, "ctx_p50"] / exact - 1) < 0.06, (m, stored.loc[m, "ctx_p50"], exact)


def test_minutes_stored_before_ctx_p50_existed_still_advise(store):
    """Load stored by an older warmcast has ctx_mean and ctx_p95 but no ctx_p50: nothing to migrate."""
    from datetime import datetime, timezone

    from warmup.planning.advisor_io import advise, deployment_or_bare
    from warmcast.generate import generate_minute_frame

    old = generate_minute_frame(days=2, mean_rpm=20, seed=4).drop(columns=["ctx_p50"])
    store.upsert_frame("old", old)
    advice = advise(store, deployment_or_bare(type("F", (), {"deployments": []})(), "old"),
                    datetime(2024, 1, 5, tzinfo=timezone.utc))
    assert advice.proposal.profiles and all(w["ctx_p50"] is None for w in advice.as_doc()["windows"])


@pytest.mark.parametrize("shift,why", [("20:00", "must be HH:MM-HH:MM"), ("25:00-07:00", "within a day"),
                                       ("20:00-7h", "must be HH:MM")])
def test_a_bad_context_shift_is_refused_before_writing(env, tmp_path, shift, why):
    out = tmp_path / "log.csv"
    r = _run(["generate", "--out", str(out), "--days", "1", "--context-shift", shift], env, tmp_path)
    assert r.returncode == 2 and "--context-shift" in r.stderr and why in r.stderr and not out.exists(), r.stderr


def test_a_plot_with_an_unknown_suffix_is_refused(store, env, tmp_path):
    from warmcast.generate import generate_minute_frame

    store.upsert_frame("p", generate_minute_frame(days=1, mean_rpm=10))
    r = _run(["advise", "profiles", "-d", "p", "--plot", str(tmp_path / "ctx.bmp")], env, tmp_path)
    assert r.returncode == 2 and "ctx.bmp: the plot's format comes from its suffix" in r.stderr


def test_keys_naming_the_old_profiles_are_left_out_and_said_so(store):
    from datetime import datetime, timezone

    from warmcast.config.deployments import parse_deployments
    from warmcast.generate import generate_minute_frame
    from warmup.planning.advisor_io import advise

    dep = load_deployments(ROOT / "examples" / "deployments.yaml").get("chat-pools")
    store.upsert_frame(dep.name, generate_minute_frame(days=2, mean_rpm=20))
    advice = advise(store, dep, datetime(2024, 1, 4, tzinfo=timezone.utc))
    got = parse_deployments(yaml.safe_load(advice.fragment)).get("chat-pools")
    assert got.pools is None and got.gpu == dep.gpu and "# pools left out" in advice.fragment
