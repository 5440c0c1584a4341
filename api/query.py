"""Query parameters of the hot routes, parsed by hand and documented by hand.

The routes pollers hit take no FastAPI parameters (parameter solving was about half their
cost); these helpers give them the same checks, the same 422 naming the field, and the
OpenAPI parameter objects that FastAPI would have written."""
from __future__ import annotations

from typing import Any, Callable, Optional

from starlette.requests import Request

from api.errors import FieldError


def number(request: Request, name: str, default: Any, lo: float, hi: float, kind: Callable[[str], Any] = float) -> Any:
    """The query parameter ``name`` as ``kind`` within [lo, hi], ``default`` when absent; FieldError otherwise."""
    raw = request.query_params.get(name)
    if raw is None:
        return default
    try:
        value = kind(raw)
    except ValueError:
        raise FieldError(("query", name), f"{raw!r} is not {'an integer' if kind is int else 'a number'}") from None
    if not lo <= value <= hi:  # NaN fails this too
        raise FieldError(("query", name), f"{value} is outside [{lo:g}, {hi:g}]")
    return value


def doc(name: str, kind: str, lo: float, hi: float, default: Optional[float], description: str = "") -> dict:
    """The OpenAPI parameter object of a numeric query parameter."""
    schema: dict[str, Any] = {"type": kind, "minimum": lo, "maximum": hi, "title": name.title()}
    if default is not None:
        schema["default"] = default
    else:
        schema = {"anyOf": [{"type": kind, "minimum": lo, "maximum": hi}, {"type": "null"}], "title": name.title()}
    return {"name": name, "in": "query", "required": False, "description": description, "schema": schema}


def path(name: str) -> dict:
    return {"name": name, "in": "path", "required": True, "schema": {"type": "string", "title": name.title()}}


# The 422 answer FastAPI documents for routes with parameters.
INVALID = {422: {"description": "Validation Error", "content": {"application/json": {"schema": {
    "$ref": "#/components/schemas/HTTPValidationError"}}}}}
