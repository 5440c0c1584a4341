"""The one way warmcast's Redis stores name their keys: ``prefix:part:part...``."""
from __future__ import annotations

import redis


class KeyedStore:
    """A Redis client and the prefix every key it writes starts with (one prefix per install,
    so several installs, or test runs, share one Redis without touching each other's keys)."""

    def __init__(self, client: redis.Redis, prefix: str = "wc") -> None:
        self.r = client
        self.prefix = prefix

    def key(self, *parts: str) -> str:
        return ":".join((self.prefix, *parts))
