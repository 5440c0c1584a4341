"""The fleet backtest's outputs: plan_<policy>.csv, report.json, the decision log, the table."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

from warmup.sim.fleet import policy_label


def write_outputs(result: Any, out: str | Path, plot: bool = True) -> list[Path]:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    times = result.split.times.strftime("%Y-%m-%d %H:%M:%S")
    for name, run in result.runs.items():
        p = out / f"plan_{name}.csv"
        pd.DataFrame({"time": times, "replicas": run.provisioned}).to_csv(p, index=False)
        written.append(p)
    rep = {"meta": result.meta, "policies": result.rows}
    p = out / "report.json"
    tmp = p.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(rep, indent=2, default=float))
    tmp.replace(p)
    written.append(p)
    pred = result.runs.get("predictive")
    if pred is not None and pred.decisions:
        p = out / "decisions_predictive.csv"
        df = pd.DataFrame(pred.decisions)
        df.insert(0, "time", times[df["t"].to_numpy()])
        df.drop(columns=["t"]).to_csv(p, index=False)
        written.append(p)
    if plot:
        from warmup.sim.plot import plot_fleet

        p = out / "fleet.png"
        plot_fleet(result, p)
        written.append(p)
    return written


def format_table(rows: dict[str, dict]) -> str:
    slo = any("slo_attainment" in r for r in rows.values())  # a calibration's curve was given
    judged = any("slo_on_test" in r for r in rows.values())   # an SLO to judge the test part by
    head = (f"{'policy':<22}{'GPU-h':>9}{'x oracle':>10}{'late>5s %':>11}" + (f"{'TTFT SLO min %':>15}" if slo else "")
            + (f"{'SLO test':>9}" if judged else "") + f"{'short min':>10}"
            f"{'scale acts':>11}{'launches':>9}{'warmups':>8}{'switches':>9}{'switch GPU-h':>13}{'late in sw':>11}")
    lines = [head, "-" * len(head)]
    for name, r in rows.items():
        ratio = r.get("gpu_hours_vs_oracle")
        att = r.get("slo_attainment")
        lines.append(f"{policy_label(name, r):<22}{r['gpu_hours']:>9.1f}"
                     f"{(ratio if ratio is not None else float('nan')):>10.3f}"
                     f"{r['late_pct']:>11.4f}" + (f"{(100 * att if att is not None else float('nan')):>15.2f}"
                                                  if slo else "")
                     + (f"{r.get('slo_on_test', ''):>9}" if judged else "")
                     + f"{r['minutes_short']:>10d}{r['scale_actions']:>11d}"
                     f"{r['launches']:>9d}{r['warmups']:>8d}{r['profile_switches']:>9d}"
                     f"{r['switch_gpu_hours']:>13.1f}{r['late_during_switches']:>11.1f}")
    lines += [f"{policy_label(n, r)}: {r['params'].get('sized', 'sized on the test part')}; no SLO verdict, "
              "a bound to read the others against" for n, r in rows.items() if r.get("hindsight")]
    return "\n".join(lines)
