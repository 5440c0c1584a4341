"""Training rows from one series or several (a global model pretrained on public traces).

``fit`` takes one history or a list of them (per-minute frames of any size: a NASA web
log near 50 requests/min beside an LLM service near 2,700).  Each series gives its own
origins (an equal share of ``max_origins``), each origin's inputs and targets scaled by
that series' own level at the origin (:mod:`forecaster.lstm.features`: log1p load minus
the log level of the last ``level_window`` minutes), and its own time-ordered split;
the rows are then stacked.  One series gives exactly the rows it always gave.

Day-of-week inputs are used only when every series spans ``dow_min_days``: a calendar
input that some series cannot teach is left out for all.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from forecaster.base import DAY, InsufficientHistory, minute_series, resolution
from forecaster.lstm.config import LSTMConfig
from forecaster.lstm.features import training_set
from forecaster.lstm.training import split


@dataclass
class TrainingData:
    """Stacked rows of every series; ``tr``/``va`` index them."""

    seq: np.ndarray
    static: np.ndarray
    target: np.ndarray
    tr: np.ndarray
    va: np.ndarray
    spans: list[dict] = field(default_factory=list)  # per series: start, end, origins, val_start


def as_histories(history) -> list:
    """A list of histories: ``history`` itself when it is a list or tuple, else ``[history]``."""
    if isinstance(history, (list, tuple)):
        if not history:
            raise InsufficientHistory("lstm: no series to train on")
        return list(history)
    return [history]


def settle(histories: list, cfg: LSTMConfig) -> None:
    """Set ``cfg.step_min`` (one resolution for every series) and ``cfg.use_dow``."""
    series = [minute_series(h) for h in histories]
    steps = sorted({resolution(s) for s in series})
    if len(steps) > 1:
        raise ValueError(f"lstm: the series to train on have different resolutions ({steps} minutes); "
                         "one model forecasts one step size")
    cfg.step_min = steps[0]
    cfg.use_dow = all(len(s) * cfg.step_min / DAY >= cfg.dow_min_days for s in series)


def build(histories: list, cfg: LSTMConfig) -> TrainingData:
    """Origins, split and rows of every series, stacked (call :func:`settle` first)."""
    share = max(cfg.max_origins // len(histories), 1)
    parts, spans, tr, va, offset = [], [], [], [], 0
    for i, h in enumerate(histories):
        try:
            ends, seq, static, target = training_set(h, cfg, max_origins=share)
        except InsufficientHistory as err:
            raise InsufficientHistory(f"series {i + 1} of {len(histories)}: {err}" if len(histories) > 1
                                      else str(err)) from None
        t, v, val_start = split(ends, cfg)
        s = minute_series(h)
        spans.append({"start": str(s.index[0]), "end": str(s.index[-1]), "train_origins": int(len(t)),
                      "val_origins": int(len(v)), "val_start": str(s.index[val_start])})
        parts.append((seq, static, target))
        tr.append(t + offset)
        va.append(v + offset)
        offset += len(ends)
    seq, static, target = (np.concatenate([p[k] for p in parts]) if len(parts) > 1 else parts[0][k]
                           for k in range(3))
    return TrainingData(seq, static, target, np.concatenate(tr), np.concatenate(va), spans)


def summary(data: TrainingData) -> dict:
    """The training range for the model's metadata: one series' span as before, else the
    earliest start, the latest end and every series' span."""
    first = data.spans[0]
    out = {"train_start": min(pd.Timestamp(s["start"]) for s in data.spans),
           "train_end": max(pd.Timestamp(s["end"]) for s in data.spans)}
    out = {k: str(v) for k, v in out.items()}
    out.update(train_origins=int(len(data.tr)), val_origins=int(len(data.va)))
    if len(data.spans) == 1:
        out["val_start"] = first["val_start"]
    else:
        out["series"] = data.spans
    return out
