"""Issue 41 findings 2 and 3: bad input on the command line showed a Python traceback.  Each is now
one line (``error: ...`` naming the option and what is wrong), exit 2, refused before any work is
done, and nothing stored changes.  Run as a user runs the program (a real process)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from clienv import cli_env

from warmcast.store import LoadStore

WARMCAST = [sys.executable, "-m", "warmcast.cli"]
DEPLOYMENTS = """deployments:
  - name: conv
    cold_start_min: 10
    min_replicas: 2
    max_replicas: 40
    profiles:
      day: {capacity_rpm: 300}
"""


@pytest.fixture
def env(tmp_path, redis_server_url, key_prefix) -> dict[str, str]:
    return cli_env(tmp_path, DEPLOYMENTS, redis_server_url, key_prefix)


def _refused(env: dict[str, str], *args: str, says: tuple[str, ...]) -> subprocess.CompletedProcess:
    """Run the program; assert it exits 2 with one error line that contains every one of ``says``."""
    r = subprocess.run(WARMCAST + list(args), capture_output=True, text=True, timeout=300, env=env)
    out = r.stdout + r.stderr
    assert r.returncode == 2, out[-3000:]
    assert "Traceback" not in out and "site-packages" not in out, out[-3000:]
    errors = [line for line in r.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and all(s in errors[0] for s in says), r.stderr[-3000:]
    return r


@pytest.mark.parametrize("flag, raw, says", [
    ("--since", "NaN", "not a time"), ("--since", "-1", "before 1970"), ("--since", "", "empty"),
    ("--until", "NaN", "not a time"), ("--until", "-1", "before 1970"),
])
def test_report_shadow_refuses_a_bad_window_in_one_line(env, tmp_path, flag, raw, says):
    args = {"--since": "2024-05-01", "--until": "2024-05-02", flag: raw}
    _refused(env, "report", "shadow", "-d", "conv", "--out", str(tmp_path / "r"),
             *[x for kv in args.items() for x in kv], says=(flag, repr(raw), says))
    assert not (tmp_path / "r").exists()


def test_report_shadow_refuses_a_file_as_its_out_directory(env, tmp_path):
    out = tmp_path / "taken.txt"
    out.write_text("mine\n")
    _refused(env, "report", "shadow", "-d", "conv", "--since", "2024-05-01", "--until", "2024-05-02",
             "--out", str(out), says=("--out", "not a directory"))
    assert out.read_text() == "mine\n"


def test_replay_refuses_an_existing_file_as_out_before_replaying(env, tmp_path, redis_client, key_prefix,
                                                                 shared_data):
    out = tmp_path / "taken.txt"
    out.write_text("mine\n")
    r = _refused(env, "replay", "-d", "conv", "--log", str(shared_data / "azure2024_conversation_per_minute.csv"),
                 "--test-start", "2024-05-14 20:00", "--test-end", "2024-05-14 21:00", "--forecaster",
                 "seasonal_naive", "--no-plot", "--out", str(out), says=("--out", "not a directory"))
    assert "test minutes from" not in r.stdout + r.stderr   # refused before the log was read and replayed
    assert out.read_text() == "mine\n" and list(redis_client.scan_iter(f"{key_prefix}:*")) == []


def test_replay_refuses_an_out_under_a_file(env, tmp_path, shared_data):
    (tmp_path / "f").write_text("x")
    _refused(env, "replay", "-d", "conv", "--log", str(shared_data / "azure2024_conversation_per_minute.csv"),
             "--test-start", "2024-05-14 20:00", "--out", str(tmp_path / "f" / "sub"),
             says=("--out", "is a file"))


@pytest.mark.parametrize("url, says", [
    ("http://[::1", "not a URL"), ("http://127.0.0.1:99999", "port 99999"), ("127.0.0.1:8000", "http://"),
    ("ftp://127.0.0.1:8000", "http://"), ("http://:8000", "no host"),
])
def test_calibrate_refuses_a_bad_url_up_front(env, tmp_path, url, says):
    _refused(env, "calibrate", "--url", url, "--out", str(tmp_path / "c"), says=("--url", says))
    assert not (tmp_path / "c").exists()


def _parquet(path: Path, start: str, n: int) -> Path:
    times = pd.date_range(start, periods=n, freq="min").strftime("%Y-%m-%d %H:%M:%S")
    pd.DataFrame({"time": times, "requests": [float(i) for i in range(n)]}).to_parquet(path, index=False)
    return path


@pytest.mark.parametrize("damage", ["truncated", "binary", "empty", "binary-csv"])
def test_store_import_refuses_a_damaged_file_and_keeps_what_is_stored(env, tmp_path, redis_client, key_prefix,
                                                                      damage):
    subprocess.run(WARMCAST + ["store", "import", str(_parquet(tmp_path / "ok.parquet", "2024-01-01", 90)),
                               "-d", "conv"], check=True, capture_output=True, env=env, timeout=300)
    store = LoadStore(redis_client, key_prefix)
    before = store.frame("conv")
    good = _parquet(tmp_path / "more.parquet", "2024-01-02", 90).read_bytes()
    bad = tmp_path / ("bad.csv" if damage == "binary-csv" else "bad.parquet")
    bad.write_bytes({"truncated": good[:len(good) // 2], "empty": b""}.get(damage, bytes(range(256)) * 20))
    _refused(env, "store", "import", str(bad), "-d", "conv", says=(str(bad),))
    pd.testing.assert_frame_equal(store.frame("conv"), before)
    assert len(before) == 90
