"""Leases against the real Redis: exclusive, renewed by a thread while the holder works, lapsing
after one lease when the holder is killed, fencing writes once lost.

These assert on wall-clock renewals (a 0.3 s lease renewed every 0.1 s), so they run with the
real-time tests (tests/conftest.py REALTIME): in the niced run pinned to a core a vLLM engine
shares, a renewal thread once slept past its lease on CI and the lease lapsed under it.
"""
from __future__ import annotations

import time

import pytest

from workers.locks import Lease, LeaseLost, LockBusy, lease


def test_lease_is_exclusive_and_redelivery_takes_over(redis_client, key_prefix):
    a = Lease(redis_client, key_prefix, "plan", "d", 30, token="task-1")
    a.acquire()
    with pytest.raises(LockBusy, match="task-1"):
        Lease(redis_client, key_prefix, "plan", "d", 30, token="task-2").acquire()
    # the same task id (a redelivered message whose first attempt died) may take it over
    again = Lease(redis_client, key_prefix, "plan", "d", 30, token="task-1")
    again.acquire()
    assert not Lease(redis_client, key_prefix, "plan", "d", 30, token="task-2").release()
    assert again.release() and not a.release()


def test_lease_is_renewed_while_its_holder_works(redis_client, key_prefix):
    with lease(redis_client, key_prefix, "plan", "d", 0.3, token="worker") as held:
        time.sleep(1.0)  # three times the lease: only the renewals keep it
        with pytest.raises(LockBusy):
            Lease(redis_client, key_prefix, "plan", "d", 0.3).acquire()
        held.check()
    Lease(redis_client, key_prefix, "plan", "d", 0.3).acquire()  # released at the end of the block


def test_lease_of_a_killed_holder_lapses_after_one_lease(redis_client, key_prefix, redis_server_url):
    """A real process takes the lease and is killed -9: the next run gets it after about one lease."""
    import os
    import signal
    import subprocess
    import sys

    from loophelpers import ROOT

    code = ("import sys, time, redis; from workers.locks import Lease; "
            f"Lease(redis.Redis.from_url({redis_server_url!r}), {key_prefix!r}, 'plan', 'd', 1.0, 'dead').acquire(); "
            "print('held', flush=True); time.sleep(60)")
    p = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                         stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "held"
        time.sleep(2.5)  # alive: renewed past its lease
        with pytest.raises(LockBusy, match="dead"):
            Lease(redis_client, key_prefix, "plan", "d", 1.0).acquire()
        p.send_signal(signal.SIGKILL)
        p.wait(timeout=10)
        killed = time.monotonic()
        while True:
            try:
                Lease(redis_client, key_prefix, "plan", "d", 1.0, token="next").acquire()
                break
            except LockBusy:
                assert time.monotonic() - killed < 10, "the dead holder's lease never lapsed"
                time.sleep(0.05)
        assert time.monotonic() - killed <= 2.0  # about one lease (plus polling under load), not a long timeout
    finally:
        p.kill()
        p.wait()


def test_lease_fences_writes_and_actions_after_it_is_lost(redis_client, key_prefix):
    with lease(redis_client, key_prefix, "plan", "d", 30, token="slow") as held:
        held.transaction(lambda pipe: pipe.set(f"{key_prefix}:x", "1"))
        redis_client.set(held.key, "other")  # it lapsed and another run took it
        with pytest.raises(LeaseLost):
            held.transaction(lambda pipe: pipe.set(f"{key_prefix}:x", "2"))
        with pytest.raises(LeaseLost):
            held.check()
    assert redis_client.get(f"{key_prefix}:x") == b"1"
    assert redis_client.get(held.key) == b"other"  # release leaves another holder's lease alone
