"""The simulator's side of the warm buffer's error record (the rule is ``warmup.core.buffer.lead_error_record``).

At the start of minute ``t`` the load of minute ``t - 1`` is known; its error is that load less what
the planned quantile's forecast made ``buffer_lead_min`` minutes before said for it (the forecast from
origin ``t - 1 - L`` at lead index ``L``; index 0 is the origin minute).  Only minutes of the test part
whose forecast exists count, so nothing after ``t - 1`` is ever read.  The live tick keeps the same
record in Redis (``workers/steps/tick_inputs.py``) and calls the same rule.
"""
from __future__ import annotations

from datetime import datetime
from typing import Optional, Sequence

import numpy as np

from warmup.core.buffer import lead_error_record, minute_key
from warmup.core.inputs import level_value
from warmup.core.config import ScalingConfig


class ForecastErrors:
    def __init__(self, cfg: ScalingConfig, levels: tuple[float, ...], fc: Optional[np.ndarray],
                 times: Sequence[datetime], origins: Optional[Sequence[datetime]] = None) -> None:
        self.cfg = cfg
        lead = int(cfg.buffer_lead_min)
        self.on = cfg.buffer_level is not None and fc is not None and lead < fc.shape[2]
        self.planned: dict[int, float] = {}
        if self.on:  # the planned quantile at the buffer's lead for every origin, by the minute it is for;
            # a minute keeps its earliest forecast, as the live record does (rows may share an origin)
            for t, row in enumerate(fc[:, :, lead].tolist()):
                origin = times[t] if origins is None else origins[t]
                self.planned.setdefault(minute_key(origin) + lead, level_value(levels, row, cfg.quantile))
        self.actual: dict[int, float] = {}

    def reset(self) -> None:
        self.actual = {}

    def observe(self, now: datetime, last_minute_rpm: float) -> tuple[tuple[int, ...], tuple[float, ...]]:
        """Record the load of the minute before ``now`` and return the recent (minutes, errors), oldest first."""
        if not self.on:
            return (), ()
        self.actual[minute_key(now) - 1] = last_minute_rpm
        return lead_error_record(self.cfg, self.planned, self.actual, now)
