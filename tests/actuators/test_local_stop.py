"""Stopping a local server signals its own process group only, never one a reused pid names.

A test run (or a worker's day) starts thousands of processes; with pid_max 32768 the kernel hands
a freed pid to a new process within minutes.  A stop that signalled a reaped leader's pid killed
whatever got that number next: once, a server another test had just started (CI on 294c19e,
``test_local_scaler_never_binds_two_servers_to_one_core``).  These tests make the kernel reuse the
pid on purpose (``/proc/sys/kernel/ns_last_pid``, root on this machine) and check the new process
lives.  The "python" is a shell script with a vLLM-like command line: no vLLM needed."""
from __future__ import annotations

import subprocess
import time
from pathlib import Path

import psutil
import pytest

from warmup.actuators.local import LocalServer, free_port

NS_LAST_PID = Path("/proc/sys/kernel/ns_last_pid")


def _server(tmp_path: Path, script: str) -> LocalServer:
    fake = tmp_path / "python"
    fake.write_text(f"#!/bin/sh\n{script}\n")
    fake.chmod(0o755)
    return LocalServer(tmp_path, {}, port=free_port(), python=fake, log_dir=tmp_path / "logs", stop_at_exit=False)


def _new_session_at(pid: int, tries: int = 200) -> subprocess.Popen:
    """A process (its own session and group) that the kernel gives ``pid``; other processes of the
    machine may fork in between, and the old group's orphans hold the number until init reaps
    them, so it tries again, a while apart, until it lands there."""
    for _ in range(tries):
        NS_LAST_PID.write_text(str(pid - 1))
        p = subprocess.Popen(["sleep", "60"], start_new_session=True)
        if p.pid == pid:
            return p
        p.kill()
        p.wait()
        time.sleep(0.05)
    pytest.fail(f"the kernel never handed out pid {pid} again in {tries} tries")


def _stopping_spares_the_next_at_its_pid(server: LocalServer, pid: int) -> None:
    """A new process gets ``pid``; ``server``, whose process is gone, sees it gone and stops it not."""
    bystander = _new_session_at(pid)
    try:
        assert not server.alive
        server.stop(grace_s=1)
        server.kill_hard()
        time.sleep(0.2)
        assert bystander.poll() is None, f"stop() killed pid {bystander.pid}, a process it never started"
    finally:
        bystander.kill()
        bystander.wait()


@pytest.mark.parametrize("how", ["exited by itself", "stopped before"])
def test_stop_after_the_leader_was_reaped_spares_the_process_that_got_its_pid(tmp_path, how):
    s = _server(tmp_path, "exit 3" if how == "exited by itself" else "sleep 300").start()
    if how == "stopped before":
        s.stop(grace_s=5)
    deadline = time.monotonic() + 10
    while s.alive and time.monotonic() < deadline:   # `alive` polls: the exited leader is reaped here
        time.sleep(0.05)
    assert not s.alive
    _stopping_spares_the_next_at_its_pid(s, s.pid)


def test_an_adopted_server_whose_pid_went_to_a_new_process_is_gone_and_stop_spares_it(tmp_path):
    """A worker adopts a server another process started (the state file); once that server exits
    and its pid is reused, the adopted view says gone and sends no signal."""
    first = _server(tmp_path, "sleep 300").start()
    adopted = LocalServer(tmp_path, {}, port=first.port, python=tmp_path / "python", stop_at_exit=False)
    assert adopted.adopt(first.pid, first.started_wall) and adopted.alive
    first.stop(grace_s=5)
    _stopping_spares_the_next_at_its_pid(adopted, first.pid)


def test_stop_ends_the_whole_group_also_children_that_outlive_the_leader(tmp_path):
    """The server's children (vLLM's engine core) are in its group; a leader that exits on SIGTERM
    while a child ignores it must not leave the child running."""
    pidfile = tmp_path / "child.pid"
    s = _server(tmp_path, f"trap '' TERM; sleep 300 & echo $! > {pidfile}; trap 'exit 0' TERM; wait").start()
    deadline = time.monotonic() + 10
    while not pidfile.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    child = psutil.Process(int(pidfile.read_text()))
    s.stop(grace_s=5)
    gone, _ = psutil.wait_procs([child], timeout=5)
    assert gone or child.status() == psutil.STATUS_ZOMBIE, "the child outlived stop()"
