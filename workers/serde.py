"""Decision-core values (frozen dataclasses, enums, datetimes) to and from plain JSON.

The policy state (cooldowns, stabilisation history, switch machine, warmup state)
is stored in Redis as JSON through these two functions, so any worker can pick
up where another left off; decisions go into the audit stream the same way.
"""
from __future__ import annotations

import dataclasses
import types
import typing
from datetime import datetime, time, tzinfo
from enum import Enum
from functools import lru_cache
from typing import Any


def to_json(obj: Any) -> Any:
    """A JSON-able copy of a core value: dataclasses become dicts, enums their values."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_json(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, Enum):
        return obj.value
    if isinstance(obj, (datetime, time)):
        return obj.isoformat()
    if isinstance(obj, (list, tuple)):
        return [to_json(v) for v in obj]
    if isinstance(obj, dict):
        return {str(k): to_json(v) for k, v in obj.items()}
    if hasattr(obj, "key") and type(obj).__name__ == "ZoneInfo":
        return obj.key
    return obj


@lru_cache(maxsize=None)
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def from_json(tp: Any, data: Any) -> Any:
    """Rebuild a value of type ``tp`` from :func:`to_json`'s output."""
    if data is None:
        return None
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return from_json(args[0], data) if len(args) == 1 else data
    if origin is tuple:
        args = typing.get_args(tp)
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(from_json(args[0], v) for v in data)
        return tuple(from_json(a, v) for a, v in zip(args, data))
    if origin in (list,):
        return [from_json(typing.get_args(tp)[0], v) for v in data]
    if tp is datetime:
        return datetime.fromisoformat(data)
    if tp is time:
        return time.fromisoformat(data)
    if tp is tzinfo and isinstance(data, str):   # to_json writes a ZoneInfo as its key
        from zoneinfo import ZoneInfo

        return ZoneInfo(data)
    if isinstance(tp, type) and issubclass(tp, Enum):
        return tp(data)
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        hints = _hints(tp)
        kw = {f.name: from_json(hints[f.name], data[f.name]) for f in dataclasses.fields(tp) if f.name in data}
        return tp(**kw)
    return data


def policy_state_from_json(data: dict[str, Any] | None):
    from warmup.core import PolicyState

    return PolicyState() if not data else from_json(PolicyState, data)
