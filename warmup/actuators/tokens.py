"""Prompt and output lengths of a deployment, for warmup requests that look like its traffic.

:class:`TokenDistribution` is a small value: two lognormals (prompt, output) and a
cap.  Build it from the load store's per-minute frame with
:meth:`TokenDistribution.from_frame` (columns ``requests``, ``input_tokens``,
``output_tokens``, ``ctx_mean``, ``ctx_p95``); the vLLM client only takes it as
an input and never reads Redis itself.

Fit: a lognormal with mean ``m`` and 95th percentile ``p`` has
``ln m = mu + s^2/2`` and ``ln p = mu + z95 s``, so ``s`` is the smaller root of
``s^2/2 - z95 s + ln(p/m) = 0``.  The frame has no per-request spread of output
lengths (only a per-minute sum), so the output lognormal reuses the prompt's
spread, capped at ``DEFAULT_SIGMA``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from warmcast.errors import InputError

Z95 = 1.6448536269514722
DEFAULT_SIGMA = 0.8


def lognormal_from_mean_p95(mean: float, p95: float | None) -> tuple[float, float]:
    """(mu, sigma) of the lognormal with this mean and 95th percentile."""
    if not (mean > 0 and math.isfinite(mean)):
        raise InputError(f"token mean must be a positive number, got {mean}")
    if p95 is None or not math.isfinite(p95) or p95 <= mean:
        sigma = DEFAULT_SIGMA if p95 is None or not math.isfinite(p95) else 0.05
    else:
        d = math.log(p95 / mean)
        disc = Z95 * Z95 - 2 * d
        # A p95 more than e^(z95^2/2) ~ 3.9x the mean has no lognormal; use the widest one.
        sigma = Z95 - math.sqrt(disc) if disc > 0 else Z95
    return math.log(mean) - sigma * sigma / 2, sigma


@dataclass(frozen=True)
class TokenDistribution:
    prompt_mu: float
    prompt_sigma: float
    output_mu: float
    output_sigma: float
    max_prompt: int = 8192
    max_output: int = 2048

    @classmethod
    def fixed(cls, prompt: int, output: int) -> "TokenDistribution":
        """Every request has the same lengths (sigma 0)."""
        return cls(math.log(max(prompt, 1)), 0.0, math.log(max(output, 1)), 0.0)

    @classmethod
    def from_stats(cls, prompt_mean: float, prompt_p95: float | None, output_mean: float,
                   output_p95: float | None = None) -> "TokenDistribution":
        pmu, ps = lognormal_from_mean_p95(prompt_mean, prompt_p95)
        if output_p95 is None:
            os_ = min(ps, DEFAULT_SIGMA)
            omu = math.log(output_mean) - os_ * os_ / 2
        else:
            omu, os_ = lognormal_from_mean_p95(output_mean, output_p95)
        return cls(pmu, ps, omu, os_)

    @classmethod
    def from_frame(cls, frame: Any, default: "TokenDistribution | None" = None) -> "TokenDistribution":
        """Fit from the load store's per-minute frame (a pandas DataFrame).

        Request-weighted: prompt mean = sum(input_tokens) / sum(requests) (or the
        weighted ``ctx_mean``), p95 = request-weighted mean of ``ctx_p95``,
        output mean = sum(output_tokens) / sum(requests).  Minutes without
        requests or token columns are ignored; with no usable minute at all the
        ``default`` is returned (or InputError raised when there is none).
        """
        cols = set(getattr(frame, "columns", []))
        if "requests" not in cols or not ({"input_tokens", "ctx_mean"} & cols) or "output_tokens" not in cols:
            if default is not None:
                return default
            raise InputError(f"load frame lacks token columns (has {sorted(cols)}); need requests, "
                             "input_tokens or ctx_mean, output_tokens")
        req = frame["requests"].to_numpy(dtype=float)
        out = frame["output_tokens"].to_numpy(dtype=float)
        if "input_tokens" in cols:
            inp = frame["input_tokens"].to_numpy(dtype=float)
        else:
            inp = frame["ctx_mean"].to_numpy(dtype=float) * req
        ok = np.isfinite(req) & (req > 0) & np.isfinite(inp) & np.isfinite(out)
        if not ok.any() or inp[ok].sum() <= 0 or out[ok].sum() <= 0:
            if default is not None:
                return default
            raise InputError("load frame has no minute with requests and token counts")
        prompt_mean = inp[ok].sum() / req[ok].sum()
        output_mean = out[ok].sum() / req[ok].sum()
        p95 = None
        if "ctx_p95" in cols:
            c95 = frame["ctx_p95"].to_numpy(dtype=float)
            good = ok & np.isfinite(c95)
            if good.any():
                p95 = float(np.average(c95[good], weights=req[good]))
        return cls.from_stats(prompt_mean, p95, output_mean)

    def capped(self, max_model_len: int) -> "TokenDistribution":
        """Keep prompt + output within a server's context length."""
        max_out = max(1, min(self.max_output, max_model_len // 4))
        return TokenDistribution(self.prompt_mu, self.prompt_sigma, self.output_mu, self.output_sigma,
                                 max_prompt=max(1, max_model_len - max_out), max_output=max_out)

    def sample(self, rng: np.random.Generator, n: int = 1) -> list[tuple[int, int]]:
        """``n`` (prompt_tokens, output_tokens) pairs, each at least 1 and within the caps."""
        p = np.exp(rng.normal(self.prompt_mu, self.prompt_sigma, n))
        o = np.exp(rng.normal(self.output_mu, self.output_sigma, n))
        p = np.clip(np.rint(p), 1, self.max_prompt).astype(int)
        o = np.clip(np.rint(o), 1, self.max_output).astype(int)
        return list(zip(p.tolist(), o.tolist()))

    @property
    def prompt_mean(self) -> float:
        return math.exp(self.prompt_mu + self.prompt_sigma ** 2 / 2)

    @property
    def output_mean(self) -> float:
        return math.exp(self.output_mu + self.output_sigma ** 2 / 2)


# Chat-like default when a deployment has no token history yet (Azure 2023 conversation
# trace scale: ~1k prompt tokens, ~250 generated).
DEFAULT_TOKENS = TokenDistribution.from_stats(1000.0, 3000.0, 250.0)
