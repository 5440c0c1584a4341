"""Live state shared by workers and the API, in Redis.

Keys (``P`` = key prefix, ``D`` = deployment):

- ``P:forecast:D``     latest forecast (JSON, see :func:`forecast_to_dict`)
- ``P:plan:D``         latest plan (JSON: desired replicas per minute ahead, reasons, warmups, switches)
- ``P:signals:D``      latest live signals (JSON: queue depth, P99, running, ready instances, ts)
- ``P:audit:D``        stream of every decision: ts, kind, decision, reason, applied, outcome, inputs
- ``P:fleet:D``        stream of (ts, desired, actual) replicas per planning tick, for the dashboard
- ``P:paused:D``       present while automatic actions are paused (JSON: by, reason, ts)
- ``P:profile-request:D`` a manual profile switch waiting for the next switch tick
- ``P:policy:D``       the decision core's policy state (cooldowns, switch machine), JSON

Everything stored is plain JSON: any worker can pick up after another dies.
"""
from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pandas as pd

from warmcast.forecast import Forecast
from warmcast.rediskeys import KeyedStore

AUDIT_MAXLEN = 100_000
FLEET_MAXLEN = 20_160  # two weeks of minutes


def forecast_to_dict(fc: Forecast, created_at: pd.Timestamp | None = None,
                     trained_at: str | None = None) -> dict[str, Any]:
    return {
        "origin": fc.origin.strftime("%Y-%m-%d %H:%M:%S"),
        "model": fc.model,
        "version": fc.version,
        "note": fc.note,
        "trained_at": trained_at,
        "created_at": (created_at or pd.Timestamp.now(tz="UTC").tz_localize(None)).strftime("%Y-%m-%d %H:%M:%S"),
        "mean": [round(float(v), 4) for v in fc.mean],
        "quantiles": {str(q): [round(float(v), 4) for v in arr] for q, arr in sorted(fc.quantiles.items())},
        **({"step_min": fc.step_min} if fc.step_min != 1 else {}),  # a coarse series' bins: requests per bin
    }


def forecast_from_dict(d: dict[str, Any]) -> Forecast:
    return Forecast(origin=pd.Timestamp(d["origin"]), mean=np.asarray(d["mean"], float),
                    quantiles={float(q): np.asarray(v, float) for q, v in d["quantiles"].items()},
                    model=d["model"], version=d.get("version", "0"), note=d.get("note", ""),
                    step_min=int(d.get("step_min", 1)))


