"""Redis clients from a URL: a plain server (``redis://``, ``rediss://``, ``unix://``) or Sentinel.

A ``sentinel://`` URL names the sentinels, not the server, in kombu's broker convention:
one ``sentinel://host:port`` per sentinel separated by ``;``, the database in a path
(``/0``), e.g. ``sentinel://h1:26379;sentinel://h2:26379/0?master_name=mymaster``.  The
master's name comes from the URL's ``master_name`` query or the ``redis_master_name``
setting.  Every client then asks the sentinels where the master is and asks again when
its connection breaks, so a failover moves the store, the broker, the result backend
and RedBeat to the promoted replica without a restart.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import redis
from redis.sentinel import Sentinel

SCHEME = "sentinel://"


@dataclass(frozen=True)
class SentinelTarget:
    """Where the sentinels are and which master they watch."""

    sentinels: tuple[tuple[str, int], ...]
    master_name: str
    db: int = 0
    password: str | None = None

    def kombu_url(self) -> str:
        """Kombu's and Celery's form: the query is dropped (master_name goes in transport options)."""
        auth = f":{self.password}@" if self.password else ""
        return ";".join(f"sentinel://{auth}{h}:{p}/{self.db}" for h, p in self.sentinels)


def is_sentinel(url: str | None) -> bool:
    return bool(url) and url.startswith(SCHEME)


def parse_sentinel(url: str, master_name: str | None = None) -> SentinelTarget:
    """The sentinels, master name and database of a ``sentinel://`` URL; ValueError says what is wrong."""
    hosts: list[tuple[str, int]] = []
    names, dbs, password = set(), set(), None
    for part in filter(None, (p.strip() for p in url.split(";"))):
        if not part.startswith(SCHEME):
            raise ValueError(f"{part!r}: each sentinel must be written sentinel://host:port, separated by ';'")
        u = urlsplit(part)
        try:
            port = u.port or 26379
        except ValueError:
            raise ValueError(f"{part!r}: the port must be a number (the sentinel's, usually 26379)") from None
        if not u.hostname:
            raise ValueError(f"{part!r}: no host; write sentinel://host:port")
        hosts.append((u.hostname, port))
        names.update(parse_qs(u.query).get("master_name", []))
        if u.path.strip("/"):
            dbs.add(u.path.strip("/"))
        password = unquote(u.password) if u.password else password
    if not hosts:
        raise ValueError("no sentinel in the URL; write sentinel://host:port[;sentinel://host:port...]")
    names |= {master_name} if master_name else set()
    if len(names) != 1:
        raise ValueError(("no master name: add ?master_name=NAME to the URL or set redis_master_name "
                          "(WARMCAST_REDIS_MASTER_NAME)") if not names else
                         f"several master names {sorted(names)}: give one, in the URL or in redis_master_name")
    if len(dbs) > 1 or not all(d.isdigit() for d in dbs):
        raise ValueError(f"database {sorted(dbs)}: give one number as the path, e.g. sentinel://host:26379/0")
    return SentinelTarget(tuple(hosts), names.pop(), int(dbs.pop()) if dbs else 0, password)


def client_for(url: str, master_name: str | None = None, **kw: Any) -> redis.Redis:
    """A client to the server at ``url``, or to whichever server the sentinels call master."""
    if not is_sentinel(url):
        return redis.Redis.from_url(url, **kw)
    t = parse_sentinel(url, master_name)
    probe = {k: v for k, v in kw.items() if k.startswith("socket_")}
    sentinel = Sentinel(list(t.sentinels), sentinel_kwargs=probe)
    return sentinel.master_for(t.master_name, db=t.db, password=t.password, **kw)


def celery_endpoints(url: str, master_name: str | None, redbeat_options: dict[str, Any]) -> dict[str, Any]:
    """Celery/RedBeat settings for ``url``: broker, result backend and RedBeat on the same Redis.

    For Sentinel: kombu's and Celery's ``sentinel://`` URLs with ``master_name`` in their transport
    options, and RedBeat's ``redis-sentinel://`` with its sentinels in ``redbeat_redis_options``.
    """
    if not is_sentinel(url):
        return {"broker_url": url, "result_backend": url, "redbeat_redis_url": url,
                "redbeat_redis_options": redbeat_options, "transport_extra": {}}
    t = parse_sentinel(url, master_name)
    beat = {**redbeat_options, "sentinels": list(t.sentinels), "service_name": t.master_name, "db": t.db}
    if t.password:
        beat["password"] = t.password
    return {"broker_url": t.kombu_url(), "result_backend": t.kombu_url(),
            "redbeat_redis_url": "redis-sentinel://", "redbeat_redis_options": beat,
            "transport_extra": {"master_name": t.master_name}}
