"""Chaos faults on what comes in (bench/chaos.py, issue 31): an access log rotated under
``warmcast ingest --follow`` in its three forms, an observation POSTed 2 h ahead, and two
first ingests of one deployment at different resolutions racing each other.

The rotation rows write JSON lines dated 50 to 40 minutes ago while a follower tails the file
with a 1 h grace (so every minute stays open however long the row takes), rotate it mid-way,
then stop the follower and run ``--follow --once --grace-s 0`` to write what it counted:
lines lost = lines written - requests stored.  Seconds to recover: from the rotation to the
follower's report of it (the poll that read the rotated tail and opened the new file); one tick is
one poll interval plus up to :data:`POLL_WORK_S` for that poll's own reading.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Callable

import pandas as pd

from bench.chaosrig import PY, ROOT, Rig, Row
from warmcast.runtime import wait_until

POLL_S = 0.5
POLL_WORK_S = 1.0  # a poll's own work (reading and counting up to a few thousand lines) allowed in the bound
FOLLOW_DEPS = """
deployments:
{items}
"""
ITEM = """  - name: {name}
    min_replicas: 1
    max_replicas: 4
    signals: {{arrivals: access_log, access_log: {path}}}
    profiles:
      day: {{capacity_rpm: 100}}
"""
FORMS = ("copytruncate", "regrow", "rename")


class LogWriter:
    """A gateway appending JSON lines (kept open, as a gateway keeps its file open)."""

    def __init__(self, path: Path, t0: float) -> None:
        self.path, self.t0, self.n = path, t0, 0
        self.fh = open(path, "a")

    def write(self, count: int) -> None:
        for _ in range(count):
            ts = pd.Timestamp(self.t0 + self.n % 600, unit="s").strftime("%Y-%m-%dT%H:%M:%SZ")
            # a request id, as gateways log one: no two lines alike (times repeat every 600 lines)
            self.fh.write(json.dumps({"timestamp": ts, "request_id": f"r{self.n}", "input_tokens": 10,
                                      "output_tokens": 5}) + "\n")
            self.n += 1
        self.fh.flush()

    def reopen(self) -> None:
        self.fh.close()
        self.fh = open(self.path, "a")


def _rotate(form: str, w: LogWriter) -> None:
    """The rotation, right after a burst the follower has not read yet (within one poll)."""
    if form == "copytruncate":  # logrotate's copytruncate: copy, then truncate in place
        shutil.copyfile(w.path, w.path.with_suffix(".1"))
        os.truncate(w.path, 0)
    elif form == "regrow":  # truncated, then more written than the old offset before the next poll
        size = w.path.stat().st_size
        os.truncate(w.path, 0)
        while w.path.stat().st_size <= size:
            w.write(100)
    else:  # renamed; the gateway writes on to the old file a moment, then reopens the path
        os.rename(w.path, w.path.with_suffix(".1"))
        w.write(150)
        w.reopen()


def _follow(rig: Rig, env: dict[str, str], dep: str, *extra: str) -> subprocess.Popen:
    return subprocess.Popen([PY, "-m", "warmcast.cli", "ingest", "--follow", "-d", dep, "--format", "warmcast",
                             "--poll-s", str(POLL_S), *extra], cwd=ROOT, env={**rig.env, **env},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


class Lines:
    """A process's stdout read as it comes, each line with the time it arrived."""

    def __init__(self, p: subprocess.Popen) -> None:
        self.got: list[tuple[float, str]] = []
        self.thread = threading.Thread(target=self._read, args=(p,), daemon=True)
        self.thread.start()

    def _read(self, p: subprocess.Popen) -> None:
        for line in p.stdout:
            self.got.append((time.monotonic(), line))

    def first(self, text: str, timeout_s: float) -> float | None:
        """When a line containing ``text`` arrived (None: not within ``timeout_s``)."""
        hit = wait_until(lambda: [t for t, line in self.got if text in line], timeout_s)
        return hit[0] if hit else None

    def text(self) -> str:
        self.thread.join(timeout=10)
        return "".join(line for _, line in self.got)


def _stored_requests(rig: Rig, dep: str) -> int:
    try:
        return int(rig.ctx.store.frame(dep)["requests"].fillna(0).sum())
    except Exception:  # noqa: BLE001 - nothing stored yet
        return 0


