"""The one quantile rule, for the core and everything that judges a sample like it (the lead's
P90, the warm buffer's error level, calibration's latency percentiles)."""
from __future__ import annotations

import math
from typing import Iterable


def quantile(values: Iterable[float], q: float) -> float:
    """The ``q`` quantile of ``values``: linear between order statistics (numpy's default method),
    without numpy (the core imports none). An infinite value (a failed request's latency) stays
    infinite instead of turning NaN. ``values`` must not be empty."""
    xs = sorted(float(x) for x in values)
    pos = q * (len(xs) - 1)
    lo = int(math.floor(pos))
    hi = min(lo + 1, len(xs) - 1)
    if pos == lo or xs[hi] == xs[lo]:
        return xs[lo]
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)
