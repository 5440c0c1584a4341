"""vLLM server processes on loopback ports of this machine.

:class:`LocalServer` is one ``python -m vllm.entrypoints.openai.api_server``
process from the vLLM virtualenv, started in its own session so that stopping
it also stops its EngineCore/worker children (SIGTERM to the process group,
SIGKILL after a grace period).  Every server started here is also stopped when
the interpreter exits (unless made with ``stop_at_exit=False``: the control
loop's servers outlive a worker restart and are adopted again through the
scaler's state file), so a crashed test run leaves no stray engines behind.
See :mod:`.launch` for the flags the CPU build needs.
"""
from __future__ import annotations

import asyncio
import atexit
import os
import signal
import socket
import subprocess
import tempfile
import time
import weakref
from pathlib import Path
from typing import Any, Collection, Mapping

import httpx
import psutil

from warmup.actuators.launch import launch_command
from warmup.actuators.vllm_client import InstanceError, InstanceUnavailable

_LIVE: "weakref.WeakSet[LocalServer]" = weakref.WeakSet()


class InstanceCrashed(InstanceError):
    """The server process exited; the message carries its exit code and the end of its log."""


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def free_port(start: int = 8100, host: str = "127.0.0.1", avoid: set[int] | None = None) -> int:
    for port in range(start, start + 2000):
        if (not avoid or port not in avoid) and port_is_free(port, host):
            return port
    raise InstanceUnavailable(f"{host}:{start}+", "no free port in 2000 ports")


def one_core_env(slot: int, env: Mapping[str, str] | None = None,
                 cores: Collection[int] | None = None) -> dict[str, str]:
    """``env`` plus ``VLLM_CPU_OMP_THREADS_BIND`` giving a CPU engine core ``slot`` (mod ``cores``,
    by default those this process may use). vLLM's default binding spins OpenMP threads on every core, which
    starves the server's own API process and every other engine on the machine: requests then
    trickle into the scheduler one by one. An explicit binding from the operator wins."""
    out = dict(env or {})
    if "VLLM_CPU_OMP_THREADS_BIND" in out or "VLLM_CPU_OMP_THREADS_BIND" in os.environ:
        return out
    mine = sorted(os.sched_getaffinity(0) if cores is None else cores)
    out["VLLM_CPU_OMP_THREADS_BIND"] = str(mine[slot % len(mine)])
    return out


def other_cores(slot: int, env: Mapping[str, str] | None = None,
                cores: Collection[int] | None = None) -> set[int] | None:
    """The cores this process may use (or ``cores``) but those the engine of ``slot`` binds to: the ones
    :func:`one_core_env` gives it, or the operator's own ``VLLM_CPU_OMP_THREADS_BIND`` where set (None
    on one core, or where that binding names no plain cores, e.g. ``auto``).  A measurement keeps the
    server's API and scheduler processes and its load client there: anywhere else they take turns on the
    engine's core, and its capacity moved 1.5x between minutes (the calibrate test: a knee read at 21
    req/s early in a run, the tool meeting the SLO at 30 after)."""
    mine = set(os.sched_getaffinity(0) if cores is None else cores)
    spec = {**os.environ, **one_core_env(slot, env, mine)}["VLLM_CPU_OMP_THREADS_BIND"]   # as the server's env merges
    bound = _bound_cores(spec)
    rest = mine - bound if bound else set()
    return rest or None


def _bound_cores(spec: str) -> set[int]:
    """The cores of an OpenMP binding like ``0``, ``0-3`` or ``0,2``; empty when it names none."""
    out: set[int] = set()
    for part in spec.split(","):
        lo, _, hi = part.strip().partition("-")
        if not (lo.isdigit() and (not hi or hi.isdigit())):
            return set()
        out |= set(range(int(lo), int(hi or lo) + 1))
    return out


def pin_to(cores: set[int] | None):
    """A ``preexec_fn`` that keeps a child process (and what it starts) on ``cores``; None: anywhere."""
    return None if not cores else (lambda: os.sched_setaffinity(0, cores))


