"""The calibration's files: ``calibration.json`` (the document) and ``calibration.png``.

Both are written to a temporary name and renamed, so a failed run never leaves a
half-written file where a previous calibration was.
"""
from __future__ import annotations

import json
import math
import os
import platform
import shutil
import subprocess
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Optional

from warmcast.config.slo import SLO
from warmup.calibration.evidence import requests_to_resolve
from warmup.calibration.search import RateEvidence, Standing

FORMAT = 1


def hardware() -> dict[str, Any]:
    """The machine running the calibration (the server's too when it is local): CPU, cores, memory, GPUs."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = None
    try:
        mem = round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2 ** 30, 1)
    except (ValueError, OSError, AttributeError):
        pass
    gpus: list[str] = []
    if shutil.which("nvidia-smi"):
        try:
            out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                                 text=True, timeout=20).stdout
            gpus = [g.strip() for g in out.splitlines() if g.strip()]
        except (OSError, subprocess.TimeoutExpired):
            pass
    return {"host": platform.node(), "cpu": cpu, "cores": os.cpu_count(), "memory_gib": mem, "gpus": gpus}


def document(run: dict[str, Any], *, slo: SLO, plan: Any, url: str, server: dict[str, Any],
             deployment: Optional[str] = None, profile: Optional[str] = None,
             now: Optional[datetime] = None) -> dict[str, Any]:
    """The calibration document from :func:`warmup.calibration.runner.run_calibration`'s result."""
    head = run["headline"]
    scen = {}
    for name, r in run["results"].items():
        scen[name] = {"parts": [{"share": s, "prompt_tokens": n, "label": lab} for s, n, lab in r.scenario.parts],
                      "output_tokens": r.scenario.output, "probe_rps": round(r.probe_rps, 4),
                      "rates_rps": {k: round(v, 4) for k, v in r.rates.items()},
                      "capacity_rps": None if r.capacity_rps is None else round(r.capacity_rps, 4),
                      "capacity_rpm": None if r.capacity_rps is None else round(r.capacity_rps * 60, 2),
                      "tokens_per_s": r.tokens_per_s, "reason": r.reason, "curve": r.curve,
                      "rates": [rate_row(e) for _, e in sorted(r.book.items())]}
    return {
        "format": FORMAT, "created_at": (now or datetime.now(timezone.utc)).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "deployment": deployment, "profile": profile, "url": url,
        "capacity": {"scenario": head.scenario.name, "rps": round(head.capacity_rps, 4),
                     "rpm": round(head.capacity_rps * 60, 2), "tokens_per_s": head.tokens_per_s,
                     **uncertainty(head, plan.confidence)},
        "slo": slo.model_dump(), "slo_text": slo.describe(),
        "server": {"model": run["model"], "max_model_len": run["max_model_len"], **server},
        "hardware": hardware(),
        "matrix": {"scaling": run["scaling"].note, "prompt_factor": round(run["scaling"].factor, 6),
                   "arrivals": plan.arrivals, "warmup_s": plan.warmup_s, "step_s": plan.step_s,
                   "hold_s": plan.hold_s,
                   "min_requests": plan.min_requests, "confidence": plan.confidence,
                   "requests_to_resolve_p99": requests_to_resolve(plan.confidence),
                   "judged": (f"a rate holds when, over every request sent at it (at least "
                              f"{requests_to_resolve(plan.confidence)}, in two load steps or more, one of them "
                              f"{plan.hold_s:g} s long), the SLO "
                              "holds and the one-sided "
                              f"{plan.confidence:.0%} upper bound of its TTFT P99 (order statistics, requests "
                              "taken as independent) is within the bound"),
                   "drain_s": plan.drain_s, "probe_s": plan.probe_s, "probe_concurrency": plan.probe_concurrency,
                   "tolerance": plan.tolerance, "max_steps": plan.max_steps,
                   "rate_scaling": "low/typical/peak = 50/200/500 req/s scaled so that peak = the probe's throughput"},
        "generator": run.get("generator"), "scenarios": scen, "burst": run["burst"],
    }


