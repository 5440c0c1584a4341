"""Stored capacity calibrations, versioned per deployment and profile (issue 15).

Keys (``P`` = key prefix, ``D`` = deployment, ``R`` = profile):

- ``P:calibration:D:R``      hash: version number -> the calibration document (JSON)
- ``P:calibration-seq:D:R``  the last version number handed out
- ``P:calibration-latest:D`` hash: profile -> its current version

A new calibration gets the next version and becomes current in one MULTI/EXEC; old
versions stay (``versions``, ``get``) and the current one can be pointed back at one
(``set_current``).  :func:`capacities` is what the planner reads: per profile, the
calibrated capacity where one is stored, else the deployments file's declared one,
each with its source.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Optional

import redis
import yaml

from warmcast.errors import InputError, NotFoundError
from warmcast.rediskeys import KeyedStore


@dataclass(frozen=True, slots=True)
class ProfileCapacity:
    """The capacity the planner uses for one profile, and where it comes from."""

    profile: str
    capacity_rpm: float
    source: str                 # "calibrated" or "declared"
    version: Optional[int] = None
    created_at: Optional[str] = None

    def describe(self) -> str:
        if self.source == "calibrated":
            return f"{self.capacity_rpm:g} req/min calibrated (v{self.version}, {self.created_at})"
        return f"{self.capacity_rpm:g} req/min declared"


class CalibrationStore(KeyedStore):
    def _key(self, dep: str, profile: str) -> str:
        return self.key("calibration", dep, profile)

    def put(self, dep: str, profile: str, doc: dict[str, Any]) -> int:
        """Store ``doc`` as the next version and make it current; returns the version."""
        rpm = (doc.get("capacity") or {}).get("rpm")
        if not isinstance(rpm, (int, float)) or not rpm > 0:
            raise InputError(f"calibration for {dep}/{profile}: capacity.rpm must be a positive number, got {rpm!r}")
        version = int(self.r.incr(self.key("calibration-seq", dep, profile)))
        body = json.dumps({**doc, "deployment": dep, "profile": profile, "version": version})
        pipe = self.r.pipeline(transaction=True)
        pipe.hset(self._key(dep, profile), str(version), body)
        pipe.hset(self.key("calibration-latest", dep), profile, version)
        pipe.execute()
        return version

    def versions(self, dep: str, profile: str) -> list[int]:
        return sorted(int(v) for v in self.r.hkeys(self._key(dep, profile)))

    def get(self, dep: str, profile: str, version: Optional[int] = None) -> Optional[dict[str, Any]]:
        """A version, or the current one (None when there is none)."""
        if version is None:
            cur = self.r.hget(self.key("calibration-latest", dep), profile)
            if cur is None:
                return None
            version = int(cur)
        raw = self.r.hget(self._key(dep, profile), str(version))
        return None if raw is None else json.loads(raw)

    def set_current(self, dep: str, profile: str, version: int) -> None:
        if not self.r.hexists(self._key(dep, profile), str(version)):
            raise NotFoundError(f"no calibration v{version} for {dep}/{profile}; "
                                f"stored: {self.versions(dep, profile)}")
        self.r.hset(self.key("calibration-latest", dep), profile, version)

    def current(self, dep: str) -> dict[str, dict[str, Any]]:
        """profile -> its current calibration document."""
        out = {}
        for profile in self.r.hkeys(self.key("calibration-latest", dep)):
            name = profile.decode() if isinstance(profile, bytes) else profile
            doc = self.get(dep, name)
            if doc is not None:
                out[name] = doc
        return out

    def export_yaml(self, dep: str) -> str:
        """Every stored version of the deployment's calibrations, as YAML (curves included)."""
        profiles = {}
        for key in self.r.scan_iter(self.key("calibration", dep, "*")):
            name = (key.decode() if isinstance(key, bytes) else key).rsplit(":", 1)[1]
            profiles[name] = {"current": (self.get(dep, name) or {}).get("version"),
                              "versions": [self.get(dep, name, v) for v in self.versions(dep, name)]}
        return yaml.safe_dump({"deployment": dep, "calibrations": profiles}, sort_keys=False)


def capacities(deployment: Any, calibrated: dict[str, dict[str, Any]]) -> dict[str, ProfileCapacity]:
    """Per profile of ``deployment``: its calibrated capacity where ``calibrated`` (profile -> document,
    as :meth:`CalibrationStore.current`) has one, else the declared ``capacity_rpm``.  Pure."""
    out = {}
    for name, prof in deployment.profiles.items():
        doc = calibrated.get(name)
        if doc is not None:
            out[name] = ProfileCapacity(name, float(doc["capacity"]["rpm"]), "calibrated", doc.get("version"),
                                        doc.get("created_at"))
        else:
            out[name] = ProfileCapacity(name, float(prof.capacity_rpm), "declared")
    return out


def load_capacities(client: redis.Redis, prefix: str, deployment: Any) -> dict[str, ProfileCapacity]:
    """:func:`capacities` with the calibrations stored in Redis."""
    return capacities(deployment, CalibrationStore(client, prefix).current(deployment.name))
