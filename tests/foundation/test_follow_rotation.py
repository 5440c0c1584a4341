"""`ingest --follow` across log rotation (issue 31: 677 of 4,163 lines lost): a real file rotated
between two polls in each of logrotate's forms, every line counted once, by the same follower and
by a new one (a restarted process: only Redis carries its state)."""
from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest

from warmcast.ingest.follow import Follower
from warmcast.ingest.formats import PRESETS

M0 = int(time.time() // 60) - 30  # half an hour ago: inside the store's window
EARLY = M0 * 60 + 30               # a poll while M0 is open: nothing written yet
LATE = (M0 + 2) * 60 + 15          # a poll after M0 and M0 + 1 are over


def append(path: Path, minute: int, n: int) -> None:
    """``n`` requests in ``minute``, as a gateway logs them (appending, as to an open file)."""
    with open(path, "a") as fh:
        for i in range(n):
            fh.write(json.dumps({"created": minute * 60 + i * 50 / n,
                                 "usage": {"prompt_tokens": 100, "completion_tokens": 20}}) + "\n")


class Run:
    """A follower of ``log`` for deployment gw; ``restart`` makes each poll a new process's first."""

    def __init__(self, store, log: Path, restart: bool) -> None:
        self.store, self.log, self.restart = store, log, restart
        self.f = self.new()

    def new(self) -> Follower:
        return Follower(self.log, "gw", self.store, PRESETS["openai"])

    def poll(self, now_s: float):
        if self.restart:
            self.f = self.new()
        return self.f.poll(now_s=now_s)

    def stored(self) -> dict[int, float]:
        s = self.store.frame("gw")["requests"].dropna()
        return {int(t.value // 60_000_000_000): float(v) for t, v in s.items()}


@pytest.fixture(params=[False, True], ids=["same-follower", "restarted"])
def run(request, store, tmp_path) -> Run:
    return Run(store, tmp_path / "access.jsonl", request.param)


def _settle(run: Run) -> None:
    """Later polls, with the rotated copy still beside the log, count nothing again."""
    before = run.stored()
    for s in (LATE + 1, LATE + 2):
        assert run.poll(s).lines == 0
    assert run.stored() == before


def test_rename_reads_the_old_file_to_its_end_then_the_new_one(run):
    log = run.log
    append(log, M0, 40)
    assert run.poll(EARLY).lines == 40
    append(log, M0, 25)                      # not read yet when logrotate renames the file
    os.rename(log, log.with_name("access.jsonl.1"))
    append(log.with_name("access.jsonl.1"), M0, 5)  # the gateway writes on until it reopens its log
    append(log, M0 + 1, 30)                  # ... then to the new file at the path
    rep = run.poll(LATE)
    assert rep.rotated and rep.lines == 25 + 5 + 30
    assert run.stored() == {M0: 70.0, M0 + 1: 30.0}
    _settle(run)


def test_rename_with_no_new_file_yet_waits_and_reads_the_old_file_as_it_grows(run):
    log, old = run.log, run.log.with_name("access.jsonl.1")
    append(log, M0, 10)
    run.poll(EARLY)
    os.rename(log, old)
    append(old, M0, 7)
    assert run.poll(EARLY + 1).lines == 7    # the renamed file is still read while the path is empty
    append(old, M0, 3)
    append(log, M0 + 1, 4)
    assert run.poll(LATE).lines == 7
    assert run.stored() == {M0: 20.0, M0 + 1: 4.0}
    _settle(run)


def test_copytruncate_reads_the_unread_tail_from_the_copy(run):
    log = run.log
    append(log, M0, 50)
    run.poll(EARLY)
    append(log, M0, 12)                      # in the copy only
    shutil.copyfile(log, log.with_name("access.jsonl.1"))
    with open(log, "r+") as fh:              # truncated in place: same inode
        fh.truncate(0)
    append(log, M0 + 1, 9)                   # shorter than the old offset
    rep = run.poll(LATE)
    assert rep.rotated and rep.lines == 21
    assert run.stored() == {M0: 62.0, M0 + 1: 9.0}
    _settle(run)


def test_truncate_and_regrow_past_the_old_offset_between_two_polls(run):
    log = run.log
    append(log, M0, 20)
    run.poll(EARLY)
    append(log, M0, 6)
    shutil.copyfile(log, log.with_name("access.jsonl.1"))
    with open(log, "r+") as fh:
        fh.truncate(0)
    append(log, M0 + 1, 80)                  # same inode, now longer than the old offset
    assert log.stat().st_size > 26 * 80
    rep = run.poll(LATE)
    assert rep.rotated and rep.lines == 86
    assert run.stored() == {M0: 26.0, M0 + 1: 80.0}
    _settle(run)


def test_a_deleted_log_is_finished_then_followed_again_when_it_comes_back(store, tmp_path):
    # one follower only: what was appended to a deleted file is readable only through a handle
    # opened before; a restarted follower can but wait for the file to come back
    run = Run(store, tmp_path / "access.jsonl", restart=False)
    log = run.log
    append(log, M0, 15)
    run.poll(EARLY)
    append(log, M0, 4)
    log.unlink()
    assert run.poll(EARLY + 2).lines == 4    # the follower still holds the deleted file open
    assert run.poll(LATE).lines == 0         # nothing at the path: it waits, writes nothing
    assert "gw" not in run.store.deployments() or M0 not in run.stored()
    append(log, M0 + 1, 11)
    rep = run.poll(LATE + 1)
    assert rep.rotated and rep.lines == 11
    assert run.stored() == {M0: 19.0, M0 + 1: 11.0}
    _settle(run)


def test_a_state_saved_before_fingerprints_resumes_without_a_rotation(store, tmp_path, redis_client):
    log = tmp_path / "access.jsonl"
    append(log, M0, 8)
    f = Follower(log, "gw", store, PRESETS["openai"])
    f.poll(now_s=EARLY)
    old = json.loads(redis_client.get(f.key))
    for k in ("fp", "fp_len", "skipping"):   # what a follower of the previous release saved
        old.pop(k)
    redis_client.set(f.key, json.dumps(old))
    append(log, M0, 2)
    rep = Follower(log, "gw", store, PRESETS["openai"]).poll(now_s=LATE)
    assert not rep.rotated and rep.lines == 2