def _rotation(form: str) -> Callable[[Rig], Row]:
    def fault(rig: Rig) -> Row:
        dep, log = f"chaos-follow-{form}", rig.tmp / f"access-{form}.jsonl"
        (rig.tmp / f"follow-{form}.yaml").write_text(FOLLOW_DEPS.format(items=ITEM.format(name=dep, path=log)))
        env = {"WARMCAST_DEPLOYMENTS_FILE": str(rig.tmp / f"follow-{form}.yaml")}
        w = LogWriter(log, (time.time() // 60 - 50) * 60)
        w.write(500)
        follower = _follow(rig, env, dep, "--grace-s", "3600")
        lines = Lines(follower)
        t0 = time.monotonic()
        for _ in range(10):
            w.write(100)
            time.sleep(POLL_S / 2)
        time.sleep(2 * POLL_S + 3)  # the follower has read everything so far (and started: ~3 s of imports)
        w.write(300)
        if form == "regrow":  # the case the follower can own: it had read the file, which a truncation
            time.sleep(2 * POLL_S)  # then emptied and new lines grew past the old offset before a poll
        t_rot = time.monotonic()
        _rotate(form, w)
        seen = lines.first("log rotated", 30)
        for _ in range(10):
            w.write(100)
            time.sleep(POLL_S / 2)
        time.sleep(4 * POLL_S)
        follower.send_signal(signal.SIGTERM)
        follower.wait(timeout=30)
        out = lines.text()
        flush = _follow(rig, env, dep, "--once", "--grace-s", "0")
        out += flush.communicate(timeout=120)[0]
        stored, written = _stored_requests(rig, dep), w.n
        w.fh.close()
        lost = written - stored
        tb = out.count("Traceback")
        return Row(f"log rotation under ingest --follow: {form}", lost == 0 and tb == 0 and flush.returncode == 0,
                   None if seen is None else seen - t_rot, "-", "-",
                   f"{written:,} lines written, {stored:,} requests stored in {time.monotonic() - t0:.1f} s; "
                   f"follower exit {follower.returncode}, flush exit {flush.returncode}",
                   lines_lost=str(lost), tracebacks=str(tb), bound_s=POLL_S + POLL_WORK_S,
                   bound_note=f"a poll every {POLL_S:g} s + {POLL_WORK_S:g} s for its reading")

    fault.__name__ = f"fault_rotation_{form}"
    return fault


def fault_future_observation(rig: Rig) -> Row:
    """One observation at now+2 h (finding 2): refused, and the live forecast's origin stays at now."""
    before = (rig.ctx.state.get_forecast(rig.dep) or {}).get("origin")
    when = (pd.Timestamp.now(tz="UTC") + pd.Timedelta(hours=2)).strftime("%Y-%m-%dT%H:%M:00Z")
    status, body = rig.post_observations([{"time": when, "requests": 1000.0}])
    t0 = time.time()
    wait_until(lambda: (rig.ctx.state.get_forecast(rig.dep) or {}).get("created_at", "") >
               pd.Timestamp(t0, unit="s").strftime("%Y-%m-%d %H:%M:%S"), 40)
    after = (rig.ctx.state.get_forecast(rig.dep) or {}).get("origin")
    now = pd.Timestamp.now(tz="UTC").tz_localize(None)
    ahead = after is not None and pd.Timestamp(after) > now + pd.Timedelta(minutes=1)
    ok = 400 <= status < 500 and not ahead and after is not None
    return Row("POST an observation at now+2 h", ok, None, "0", "-",
               f"POST -> {status} {body[:80]}; forecast origin before {before}, after {after} (now {now:%H:%M:%S})",
               n5xx=str(int(status >= 500)))


def _race_once(rig: Rig, k: int) -> tuple[list[int], int, str]:
    """Two `warmcast ingest` processes, per-minute and 5-minute counts, on one new deployment at once."""
    dep = f"chaos-race-{k}"
    end = pd.Timestamp.now(tz="UTC").tz_localize(None).floor("h") - pd.Timedelta(hours=2)
    files = []
    for step in (1, 5):
        idx = pd.date_range(end - pd.Timedelta(hours=1), end, freq=f"{step}min", inclusive="left")
        f = rig.tmp / f"race-{k}-{step}min.csv"
        f.write_text("time,requests\n" + "".join(f"{t:%Y-%m-%dT%H:%M:%SZ},{10 * step}\n" for t in idx))
        files.append(f)
    procs = [subprocess.Popen([PY, "-m", "warmcast.cli", "ingest", str(f), "-d", dep, "--format", "counts"],
                              cwd=ROOT, env=rig.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for f in files]
    outs = [p.communicate(timeout=180)[0] for p in procs]
    return [p.returncode for p in procs], rig.ctx.store.resolution(dep), "".join(outs)


def fault_concurrent_first_ingests(rig: Rig, rounds: int = 3) -> Row:
    t0, both, tb, notes = time.monotonic(), 0, 0, []
    for k in range(rounds):
        rcs, res, out = _race_once(rig, k)
        both += rcs == [0, 0]
        tb += out.count("Traceback")
        notes.append(f"exits {rcs}, stored resolution {res} min")
    return Row(f"concurrent first ingests, 1-min and 5-min counts ({rounds} races)", both == 0 and tb == 0,
               None, f"{both} races stored both resolutions", "-",
               f"refused at the door ({time.monotonic() - t0:.1f} s for the races): " + "; ".join(notes),
               tracebacks=str(tb))


FAULTS = (*(_rotation(f) for f in FORMS), fault_future_observation, fault_concurrent_first_ingests)
