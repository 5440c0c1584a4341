"""Leases: a Redis lock per deployment and job, held as a short lease that a thread renews while
its holder works.

A holder that dies (kill -9, a lost machine) stops renewing, so its lease lapses after
``ttl_s`` and the next run takes over within about one lease, not after a long timeout.  The
token is the Celery task id: a task redelivered after its worker died carries the same id and
takes over its dead first attempt's lease at once; any other holder makes the acquire fail
with :class:`LockBusy` (a named transient error the tasks retry).

Fencing: :meth:`Lease.transaction` writes only while the lease is still ours (checked inside
a WATCH/MULTI on the lease key), and :meth:`Lease.check` is called right before acting, so a
holder that stalled past its lease and was taken over neither acts nor records.
"""
from __future__ import annotations

import threading
import time
import uuid
from contextlib import contextmanager
from typing import Any, Callable, Iterator

import redis

from warmcast.errors import WarmcastError

_RELEASE = """
if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end
"""
_RENEW = """
if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('pexpire', KEYS[1], ARGV[2]) else return 0 end
"""


class LockBusy(WarmcastError):
    """Another run holds the lease for this deployment and job."""


class LeaseLost(LockBusy):
    """The lease lapsed while its holder worked (it stalled longer than the lease) and another
    run may hold it now: the holder must neither act nor record."""


def _text(v: Any) -> str | None:
    return v.decode() if isinstance(v, bytes) else v


class Lease:
    def __init__(self, client: redis.Redis, prefix: str, job: str, deployment: str, ttl_s: float,
                 token: str | None = None) -> None:
        self.r = client
        self.key = f"{prefix}:lock:{job}:{deployment}"
        self.ttl_ms = max(1, int(ttl_s * 1000))
        self.token = token or uuid.uuid4().hex
        self.lost = False
        self._stop = threading.Event()
        self._renewer: threading.Thread | None = None

    def acquire(self) -> None:
        if not self.r.set(self.key, self.token, nx=True, px=self.ttl_ms):
            holder = _text(self.r.get(self.key))
            if holder != self.token or not self.r.set(self.key, self.token, xx=True, px=self.ttl_ms):
                raise LockBusy(f"{self.key} is held by {holder} (a run of the same job for this deployment)")
            # else: our own earlier attempt (same task id) died holding it
        self._renewer = threading.Thread(target=self._renew_until_released, name=f"lease {self.key}", daemon=True)
        self._renewer.start()

    def _renew_until_released(self) -> None:
        while not self._stop.wait(self.ttl_ms / 3000):
            try:
                if not self.r.eval(_RENEW, 1, self.key, self.token, self.ttl_ms):
                    self.lost = True
                    return
            except redis.RedisError:
                continue  # Redis away: keep trying; if the lease lapsed meanwhile the next renewal says so

    def check(self) -> None:
        """Raise :class:`LeaseLost` unless the lease is still ours (call right before acting)."""
        if self.lost or _text(self.r.get(self.key)) != self.token:
            self.lost = True
            raise LeaseLost(f"{self.key}: the lease lapsed while this run worked; another run may hold it")

    def transaction(self, write: Callable[[redis.client.Pipeline], None]) -> None:
        """Run ``write`` (queueing commands on a pipeline) as one MULTI/EXEC, only while the lease is ours."""

        def fenced(pipe: redis.client.Pipeline) -> None:
            if self.lost or _text(pipe.get(self.key)) != self.token:
                self.lost = True
                raise LeaseLost(f"{self.key}: the lease lapsed before this run could record")
            pipe.multi()
            write(pipe)

        # WATCH sees our own renewals too (PEXPIRE touches the key): redis-py retries the function then.
        self.r.transaction(fenced, self.key)

    def release(self) -> bool:
        self._stop.set()
        if self._renewer is not None:
            self._renewer.join(timeout=5)
        return bool(self.r.eval(_RELEASE, 1, self.key, self.token))


@contextmanager
def lease(client: redis.Redis, prefix: str, job: str, deployment: str, ttl_s: float, token: str | None = None,
          wait_s: float = 0.0) -> Iterator[Lease]:
    """Hold the lease of ``job`` for ``deployment`` for the block, waiting up to ``wait_s`` while
    another run holds it (then :class:`LockBusy`)."""
    held = Lease(client, prefix, job, deployment, ttl_s, token)
    deadline = time.monotonic() + wait_s
    while True:
        try:
            held.acquire()
            break
        except LockBusy:
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.05)
    try:
        yield held
    finally:
        try:
            held.release()
        except redis.RedisError:
            pass  # it lapses on its own