class LocalServer:
    """One vLLM OpenAI server process on ``host:port``."""

    def __init__(
        self,
        model: str | Path,
        engine_args: Mapping[str, Any],
        *,
        port: int,
        host: str = "127.0.0.1",
        python: str | Path | None = None,
        dev_mode: bool = False,
        env: Mapping[str, str] | None = None,
        log_dir: str | Path | None = None,
        name: str | None = None,
        stop_at_exit: bool = True,
        cpus: set[int] | None = None,
    ) -> None:
        self.stop_at_exit = stop_at_exit
        self.cpus = cpus   # the server's processes run there (the engine's OpenMP threads bind by their env)
        self._adopted_pid: int | None = None
        self._adopted: psutil.Process | None = None   # the adopted process, as found (its start time)
        self.model = str(model)
        self.engine_args = dict(engine_args)
        self.host = host
        self.port = port
        self.name = name or f"{host}:{port}"
        self.argv = launch_command(self.model, self.engine_args, host=host, port=port, python=python)
        self.env = {**os.environ, **(env or {})}
        if dev_mode:
            self.env["VLLM_SERVER_DEV_MODE"] = "1"
        # Without a log_dir a temp dir is made at start(), not here: adopted servers never need one.
        self._log_dir = Path(log_dir) if log_dir else None
        self.log_path = (self._log_dir or Path(tempfile.gettempdir())) / f"vllm-{port}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.started_at: float | None = None  # time.monotonic() at launch
        self.started_wall: float | None = None  # time.time() at launch
        self.healthy_after_s: float | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else self._adopted_pid

    def adopt(self, pid: int, started_at_wall: float | None = None) -> bool:
        """Take over a server another warmcast process started (found in a scaler's state file).

        Only adopts when ``pid`` is alive and really is this server (its command
        line has the API server module and this port); returns whether it did.
        """
        try:
            found = psutil.Process(pid)
            cmd = found.cmdline()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            return False
        if "vllm.entrypoints.openai.api_server" not in cmd or str(self.port) not in cmd:
            return False
        self._adopted_pid, self._adopted = pid, found
        self.started_wall = started_at_wall
        self.started_at = time.monotonic() - (time.time() - started_at_wall if started_at_wall else 0.0)
        if self.stop_at_exit:
            _LIVE.add(self)
        return True

    def start(self) -> "LocalServer":
        if self.proc is not None:
            return self
        if self._log_dir is None:
            self.log_path = Path(tempfile.mkdtemp(prefix="warmcast-vllm-")) / f"vllm-{self.port}.log"
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")
        self.started_at = time.monotonic()
        self.started_wall = time.time()
        self.proc = subprocess.Popen(self.argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     env=self.env, start_new_session=True, preexec_fn=pin_to(self.cpus))
        log.close()
        if self.stop_at_exit:
            _LIVE.add(self)
        return self

    def returncode(self) -> int | None:
        return self.proc.poll() if self.proc else None

    @property
    def alive(self) -> bool:
        if self.proc is not None:
            return self.proc.poll() is None
        if self._adopted is not None:
            try:   # is_running() compares start times: a new process under a reused pid is not ours
                return self._adopted.is_running() and self._adopted.status() != psutil.STATUS_ZOMBIE
            except psutil.NoSuchProcess:
                return False
        return False

    def log_tail(self, lines: int = 15) -> str:
        try:
            text = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        # Prefer error lines: the last traceback line is usually the cause.
        errs = [l for l in text if "Error" in l or "error" in l]
        picked = (errs[-3:] + ["..."] if errs else []) + text[-lines:]
        return "\n".join(l[:300] for l in picked)

    def _crashed(self) -> InstanceCrashed:
        return InstanceCrashed(self.name, f"server process {self.pid} exited with code {self.returncode()} "
                                          f"(log {self.log_path}):\n{self.log_tail()}")

    def check_healthy(self, timeout_s: float = 2.0) -> bool:
        if not self.alive:
            return False
        try:
            return httpx.get(self.url + "/health", timeout=timeout_s).status_code == 200
        except httpx.HTTPError:
            return False

    async def wait_healthy(self, timeout_s: float = 240.0, poll_s: float = 0.5) -> float:
        """Seconds from launch until ``/health`` answered 200.

        Raises :class:`InstanceCrashed` as soon as the process exits, and
        :class:`InstanceUnavailable` when it is not healthy within ``timeout_s``.
        """
        if self.proc is None and self._adopted_pid is None:
            self.start()
        assert self.started_at is not None
        deadline = self.started_at + timeout_s
        async with httpx.AsyncClient(timeout=2.0) as http:
            while True:
                if not self.alive:
                    raise self._crashed()
                try:
                    if (await http.get(self.url + "/health")).status_code == 200:
                        self.healthy_after_s = time.monotonic() - self.started_at
                        return self.healthy_after_s
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline:
                    raise InstanceUnavailable(self.name, f"not healthy {timeout_s:.0f}s after launch "
                                                         f"(log {self.log_path}):\n{self.log_tail(5)}")
                await asyncio.sleep(poll_s)

    def wait_healthy_sync(self, timeout_s: float = 240.0) -> float:
        return asyncio.run(self.wait_healthy(timeout_s))

    def kill_hard(self) -> None:
        """SIGKILL the whole process group at once (tests use it to simulate a crash)."""
        if self.proc is not None:
            if self.proc.returncode is None:   # unreaped: its pid still names its group
                _signal_group(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
        elif self._adopted_pid is not None and self.alive:
            _signal_group(self._adopted_pid, signal.SIGKILL)
            _wait_gone(self._adopted_pid, 10)

    def stop(self, grace_s: float = 20.0) -> int | None:
        """SIGTERM the process group, SIGKILL it after ``grace_s``; returns the exit code.

        The group is signalled only while its leader is unreaped (running, or a zombie we have
        not waited for): a reaped leader's pid goes to a new process within minutes on a busy
        machine, and signalling it killed that process (CI on 294c19e)."""
        if self.proc is None and self._adopted_pid is not None:
            if self.alive:
                _signal_group(self._adopted_pid, signal.SIGTERM)
                if not _wait_gone(self._adopted_pid, grace_s):
                    self.kill_hard()
            _LIVE.discard(self)
            return None
        if self.proc is None:
            return None
        if self.proc.returncode is None:
            pid = self.proc.pid
            _signal_group(pid, signal.SIGTERM)
            if not _exited_unreaped(pid, grace_s):
                _signal_group(pid, signal.SIGKILL)
            # Children of the group may outlive the leader: the leader, a zombie until waited
            # for, keeps the group's number from any new process while they are killed.
            _exited_unreaped(pid, 10.0)
            _signal_group(pid, signal.SIGKILL)
            self.proc.wait(timeout=10)
        _LIVE.discard(self)
        return self.proc.returncode

    def __repr__(self) -> str:
        state = "running" if self.alive else f"exited({self.returncode()})" if self.proc else "new"
        return f"LocalServer({self.url}, pid={self.pid}, {state})"


def _wait_gone(pid: int, timeout_s: float) -> bool:
    try:
        psutil.Process(pid).wait(timeout=timeout_s)
    except psutil.NoSuchProcess:
        return True
    except psutil.TimeoutExpired:
        return False
    return True


def _exited_unreaped(pid: int, timeout_s: float) -> bool:
    """Wait up to ``timeout_s`` for child ``pid`` to exit, leaving it unreaped (WNOWAIT)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
                return True
        except ChildProcessError:   # reaped by someone else: nothing of ours to wait for
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


@atexit.register
def _stop_all_at_exit() -> None:
    for server in list(_LIVE):
        try:
            server.stop(grace_s=5.0)
        except Exception:  # best effort at interpreter exit
            pass
