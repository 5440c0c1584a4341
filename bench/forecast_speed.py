"""Forecaster speed: training on a week, one 30-step forecast, 1,000 deployments at once.

    .venv/bin/python bench/forecast_speed.py

Runs on the synthetic generator's week (``warmcast.generate``), torch limited to
2 threads (the size of this project's machines); the LSTM's two members train side by side on one
thread each (``forecaster/lstm/members.py``).  Each LSTM figure is printed
beside a baseline's: UnobservedComponents (fit once, then a Kalman-filter update
per forecast) and seasonal naive.  Targets: training <= 60 s and at most 3x UnobservedComponents'
fit, 1,000 deployments in one call <= 0.5 s (issue 32); one forecast <= 5 ms (an earlier issue's).
The fleet model's rows (issue 43) beside them: fitted once on ServeGen's 260 client series and
their four totals (``../shared/data/servegen_clients_10min.csv.gz``, days 0-9, as
``bench/global_forecast.py`` fits it) <= 5 min, and one ``predict_batch`` call for 1,000 series
<= 0.5 s (the call a shard's forecast task makes for its fleet-served deployments), the
per-deployment LSTM's fit and ``predict_many`` beside each.
The load average is printed before and after: run it on a quiet machine (under 1.5).  Writes its
section of docs/BENCHMARKS.md (``bench:forecast_speed``) unless ``--doc none`` (or ``--quick``).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
import docsection  # noqa: E402


def week_frame(seed: int = 0):
    from warmcast.generate import generate_minute_frame

    return generate_minute_frame(days=7, seed=seed)


def timeit(fn, repeat: int) -> list[float]:
    out = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


def main() -> int:
    import numpy as np
    import torch

    from forecaster.base import DAY
    from forecaster.baselines import SeasonalNaive, UCFourier
    from forecaster.lstm import LSTMConfig, LSTMForecaster

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--deployments", type=int, default=1000)
    ap.add_argument("--quick", action="store_true", help="tiny LSTM config (smoke test)")
    ap.add_argument("--no-fleet", action="store_true", help="leave out the fleet model's rows")
    docsection.add_doc_option(ap)
    args = ap.parse_args()
    torch.set_num_threads(2)
    load, command = os.getloadavg()[0], docsection.command_line()
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    frame = week_frame()
    print(f"history: {len(frame):,} minutes ({len(frame) / DAY:.0f} days), columns {list(frame.columns)}; "
          f"torch threads {torch.get_num_threads()}")
    rows = []

    cfg = LSTMConfig.tiny() if args.quick else LSTMConfig()
    lstm = LSTMForecaster(cfg, progress=False)
    t = time.perf_counter()
    lstm.fit(frame)
    t_lstm = time.perf_counter() - t
    uc = UCFourier()
    t = time.perf_counter()
    uc.fit(frame.iloc[:-200])
    t_uc = time.perf_counter() - t
    rows.append((f"train on one week ({len(frame):,} min, the generator's)", f"{t_lstm:.1f} s ({t_lstm / t_uc:.1f}x uc)", f"{t_uc:.1f} s (uc_fourier fit)",
                 "<= 60 s and <= 3x uc", t_lstm <= 60 and t_lstm <= 3 * t_uc))

    # online use: one forecast per minute on a history that grows by one minute each call
    ends = range(len(frame) - 200, len(frame))
    lstm.predict(frame.iloc[:ends[0]])
    lat = [timeit(lambda e=e: lstm.predict(frame.iloc[:e]), 1)[0] for e in ends]
    uc_lat = [timeit(lambda e=e: uc.predict(frame.iloc[:e]), 1)[0] for e in ends]
    med = statistics.median(lat) * 1000
    rows.append(("one 30-step forecast (median)", f"{med:.2f} ms (p95 {np.percentile(lat, 95) * 1000:.2f})",
                 f"{statistics.median(uc_lat) * 1000:.2f} ms (uc_fourier, Kalman update + forecast)", "<= 5 ms",
                 med <= 5))

    n = args.deployments
    rng = np.random.default_rng(1)
    histories = {}
    for i in range(n):
        h = frame[["requests"]].iloc[-(7 * DAY):] * float(rng.uniform(0.1, 10))
        histories[f"dep{i:04d}"] = h
    lstm.predict_many(dict(list(histories.items())[:10]))
    t_many = min(timeit(lambda: lstm.predict_many(histories), 3))
    sn = SeasonalNaive(DAY).fit(frame)
    t_sn = min(timeit(lambda: [sn.predict(h) for h in histories.values()], 1))
    rows.append((f"{n:,} deployments, one call", f"{t_many:.3f} s", f"{t_sn:.3f} s (seasonal naive, a loop)",
                 "<= 0.5 s", t_many <= 0.5))

    if not args.no_fleet:
        rows += fleet_rows(args.quick, n, t_lstm, t_many)
    end = os.getloadavg()[0]
    text = table(rows) + f"\n\nLoad average at the end: {end:.2f} (the LSTM's members train side by side, one thread each)."
    print(text)
    if not args.quick:
        docsection.publish(args.doc, "forecast_speed", docsection.provenance(load, command) + "\n" + text)
    return 0


def fleet_rows(quick: bool, n: int, t_lstm: float, t_many: float) -> list[tuple]:
    """The fleet model fitted on every client series and total before day 10, and one batched call."""
    import numpy as np

    import global_forecast as gf
    from forecaster.global_lstm import GlobalLSTM, fleet_config, tiny_fleet_config

    panel = gf.load(None)
    model = GlobalLSTM(tiny_fleet_config(epochs=3) if quick else fleet_config(), horizon_min=30)
    t = time.perf_counter()
    model.fit(panel.before(gf.SPLIT.dev_start))
    t_fit = time.perf_counter() - t
    hist = panel.before(gf.SPLIT.test_start)
    vals = hist.values[np.resize(np.arange(len(panel)), n)]
    model.predict_batch(vals, hist.index[-1])   # the first call pays torch's start-up
    t_batch = min(timeit(lambda: model.predict_batch(vals, hist.index[-1]), 5))
    return [(f"fleet model: fit on {len(panel)} series at once (ServeGen clients and totals, days 0-9)",
             f"{t_fit:.1f} s", f"{t_lstm:.1f} s (the per-deployment LSTM, one week of one series)", "<= 5 min",
             t_fit <= 300),
            (f"fleet model: {n:,} series, one predict_batch call", f"{t_batch:.3f} s",
             f"{t_many:.3f} s (the per-deployment LSTM's predict_many)", "<= 0.5 s", t_batch <= 0.5)]


def table(rows: list[tuple]) -> str:
    """(what, LSTM, baseline, target, met) rows as a markdown table."""
    out = ["| | LSTM | baseline beside it | target |", "|---|---|---|---|"]
    out += [f"| {r[0]} | {r[1]} | {r[2]} | {r[3]}: **{'met' if r[4] else 'not met'}** |" for r in rows]
    return "\n".join(out)


if __name__ == "__main__":
    raise SystemExit(main())