def _clean(obj: Any) -> Any:
    """Make numpy values, timestamps and NaN JSON-safe."""
    if isinstance(obj, dict):
        return {str(k): _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return [_clean(v) for v in obj.tolist()]
    if isinstance(obj, (np.integer,)):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        return None if math.isnan(obj) or math.isinf(obj) else float(obj)
    if isinstance(obj, pd.Timestamp):
        return obj.strftime("%Y-%m-%d %H:%M:%S")
    return obj


def _plain(obj: Any) -> Any:
    """json's ``default``: what :func:`_clean` makes of numpy values and timestamps, else the text."""
    if isinstance(obj, (np.ndarray, np.integer, np.floating, pd.Timestamp)):
        return _clean(obj)
    return str(obj)


def dumps(obj: Any) -> str:
    """``obj`` as compact JSON, NaN and infinities as null.  json's own encoder first: walking every
    document through :func:`_clean` was a fifth of the tick's CPU (issue 44's profile, 100
    deployments); a document holding a non-finite number or a key json refuses takes the walk."""
    try:
        return json.dumps(obj, separators=(",", ":"), allow_nan=False, default=_plain)
    except (ValueError, TypeError):
        return json.dumps(_clean(obj), separators=(",", ":"), default=str)


class StateStore(KeyedStore):
    # ------------------------------------------------------------ JSON documents
    def put(self, kind: str, dep: str, doc: dict[str, Any], ttl_s: int | None = None) -> None:
        self.r.set(self.key(kind, dep), dumps(doc), ex=ttl_s)

    def get(self, kind: str, dep: str) -> dict[str, Any] | None:
        raw = self.r.get(self.key(kind, dep))
        return None if raw is None else json.loads(raw)

    def put_forecast(self, dep: str, fc: Forecast, trained_at: str | None = None,
                     now: pd.Timestamp | None = None) -> dict[str, Any]:
        doc = forecast_to_dict(fc, now, trained_at)
        self.put("forecast", dep, doc)
        return doc

    def get_forecast(self, dep: str) -> dict[str, Any] | None:
        return self.get("forecast", dep)

    # ------------------------------------------------------------ pause / manual switch
    def set_paused(self, dep: str, paused: bool, by: str = "api", reason: str = "") -> None:
        if paused:
            self.put("paused", dep, {"by": by, "reason": reason, "ts": pd.Timestamp.now(tz="UTC")})
        else:
            self.r.delete(self.key("paused", dep))

    def paused(self, dep: str) -> dict[str, Any] | None:
        return self.get("paused", dep)

    def request_profile(self, dep: str, profile: str, by: str = "api") -> None:
        self.put("profile-request", dep, {"profile": profile, "by": by, "ts": pd.Timestamp.now(tz="UTC")})

    def take_profile_request(self, dep: str) -> dict[str, Any] | None:
        raw = self.r.getdel(self.key("profile-request", dep))
        return None if raw is None else json.loads(raw)

    # ------------------------------------------------------------ audit trail
    def audit(self, dep: str, kind: str, decision: str, reason: str, applied: bool,
              outcome: str = "", inputs: dict[str, Any] | None = None, ts: pd.Timestamp | None = None) -> str:
        """Append one decision with its reason; returns the stream id."""
        ts = ts or pd.Timestamp.now(tz="UTC").tz_localize(None)
        fields = {"ts": ts.strftime("%Y-%m-%d %H:%M:%S"), "kind": kind, "decision": decision, "reason": reason,
                  "applied": "1" if applied else "0", "outcome": outcome, "inputs": dumps(inputs or {})}
        sid = self.r.xadd(self.key("audit", dep), fields, maxlen=AUDIT_MAXLEN, approximate=True)
        return sid.decode() if isinstance(sid, bytes) else sid

    def audit_log(self, dep: str, kind: str | None = None, since: str | None = None,
                  limit: int = 100) -> list[dict[str, Any]]:
        """Newest first; ``since`` is a 'YYYY-MM-DD HH:MM:SS' lower bound on ts."""
        out = []
        for sid, f in self.r.xrevrange(self.key("audit", dep), count=max(limit * 5, 500)):
            row = {k.decode(): v.decode() for k, v in f.items()}
            if kind and row["kind"] != kind:
                continue
            if since and row["ts"] < since:
                break
            row.update(id=sid.decode(), applied=row["applied"] == "1", inputs=json.loads(row["inputs"]))
            out.append(row)
            if len(out) >= limit:
                break
        return out

    # ------------------------------------------------------------ fleet history
    def record_fleet(self, dep: str, ts: pd.Timestamp, desired: int, actual: int | None) -> None:
        self.r.xadd(self.key("fleet", dep), {"ts": ts.strftime("%Y-%m-%d %H:%M:%S"), "desired": desired,
                                             "actual": -1 if actual is None else actual},
                    maxlen=FLEET_MAXLEN, approximate=True)

    def fleet_history(self, dep: str, limit: int = 1440) -> pd.DataFrame:
        rows = self.r.xrevrange(self.key("fleet", dep), count=limit)
        recs = [{k.decode(): v.decode() for k, v in f.items()} for _, f in reversed(rows)]
        df = pd.DataFrame(recs, columns=["ts", "desired", "actual"])
        df[["desired", "actual"]] = df[["desired", "actual"]].astype(int)
        df["actual"] = df["actual"].where(df["actual"] >= 0)
        return df