def _ms(x: float) -> Optional[float]:
    return round(x, 3) if math.isfinite(x) else None


def rate_row(e: RateEvidence) -> dict[str, Any]:
    """One rate's standing over every request sent at it (JSON: an unbounded bound is null)."""
    return {"rate_rps": round(e.rate_rps, 4), "standing": e.standing.value, "requests": e.requests, "steps": e.steps,
            "ttft_p99_ms": _ms(e.ttft_p99_ms), "ttft_p99_lower_ms": _ms(e.ttft_p99_lower_ms),
            "ttft_p99_upper_ms": _ms(e.ttft_p99_upper_ms), "reason": e.reason}


def uncertainty(res: Any, confidence: float) -> dict[str, Any]:
    """What the answer is sure of: the requests it held over, its P99's bounds, the lowest rate that
    broke (the capacity lies between the two, give or take the search's tolerance)."""
    held = res.book[res.capacity_rps]
    broke = [r for r, e in res.book.items() if e.standing is Standing.BROKE and r > res.capacity_rps]
    return {"confidence": confidence, "requests": held.requests, "ttft_p99_ms": _ms(held.ttft_p99_ms),
            "ttft_p99_upper_ms": _ms(held.ttft_p99_upper_ms),
            "lowest_broken_rps": round(min(broke), 4) if broke else None}


def _replace_atomically(path: Path, write) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        write(tmp)
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)


