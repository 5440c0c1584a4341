"""The field's own forecasters on the fleet benchmark's panel (issue 43): run by
``bench/global_forecast.py`` inside ``.venv-anchors`` (``scripts/setup-anchors.sh``), never by the
service.  It imports no warmcast code: the panel comes in as arrays, the forecasts go out as arrays.

    .venv-anchors/bin/python bench/anchors.py IN.npz OUT.npz

- statsforecast ``AutoETS`` and ``MSTL`` (daily season; ten days hold too few weeks for a weekly
  one), per series: each fitted once on the training steps, then applied with those parameters at
  every origin to the steps strictly before it (the models' own ``forward``, what statsforecast's
  ``cross_validation(refit=False)`` does), as the project's baselines are.  MSTL runs on the rows
  the job marks (the model totals): its ``forward`` decomposes the whole history again at every
  origin, 0.2 s a call here, about 2 CPU-hours over every client's 288 test origins;
- neuralforecast ``LSTM`` with a multi-quantile loss, one model over every series (a global model,
  each window scaled to itself by its ``scaler_type``), trained once on the training steps, then
  asked at every origin for the next steps from the steps strictly before it.

Quantiles: P50 is the point forecast (statsforecast's mean); P10/P90, P95 and P99 are the bounds of
the 80%, 90% and 98% intervals (the normal intervals of statsforecast's models, the quantiles of
neuralforecast's loss).  A series' missing steps count as zero requests (a client with no row in
a 10-minute bin sent none); a statsforecast model that fails on a series is reported, and that
series gets no forecast from it (scored as missing, never replaced).
"""
from __future__ import annotations

import multiprocessing as mp
import os
import sys
import time
import warnings

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("NIXTLA_ID_AS_COL", "1")

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

INTERVALS = (80, 90, 98)
# (interval, side) giving each of the levels 0.1, 0.5, 0.9, 0.95, 0.99; None: the point forecast
LEVEL_OF = ((80, "lo"), None, (80, "hi"), (90, "hi"), (98, "hi"))

_JOB = None   # (values, train_end, origins, horizon) for the forked workers


def _stats_one(i: int) -> tuple[int, dict, dict]:
    """Series i under each statsforecast model: (i, model -> (origins, h, 5) forecasts, model -> why it failed)."""
    from statsforecast.models import MSTL, AutoETS

    values, train_end, origins, h, mstl = _JOB
    y = np.nan_to_num(values[i].astype(float), nan=0.0)
    out, failed = {}, {}
    models = [("statsforecast_autoets", AutoETS(season_length=144))]
    models += [("statsforecast_mstl", MSTL(season_length=144))] if mstl[i] else []
    for name, model in models:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                model.fit(y[:train_end])
                rows = []
                for o in origins:
                    f = model.forward(y=y[:o], h=h, level=list(INTERVALS))
                    rows.append(np.stack([f["mean"] if lv is None else f[f"{lv[1]}-{lv[0]}"] for lv in LEVEL_OF],
                                         axis=1))
            out[name] = np.maximum(np.stack(rows), 0.0)
        except Exception as err:  # noqa: BLE001 - one series failing one model is reported, not fatal
            failed[name] = f"{type(err).__name__}: {err}"[:200]
    return i, out, failed


def statsforecast_panel(values: np.ndarray, train_end: int, origins: np.ndarray, h: int, scored: np.ndarray,
                        mstl: np.ndarray, workers: int) -> tuple[dict, dict, dict]:
    global _JOB
    _JOB = (values, train_end, origins, h, mstl)
    names = ("statsforecast_autoets", "statsforecast_mstl")
    preds = {m: np.full((len(values), len(origins), h, 5), np.nan) for m in names}
    failed: dict = {m: {} for m in names}
    t = time.perf_counter()
    with mp.get_context("fork").Pool(workers) as pool:
        for i, out, why in pool.imap_unordered(_stats_one, np.flatnonzero(scored), chunksize=2):
            for m, p in out.items():
                preds[m][i] = p
            for m, w in why.items():
                failed[m][int(i)] = w
    secs = {m: (time.perf_counter() - t) / len(names) for m in names}   # wall time, shared by the two
    return preds, failed, secs


