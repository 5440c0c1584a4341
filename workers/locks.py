"""A Redis lock per deployment and job, owned by a token (the Celery task id).

Plain ``SET NX PX`` with compare-and-delete release.  A task redelivered after its
worker died carries the same task id, so it may take over the lock its dead first
attempt left behind instead of waiting for the timeout; any other holder makes
the acquire fail with :class:`LockBusy` (a named transient error the tasks retry).
"""
from __future__ import annotations

import uuid
from contextlib import contextmanager
from typing import Iterator

import redis

from warmcast.errors import WarmcastError

_RELEASE = """
if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end
"""


class LockBusy(WarmcastError):
    """Another run holds the lock for this deployment and job."""


class DeploymentLock:
    def __init__(self, client: redis.Redis, prefix: str, job: str, deployment: str, timeout_s: float,
                 token: str | None = None) -> None:
        self.r = client
        self.key = f"{prefix}:lock:{job}:{deployment}"
        self.timeout_ms = int(timeout_s * 1000)
        self.token = token or uuid.uuid4().hex

    def acquire(self) -> None:
        if self.r.set(self.key, self.token, nx=True, px=self.timeout_ms):
            return
        holder = self.r.get(self.key)
        holder = holder.decode() if isinstance(holder, bytes) else holder
        if holder == self.token and self.r.set(self.key, self.token, xx=True, px=self.timeout_ms):
            return  # our own earlier attempt (same task id) died holding it
        raise LockBusy(f"{self.key} is held by {holder} (a run of the same job for this deployment)")

    def release(self) -> bool:
        return bool(self.r.eval(_RELEASE, 1, self.key, self.token))


@contextmanager
def deployment_lock(client: redis.Redis, prefix: str, job: str, deployment: str, timeout_s: float,
                    token: str | None = None) -> Iterator[DeploymentLock]:
    lock = DeploymentLock(client, prefix, job, deployment, timeout_s, token)
    lock.acquire()
    try:
        yield lock
    finally:
        try:
            lock.release()
        except redis.RedisError:
            pass  # it expires on its own
