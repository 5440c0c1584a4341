"""The forecast's own recent short-lead errors, as the warm buffer (``warmup/core/buffer.py``) reads them.

At the start of minute ``t`` the load of minute ``t - 1`` is known; its error is that load less
what the planned quantile's forecast made ``buffer_lead_min`` minutes before said for it (the
forecast from origin ``t - 1 - L`` at lead index ``L``; index 0 is the origin minute).  Only
minutes of the test part whose forecast exists count, so nothing after ``t - 1`` is ever read.
"""
from __future__ import annotations

import math
from typing import Optional

import numpy as np

from warmup.core.config import ScalingConfig


class ForecastErrors:
    def __init__(self, cfg: ScalingConfig, levels: tuple[float, ...], fc: Optional[np.ndarray]) -> None:
        self.lead = int(cfg.buffer_lead_min)
        self.window = int(cfg.buffer_window_min)
        self.on = cfg.buffer_level is not None and fc is not None and self.lead < fc.shape[2]
        self._at_lead = None
        if self.on:  # the planned quantile at the buffer's lead for every origin, interpolated between levels
            col = fc[:, :, self.lead]                    # (T, L)
            self._at_lead = np.array([np.interp(cfg.quantile, levels, row) for row in col])
        self._errors: list[float] = []

    def reset(self) -> None:
        self._errors = []

    def observe(self, t: int, last_minute_rpm: float) -> tuple[float, ...]:
        """Record the error of minute ``t - 1`` (when known) and return the recent ones, oldest first."""
        if not self.on:
            return ()
        origin = t - 1 - self.lead
        if origin >= 0 and math.isfinite(last_minute_rpm):
            self._errors.append(last_minute_rpm - float(self._at_lead[origin]))
            if len(self._errors) > self.window:
                del self._errors[0]
        return tuple(self._errors)
