"""The SLO-tuned fleet section of docs/BENCHMARKS.md, rendered from ``bench/fleet_slo.py``'s report
(and, with ``--before``, a report of the same script at an earlier commit beside it)."""
from __future__ import annotations

from typing import Any, Optional

from docsection import provenance

POLICY_ORDER = ("predictive", "reactive", "queue", "static (test peak, hindsight)", "oracle")
KNOBS = ("quantile", "buffer_level", "target_utilisation", "stabilisation_s", "stabilisation_min",
         "reactive_utilisation", "target_waiting", "window_min", "reactive_guard", "reactive_guard_window_min")


def _row(name: str, r: dict[str, Any], late_share: float) -> str:
    knobs = {k: v for k, v in (r.get("params") or {}).items() if k in KNOBS}
    met = "yes" if r["late_share"] <= late_share else "no"
    return (f"| {name} | {r['gpu_hours']:.1f} | {r['gpu_hours_vs_oracle']:.3f}x | {r['late_pct']:.4f}% | "
            f"{r['late_episodes']} | {met} | {knobs if knobs else ''} |")


def window_table(rows: dict[str, dict], late_share: float) -> list[str]:
    out = ["| policy | GPU-h | GPU-h / oracle | late | late episodes | SLO met | knobs chosen before the window |",
           "|---|---|---|---|---|---|---|"]
    return out + [_row(p, rows[p], late_share) for p in POLICY_ORDER if p in rows]


def before_after(now: dict[str, dict], then: dict[str, dict]) -> list[str]:
    out = ["| policy | before: GPU-h / oracle, late | after: GPU-h / oracle, late |", "|---|---|---|"]
    for p in POLICY_ORDER:
        if p in now and p in then:
            a, b = then[p], now[p]
            out.append(f"| {p} | {a['gpu_hours_vs_oracle']:.3f}x, {a['late_pct']:.4f}% | "
                       f"{b['gpu_hours_vs_oracle']:.3f}x, {b['late_pct']:.4f}% |")
    return out


def render(report: dict, before: Optional[dict], before_note: str = "") -> str:
    slo = report["slo"]
    lines = [provenance(report["load_at_start"], report["command"]),
             f"Forecaster: **{report['forecaster']}**. SLO: at most {100 * slo['late_share']:.3g}% of requests "
             f"late (wait > {slo['late_wait_s']:g} s). Each policy's knobs are chosen on "
             + _tuned_on(report.get("tune_windows", 1)) + " (the forecaster trains on the data before those); "
             "the test day is read only to score them. Cold start 15 min."]
    if before is not None:
        lines += ["", f"Before/after: {before_note or 'the same script at an earlier commit'} "
                      f"(forecaster {before.get('forecaster')})."]
    for trace, windows in report["traces"].items():
        source = report.get("sources", {}).get(trace)
        lines += ["", f"Trace {trace}: {source}."] if source else []
        for day, r in windows.items():
            lines += ["", f"#### {trace}, test day {day} ({r['seconds']:.0f} s)", "",
                      *window_table(r["rows"], slo["late_share"]), "", f"Target: {r['verdict']}"]
            old = ((before or {}).get("traces", {}).get(trace) or {}).get(day)
            if old:
                lines += ["", *before_after(r["rows"], old["rows"])]
        lines += ["", f"GPU-hours / oracle against late share for every knob setting on the test day (star: the "
                      f"setting chosen before it): ![{trace}](img/fleet_slo_{trace}.png)"]
    return "\n".join(lines + sleep_table(report.get("sleep"))) + "\n"


def _tuned_on(windows: int) -> str:
    if windows <= 1:
        return "the two days before the test day"
    return (f"{windows} consecutive two-day windows before the test day, each setting judged on its worst "
            "window (rolling validation)")


def sleep_table(sleep: Optional[dict]) -> list[str]:
    """The asleep tier's variants of the tuned predictive policy on the Azure window (wake time assumed)."""
    if not sleep:
        return []
    out = ["", f"#### Asleep tier, azure {sleep['window']} (wake time ASSUMED {sleep['wake_s_assumed']:g} s, "
               "no GPU measurement)", "", "| variant | GPU-h / oracle | late | late episodes | wakes | launches |",
           "|---|---|---|---|---|---|"]
    return out + [f"| {k} | {r['gpu_hours_vs_oracle']:.3f}x | {r['late_pct']:.4f}% | {r['late_episodes']} | "
                  f"{r['wakes']} | {r['launches']} |" for k, r in sleep["rows"].items()]