def neural_panel(values: np.ndarray, start: pd.Timestamp, step_min: int, train_end: int, origins: np.ndarray,
                 h: int, scored: np.ndarray, quick: bool) -> tuple[np.ndarray, float]:
    """One neuralforecast LSTM over every series (training steps only), then every origin."""
    import logging

    import torch
    from neuralforecast import NeuralForecast
    from neuralforecast.losses.pytorch import MQLoss
    from neuralforecast.models import LSTM

    logging.getLogger("pytorch_lightning").setLevel(logging.ERROR)
    logging.getLogger("lightning").setLevel(logging.ERROR)
    torch.set_num_threads(2)
    ids = [f"s{i}" for i in range(len(values))]
    ds = pd.date_range(start, periods=values.shape[1], freq=f"{step_min}min")
    y = np.nan_to_num(values.astype(float), nan=0.0)

    def frame(end: int, rows: np.ndarray) -> pd.DataFrame:
        return pd.DataFrame({"unique_id": np.repeat([ids[i] for i in rows], end), "ds": np.tile(ds[:end], len(rows)),
                             "y": y[rows, :end].ravel()})

    rows = np.flatnonzero(scored)
    model = LSTM(h=h, input_size=144, loss=MQLoss(level=list(INTERVALS)), scaler_type="robust",
                 max_steps=20 if quick else 500, batch_size=64, random_seed=1, enable_progress_bar=False,
                 enable_model_summary=False, logger=False, accelerator="cpu")
    nf = NeuralForecast(models=[model], freq=f"{step_min}min")
    t = time.perf_counter()
    nf.fit(frame(train_end, rows))
    fit_s = time.perf_counter() - t
    cols = ["LSTM-lo-80", "LSTM-median", "LSTM-hi-80", "LSTM-hi-90", "LSTM-hi-98"]
    out = np.full((len(values), len(origins), h, 5), np.nan)
    for k, o in enumerate(origins):
        f = nf.predict(df=frame(int(o), rows))
        f = f.assign(pos=f.groupby("unique_id").cumcount())
        for j, c in enumerate(cols):
            grid = f.pivot(index="unique_id", columns="pos", values=c).reindex([ids[i] for i in rows])
            out[rows, k, :, j] = grid.to_numpy()[:, :h]
    return np.maximum(np.sort(out, axis=-1), 0.0), fit_s


def main() -> int:
    src, dst = sys.argv[1], sys.argv[2]
    job = np.load(src, allow_pickle=False)
    values, origins, h = job["values"], job["origins"].astype(int), int(job["horizon"])
    train_end, scored, workers = int(job["train_end"]), job["scored"].astype(bool), int(job["workers"])
    start, step_min, quick = pd.Timestamp(str(job["start"])), int(job["step_min"]), bool(job["quick"])
    mstl = job["mstl"].astype(bool)
    preds, failed, secs = statsforecast_panel(values, train_end, origins, h, scored, mstl, workers)
    print(f"anchors: statsforecast done in {sum(secs.values()):.0f} s; failures "
          + ", ".join(f"{m} {len(v)}" for m, v in failed.items()), flush=True)
    preds["neuralforecast_lstm"], secs["neuralforecast_lstm"] = neural_panel(values, start, step_min, train_end,
                                                                            origins, h, scored, quick)
    print(f"anchors: neuralforecast LSTM fitted in {secs['neuralforecast_lstm']:.0f} s", flush=True)
    np.savez(dst, names=np.array(list(preds)), **{f"pred_{m}": p for m, p in preds.items()},
             secs=np.array([secs[m] for m in preds]),
             failed=np.array([f"{m}: {len(v)} series ({next(iter(v.values()), '')})" for m, v in failed.items() if v]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
