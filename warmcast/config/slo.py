"""A deployment's service-level objective (the ``slo:`` key of the deployments file).

One definition read by everything that sizes or judges capacity: the risk tuning of the
predictive policy and of the baselines (issue 14), capacity calibration (15) and the
alert rules (18).  A request is *late* when it waits more than ``late_wait_s`` seconds
for an instance; the SLO holds while the late share stays at or under ``late_share``.
The latency bounds are optional; where set they are what calibration searches against and
what the alert rules fire on.
"""
from __future__ import annotations

from pydantic import Field

from warmcast.config.strict import Strict


class SLO(Strict):
    late_wait_s: float = Field(5.0, gt=0, le=3600, description="a request waiting longer than this is late")
    late_share: float = Field(0.0005, ge=0, le=1, description="allowed share of late requests (0.0005 = 0.05%)")
    ttft_p99_ms: float | None = Field(None, gt=0, description="time-to-first-token P99 bound, ms")
    e2e_p99_ms: float | None = Field(None, gt=0, description="end-to-end latency P99 bound (short prompts), ms")
    error_share: float = Field(0.001, ge=0, le=1, description="allowed share of failed requests (0.001 = 0.1%)")

    def describe(self) -> str:
        """One line for audits and reports, e.g. 'late (wait > 5 s) <= 0.05%; TTFT P99 <= 500 ms'."""
        parts = [f"late (wait > {self.late_wait_s:g} s) <= {self.late_share * 100:g}%"]
        if self.ttft_p99_ms is not None:
            parts.append(f"TTFT P99 <= {self.ttft_p99_ms:g} ms")
        if self.e2e_p99_ms is not None:
            parts.append(f"end-to-end P99 <= {self.e2e_p99_ms:g} ms")
        parts.append(f"errors <= {self.error_share * 100:g}%")
        return "; ".join(parts)
