"""A scrape round's arrivals recorded once, whatever the number of workers (issues 42 and 44).

A round counts each instance between two of its own readings, so it needs the readings of the round
before: the carry.  Kept in one worker process's memory, as it was, two worker processes (or two
threads of one) scraping the same deployment in turn each counted from their *own* last round, and
every interval between one's round and the other's was counted twice.  The carry now lives in Redis
beside the counts, and a round is recorded by one script that first claims the carry it counted from:
if another round was recorded since, this one is dropped whole.  Nothing is lost by that: the
counters are cumulative, so the next round counts the interval from the carry that won.
"""
from __future__ import annotations

import json
from typing import Any, Optional

from workers.context import Ctx

CARRY_TTL_S = 3600          # a carry older than this is a first round again (baseline only)
UNTIL_TTL_S = 3600          # how long the tick may read the instant the rounds counted up to

# KEYS: carry, arrivals, rounds, held, until, mix, since.  ARGV[1]: the round as JSON (numbers as strings,
# so nothing is rounded by Lua's number formatting).
_RECORD = """
local a = cjson.decode(ARGV[1])
if a.claim then
  local ts = redis.call('HGET', KEYS[1], 'ts') or ''
  if ts ~= a.claim.expected then return 0 end
  redis.call('HSET', KEYS[1], 'ts', a.claim.ts, 'doc', a.claim.doc)
  redis.call('EXPIRE', KEYS[1], a.claim.ttl)
  if ts == '' then redis.call('SET', KEYS[7], a.claim.ts, 'EX', a.claim.ttl) end
end
for _, mn in ipairs(a.by_minute) do redis.call('HINCRBYFLOAT', KEYS[2], mn[1], mn[2]) end
redis.call('HINCRBY', KEYS[3], a.minute .. ':expected', a.expected)
redis.call('HINCRBY', KEYS[3], a.minute .. ':missed', a.missed)
if a.held == '' then redis.call('DEL', KEYS[4]) else redis.call('SET', KEYS[4], a.held) end
if a['until'] ~= '' then redis.call('SET', KEYS[5], a['until'], 'EX', a.until_ttl) end
if a.mix then
  redis.call('HINCRBYFLOAT', KEYS[6], a.mix[1] .. ':long', a.mix[2])
  redis.call('HINCRBYFLOAT', KEYS[6], a.mix[1] .. ':total', a.mix[3])
end
return 1
"""


def _keys(ctx: Ctx, dep: str) -> list[str]:
    p = ctx.prefix
    return [f"{p}:scrape-carry:{dep}", f"{p}:arrivals:{dep}", f"{p}:rounds:{dep}", f"{p}:arrivals-held:{dep}",
            f"{p}:arrivals-until:{dep}", f"{p}:mix:{dep}", f"{p}:arrivals-since:{dep}"]


def load_carry(ctx: Ctx, dep: str) -> tuple[str, Optional[dict[str, Any]]]:
    """(the token a round claims, the snapshot of the last recorded round; None: a first round)."""
    ts, doc = ctx.r.hmget(_keys(ctx, dep)[0], ["ts", "doc"])
    if ts is None or doc is None:
        return "", None
    return ts.decode(), json.loads(doc)


def record_round(ctx: Ctx, dep: str, arr: dict[str, Any], mix: Optional[dict[str, Any]] = None,
                 claim: Optional[tuple[str, dict[str, Any]]] = None) -> bool:
    """Record a round's arrivals (``<prefix>:arrivals:<dep>``: minute -> arrivals; ``...:rounds:<dep>``:
    minute:expected and minute:missed; ``...:arrivals-held:<dep>``: the oldest minute a held instance
    may still add to; ``...:arrivals-until:<dep>``: the instant the round counted up to;
    ``...:arrivals-since:<dep>``: the first round's, from which rounds count) and its prompt
    mix (``...:mix:<dep>``: minute:long, minute:total), atomically.  ``claim``: (the token the round
    counted from, its own snapshot): recorded only if no other round was since; whether it was."""
    held = arr.get("held_since")
    doc: dict[str, Any] = {
        "by_minute": [[str(m), repr(float(n))] for m, n in arr["by_minute"].items()],
        "minute": str(int(arr["minute"])), "expected": int(arr["expected"]), "missed": int(arr["missed"]),
        "held": "" if held is None else str(int(held // 60)),
        "until": repr(float(arr["until"])) if arr.get("until") is not None else "", "until_ttl": UNTIL_TTL_S}
    if mix and mix.get("total"):
        doc["mix"] = [str(mix["minute"]), repr(float(mix["long"])), repr(float(mix["total"]))]
    if claim is not None:
        token, snap = claim
        doc["claim"] = {"expected": token, "ts": repr(float(snap["ts"])), "doc": json.dumps(snap),
                        "ttl": CARRY_TTL_S}
    return bool(ctx.r.eval(_RECORD, 7, *_keys(ctx, dep), json.dumps(doc)))
