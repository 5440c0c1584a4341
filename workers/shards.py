"""Deployments in shards (issue 44): with ``WARMCAST_WORKERS_SHARDS`` N > 0 the fan-out sends one
task per shard and kind instead of one per deployment, and that task runs the same per-deployment
step for each of its deployments (:mod:`workers.shardrun`).

A deployment's shard is a stable hash of its name: CRC-32, the same in every process and on every
machine.  Python's ``hash()`` would not do: it is salted per process, so a worker and the beat
would disagree on who belongs where.  The shard count travels in each shard task's arguments, so a
worker started with another count still ticks exactly the deployments the fan-out meant.
"""
from __future__ import annotations

import zlib
from typing import Iterable, TypeVar

from warmcast.errors import InputError

T = TypeVar("T")


def shard_of(name: str, shards: int) -> int:
    """The shard (0 .. shards-1) deployment ``name`` belongs to."""
    if shards < 1:
        raise InputError(f"shards must be at least 1 (got {shards}); WARMCAST_WORKERS_SHARDS=0 means no shards")
    return zlib.crc32(name.encode("utf-8")) % shards


def members(deployments: Iterable[T], shard: int, shards: int) -> list[T]:
    """The deployments (anything with a ``name``) of ``shard``, in the file's order."""
    return [d for d in deployments if shard_of(d.name, shards) == shard]  # type: ignore[attr-defined]


def shard_label(name: str, shards: int) -> str:
    """The ``shard`` label of a deployment's metrics: its shard, or '-' when the loop runs unsharded."""
    return str(shard_of(name, shards)) if shards > 0 else "-"