def write_files(doc: dict[str, Any], out_dir: Path) -> tuple[Path, Path]:
    """``calibration.json`` and ``calibration.png`` under ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    js, png = out_dir / "calibration.json", out_dir / "calibration.png"
    _replace_atomically(js, lambda p: p.write_text(json.dumps(doc, indent=1)))
    _replace_atomically(png, lambda p: plot(doc, p))
    return js, png


def plot(doc: dict[str, Any], path: Path) -> None:
    """TTFT and end-to-end P99 against the rate per scenario, the SLO line and the chosen capacity."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    scen = doc["scenarios"]
    panels = len(scen) + (1 if doc.get("burst") else 0)
    cols = min(panels, 2)  # a grid, not a strip: five panels in one row were each too small to read
    rows = -(-panels // cols)
    fig, grid = plt.subplots(rows, cols, figsize=(6.4 * cols, 4.4 * rows), squeeze=False)
    axes = list(grid.flat)
    for ax in axes[panels:]:
        ax.remove()
    slo = doc["slo"]
    for ax, (name, s) in zip(axes, scen.items()):
        pts = sorted(s["curve"], key=lambda p: p["rate_rps"])
        rates = [p["rate_rps"] for p in pts]
        for key, style in (("ttft_ms", "o-"), ("e2e_ms", "s--")):
            ax.plot(rates, [p[key]["p99"] if p[key]["p99"] is not None else float("nan") for p in pts], style,
                    label=f"{key[:-3].upper()} P99")
        ax.plot(rates, [p["ttft_ms"]["p50"] if p["ttft_ms"]["p50"] is not None else float("nan") for p in pts],
                ".:", label="TTFT P50")
        bound = slo.get("ttft_p99_ms") or slo["late_wait_s"] * 1000.0
        ax.axhline(bound, color="red", lw=1, label=f"SLO TTFT P99 {bound:g} ms")
        _mark_failed_steps(ax, pts)
        _rate_bounds(ax, s.get("rates", []), bound)
        if s["capacity_rps"] is not None:
            ax.axvline(s["capacity_rps"], color="green", lw=1, label=f"capacity {s['capacity_rps']:.3g} req/s")
        ax.set_yscale("log")
        ax.set_title(f"{name} ({', '.join(str(p['prompt_tokens']) for p in s['parts'])} tokens)")
        ax.set_xlabel("offered rate, req/s")
        ax.set_ylabel("latency, ms")
        ax.legend(fontsize=7)
    if doc.get("burst"):
        _plot_burst(axes[panels - 1], doc["burst"])
    gen = (doc.get("generator") or {}).get("name", "unknown generator")
    fig.suptitle(f"{Path(doc['server']['model']).name}, load sent by {gen}\nSLO: {doc['slo_text']}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=90, format="png")
    plt.close(fig)


def _mark_failed_steps(ax, pts: list[dict[str, Any]]) -> None:
    """A failed step in red at its TTFT P99, named by the bound it broke: one that failed on errors
    sits under the SLO line, and the picture says why it failed anyway."""
    failed = [p for p in pts if not p["passed"] and p["ttft_ms"]["p99"] is not None]
    if failed:
        ax.plot([p["rate_rps"] for p in failed], [p["ttft_ms"]["p99"] for p in failed], "x", color="red", ms=8,
                label="step that failed")
    for p in failed:
        other = [n for n in p.get("failed_on", []) if n != "TTFT P99"]
        if other:
            ax.annotate("failed: " + ", ".join(other), (p["rate_rps"], p["ttft_ms"]["p99"]), fontsize=6,
                        color="red", xytext=(3, -9), textcoords="offset points")


def _rate_bounds(ax, rates: list[dict[str, Any]], bound: float) -> None:
    """Each rate's pooled TTFT P99 with its confidence bounds (an unbounded end drawn to 3x the SLO)."""
    pts = [r for r in rates if r["ttft_p99_ms"] is not None]
    if not pts:
        return
    ys = [r["ttft_p99_ms"] for r in pts]
    lo = [max(y - r["ttft_p99_lower_ms"], 0.0) if r["ttft_p99_lower_ms"] else 0.0 for y, r in zip(ys, pts)]
    hi = [max((r["ttft_p99_upper_ms"] or 3 * bound) - y, 0.0) for y, r in zip(ys, pts)]
    ax.errorbar([r["rate_rps"] for r in pts], ys, yerr=[lo, hi], fmt="none", ecolor="gray", capsize=3, lw=1,
                label="rate's P99, confidence bounds (all its requests)")
    for r, y in zip(pts, ys):
        ax.annotate(r["standing"], (r["rate_rps"], y), fontsize=6, color="gray", xytext=(3, 3),
                    textcoords="offset points")


def burst_text(b: dict[str, Any]) -> str:
    """What the burst did to the P99 TTFT, in words (a failure counts as infinitely slow)."""
    peak = b.get("peak_window_p99_ms")
    worst = f"highest {peak:g} ms" if peak is not None else "some requests failed"
    if b["recovery_s"] is None:
        return f"P99 TTFT still over {b['bound_ms']:g} ms at the end of the run: not recovered ({worst})"
    if b["recovery_s"] == 0:
        return (f"P99 TTFT under {b['bound_ms']:g} ms in every {b['window_s']:g}-s window of the burst "
                f"({worst}): nothing to recover from")
    return f"P99 TTFT over {b['bound_ms']:g} ms, back under {b['recovery_s']:g} s after the step ({worst})"


def _plot_burst(ax, b: dict[str, Any]) -> None:
    xs = [t for t, v in b["samples"] if v is not None]
    ax.plot(xs, [v for _, v in b["samples"] if v is not None], ".", ms=3, label="TTFT per request")
    ax.axvline(b["step_at_s"], color="orange", lw=1, label=f"{b['low_rps']:.3g} -> {b['high_rps']:.3g} req/s")
    ax.axhline(b["bound_ms"], color="red", lw=1, label="SLO")
    if b["recovery_s"]:
        ax.axvline(b["step_at_s"] + b["recovery_s"], color="green", lw=1, label=f"recovered +{b['recovery_s']} s")
    ax.set_yscale("log")
    ax.set_title("burst: low -> 6x low\n" + burst_text(b).split(" (")[0], fontsize=9)
    ax.set_xlabel("send time, s")
    ax.set_ylabel("TTFT, ms")
    ax.legend(fontsize=7)
