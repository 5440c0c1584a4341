"""Model verdicts shared by every process of a fleet (issue 44).

Where no trained model serves a deployment, the resolver judges a pretrained one (the shipped
model, the fleet model on a deployment it never saw) by backtesting it on the deployment's last
hours (``forecaster.resolver.judge``): about a quarter of a CPU-second, once per deployment and
judge period (``forecaster.resolver.judge_window``).  Each worker process judged for itself, and a
shard's deployments move between processes, so every process paid for every deployment.  The first
process to judge writes the verdict here, under the model's version and the judge window's end;
the others read it.  A deployment's verdicts expire a period after the last one written: the next
period's window asks again anyway.
"""
from __future__ import annotations

import json
from typing import Any

from forecaster.resolver import JUDGE_EVERY_H

TTL_S = (JUDGE_EVERY_H + 1) * 3600


class SharedVerdicts:
    """``(wins, why)`` per deployment and verdict key, in one Redis hash per deployment."""

    def __init__(self, r: Any, prefix: str) -> None:
        self.r, self.prefix = r, prefix

    def _key(self, deployment: str) -> str:
        return f"{self.prefix}:verdicts:{deployment}"

    def get(self, deployment: str, key: str) -> tuple[bool, str] | None:
        raw = self.r.hget(self._key(deployment), key)
        if raw is None:
            return None
        try:
            wins, why = json.loads(raw)
        except (ValueError, TypeError):   # not a verdict this code wrote: judged again, and overwritten
            return None
        return bool(wins), str(why)

    def put(self, deployment: str, key: str, verdict: tuple[bool, str]) -> None:
        pipe = self.r.pipeline(transaction=False)
        pipe.hset(self._key(deployment), key, json.dumps([bool(verdict[0]), verdict[1]]))
        pipe.expire(self._key(deployment), TTL_S)
        pipe.execute()
