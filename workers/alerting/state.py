"""What alert responses keep in Redis, and how it changes what the loop sees of a deployment.

Keys (``P`` = key prefix, ``D`` = deployment):

- ``P:alert-episodes:D``   hash: group key -> episode (JSON), the receiver's idempotence record; it keeps
  the fingerprints seen and the last notification's (fingerprint, status) pairs
- ``P:alert-notes:D``      stream of every notification received (what Alertmanager sent)
- ``P:alert-reports:D``    list of the newest diagnostic reports (JSON), for the API and dashboard
- ``P:profile-variants:D`` hash: derived profile name -> {base, engine_args, capacity_rpm, ...}
- ``P:alert-floor:D``      the planner floor a standby response raised, and what it was before
- ``P:failover:D``         present while the deployment runs on its DR target (JSON: scaler, since)

:func:`effective` is the deployment the loop acts on: the file's, plus derived profiles (so
the profile switch and the scaler know them), on the DR scaler while failed over.
"""
from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import redis

from warmcast.config.deployments import Deployment, Profile, ScalerSpec
from warmcast.state import dumps
from warmup.core.alerts import AlertNote, Episode, Tier

REPORTS_KEPT = 50
NOTES_KEPT = 10_000


def key(prefix: str, kind: str, dep: str) -> str:
    return f"{prefix}:{kind}:{dep}"


def effective(r: redis.Redis, prefix: str, dep: Deployment) -> tuple[Deployment, tuple]:
    """(the deployment the loop acts on, a signature that changes when it does)."""
    pipe = r.pipeline(transaction=False)
    pipe.hgetall(key(prefix, "profile-variants", dep.name))
    pipe.get(key(prefix, "failover", dep.name))
    variants, failover = pipe.execute()
    if not variants and not failover:
        return dep, ()
    update: dict[str, Any] = {}
    if variants:
        extra = {k.decode(): json.loads(v) for k, v in variants.items()}
        update["profiles"] = {**dep.profiles, **{name: Profile(**{f: v[f] for f in ("capacity_rpm",
                              "capacity_tokens_per_s", "engine_args")}) for name, v in extra.items()
                              if name not in dep.profiles}}
    if failover:
        update["scaler"] = ScalerSpec.model_validate(json.loads(failover)["scaler"])
    sig = (tuple(sorted(update.get("profiles", {}))), failover or b"")
    return dep.model_copy(update=update), sig


def put_variant(r: redis.Redis, prefix: str, dep: str, name: str, doc: dict[str, Any]) -> None:
    r.hset(key(prefix, "profile-variants", dep), name, dumps(doc))


# --------------------------------------------------------------------------- episodes and notes

def _ts(v: datetime | None) -> str | None:
    return None if v is None else v.isoformat()


def _dt(v: str | None) -> datetime | None:
    return None if v is None else datetime.fromisoformat(v)


def note_from_doc(d: dict[str, Any]) -> AlertNote:
    return AlertNote(group_key=str(d["group_key"]), deployment=str(d["deployment"]), status=str(d["status"]),
                     tier=Tier.parse(d.get("tier")), alertnames=tuple(d.get("alertnames") or ()),
                     starts_at=_dt(d["starts_at"]), ends_at=_dt(d.get("ends_at")), adjust=str(d.get("adjust") or ""),
                     received_at=_dt(d.get("received_at")),
                     alerts=tuple((str(f), str(st)) for f, st in d.get("alerts") or ()))


def episode_to_doc(e: Episode) -> dict[str, Any]:
    return {"group_key": e.group_key, "deployment": e.deployment, "starts_at": _ts(e.starts_at),
            "opened": _ts(e.opened), "tier": e.tier.name.lower(), "tier_at": _ts(e.tier_at), "done": list(e.done),
            "alertnames": list(e.alertnames), "resolved_at": _ts(e.resolved_at), "fingerprints": list(e.fingerprints),
            "last_alerts": [{"fingerprint": f, "status": st} for f, st in e.last_alerts]}


def episode_from_doc(d: dict[str, Any]) -> Episode:
    return Episode(group_key=d["group_key"], deployment=d["deployment"], starts_at=_dt(d["starts_at"]),
                   opened=_dt(d["opened"]), tier=Tier[d["tier"].upper()], tier_at=_dt(d.get("tier_at")),
                   done=tuple(d.get("done") or ()), alertnames=tuple(d.get("alertnames") or ()),
                   resolved_at=_dt(d.get("resolved_at")), fingerprints=tuple(d.get("fingerprints") or ()),
                   last_alerts=tuple((a["fingerprint"], a["status"]) for a in d.get("last_alerts") or ()))


def load_episode(r: redis.Redis, prefix: str, dep: str, group_key: str) -> Episode | None:
    raw = r.hget(key(prefix, "alert-episodes", dep), group_key)
    return None if raw is None else episode_from_doc(json.loads(raw))


def store_episode(r: redis.Redis, prefix: str, e: Episode) -> None:
    r.hset(key(prefix, "alert-episodes", e.deployment), e.group_key, dumps(episode_to_doc(e)))


def episodes(r: redis.Redis, prefix: str, dep: str) -> list[dict[str, Any]]:
    """Every stored episode of ``dep``, newest first."""
    docs = [json.loads(v) for v in r.hgetall(key(prefix, "alert-episodes", dep)).values()]
    return sorted(docs, key=lambda d: d["opened"], reverse=True)


def record_note(r: redis.Redis, prefix: str, dep: str, doc: dict[str, Any]) -> str:
    sid = r.xadd(key(prefix, "alert-notes", dep), {"note": dumps(doc)}, maxlen=NOTES_KEPT, approximate=True)
    return sid.decode() if isinstance(sid, bytes) else sid


def keep_report(r: redis.Redis, prefix: str, dep: str, doc: dict[str, Any]) -> None:
    k = key(prefix, "alert-reports", dep)
    pipe = r.pipeline()
    pipe.lpush(k, dumps(doc))
    pipe.ltrim(k, 0, REPORTS_KEPT - 1)
    pipe.execute()


def reports(r: redis.Redis, prefix: str, dep: str, limit: int = 10) -> list[dict[str, Any]]:
    return [json.loads(v) for v in r.lrange(key(prefix, "alert-reports", dep), 0, limit - 1)]
