"""``GET /v1/deployments/{name}/shadow``: the shadow report (``workers/shadow_report.py``) as JSON,
with its minutes as columns for the dashboard's panel."""
from __future__ import annotations

import math
from datetime import datetime, timezone
from typing import Any, Optional

from api.deps import ApiContext
from api.errors import FieldError


def shadow_data(ctx: ApiContext, dep: str, since: str, until: Optional[str], forecaster: str) -> dict[str, Any]:
    from workers.shadow_report import WindowError, build, parse_window

    try:
        start, end = parse_window(since, until, datetime.now(timezone.utc).replace(tzinfo=None))
    except WindowError as err:  # a GET has no body: the error lies at the query parameter
        raise FieldError(("query", err.param), err.msg) from None
    rep = build(ctx.settings, dep, start, end, forecaster, client=ctx.redis)
    cols = {c: [_num(v) for v in rep.minutes[c].tolist()] for c in rep.minutes.columns}
    return {**rep.doc, "series": cols}


def _num(v: Any) -> Any:
    """JSON has no NaN: a minute without a reading is null."""
    return None if isinstance(v, float) and not math.isfinite(v) else v
