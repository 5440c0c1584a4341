"""A Redis client for a scratch namespace: every key written under its prefix has an expiry from the
moment it is written.

``warmcast replay`` writes under a prefix of its own and deletes it at the end; killed with SIGKILL
it never reached the end and left its keys with no expiry (issue 41).  The keys are written by the
steps the replay drives (the tick, the signals, the stores, the audit), so the expiry is given here,
in the client they all share, not in each of them: with each write command (or pipeline) to a key
under the prefix goes, in the same MULTI/EXEC, a script that gives the keys it wrote an expiry if
they have none.  A key that carries its own (a lease, a SET ... EX) keeps it.
"""
from __future__ import annotations

from typing import Any, Iterable

import redis
from redis.client import Pipeline

# an expiry for the keys that have none (TTL -1); absent keys (-2) and those with their own are left
_ARM = ("for _, k in ipairs(KEYS) do if redis.call('ttl', k) == -1 then "
        "redis.call('expire', k, ARGV[1]) end end return 0")


class _Keys:
    """Which keys a command writes under ``prefix``: its arguments in the namespace, for a command the
    server flags as a write or a script (whose keys it declares: EVAL, EVALSHA, FCALL)."""

    def __init__(self, client: redis.Redis, prefix: str, ttl_s: int) -> None:
        self.prefix, self.ttl_s = f"{prefix}:".encode(), int(ttl_s)
        table = redis.Redis(connection_pool=client.connection_pool).command()
        self.writes = {name.upper() for name, info in table.items()
                       if {"write", "movablekeys"} & {str(f) for f in info.get("flags", ())}}

    def written(self, args: Iterable[Any]) -> list[bytes]:
        args = list(args)
        name = args[0].decode() if args and isinstance(args[0], bytes) else str(args[0]) if args else ""
        if name.split(" ")[0].upper() not in self.writes:   # redis-py sends some as "CLIENT SETNAME"
            return []
        found = (a if isinstance(a, bytes) else str(a).encode() for a in args[1:] if isinstance(a, (str, bytes)))
        return [k for k in found if k.startswith(self.prefix)]

    def arm(self, keys: list[bytes]) -> tuple[Any, ...]:
        unique = list(dict.fromkeys(keys))   # a pipeline may write one key many times
        return ("EVAL", _ARM, len(unique), *unique, self.ttl_s)


class ExpiringPipeline(Pipeline):
    """A pipeline whose commands' keys under the prefix are armed in the same MULTI/EXEC (or batch)."""

    def __init__(self, keys: _Keys, *args: Any) -> None:
        super().__init__(*args)
        self._keys = keys

    def execute(self, raise_on_error: bool = True) -> list[Any]:
        n = len(self.command_stack)
        written = [k for args, _ in self.command_stack for k in self._keys.written(args)]
        if written:
            self.pipeline_execute_command(*self._keys.arm(written))
        return super().execute(raise_on_error)[:n]

    def immediate_execute_command(self, *args: Any, **options: Any) -> Any:
        # between WATCH and MULTI: each command goes at once, the expiry right after it
        result = super().immediate_execute_command(*args, **options)
        written = self._keys.written(args)
        if written:
            super().immediate_execute_command(*self._keys.arm(written))
        return result


class ExpiringRedis(redis.Redis):
    """``client``'s connections, with every key written under ``prefix`` expiring ``ttl_s`` after its
    first write at the latest (a write that clears the expiry, as a plain SET, arms it again)."""

    def __init__(self, client: redis.Redis, prefix: str, ttl_s: int) -> None:
        super().__init__(connection_pool=client.connection_pool)
        self._keys = _Keys(client, prefix, ttl_s)

    def execute_command(self, *args: Any, **options: Any) -> Any:
        written = self._keys.written(args)
        if not written:
            return super().execute_command(*args, **options)
        # the write and its expiry in one MULTI/EXEC: no moment when the key exists without one
        pipe = Pipeline(self.connection_pool, self.response_callbacks, True, None)
        pipe.execute_command(*args, **options)
        pipe.execute_command(*self._keys.arm(written))
        return pipe.execute()[0]

    def pipeline(self, transaction: bool = True, shard_hint: Any = None) -> ExpiringPipeline:
        return ExpiringPipeline(self._keys, self.connection_pool, self.response_callbacks, transaction, shard_hint)
