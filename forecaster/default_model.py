"""Build the default model shipped as read-only package data in ``forecaster/shipped``.

    nice -n 19 .venv/bin/python -m forecaster.default_model [--data-dir ../shared/data]

A global LSTM (``forecaster.lstm``, fitted on several series at once) pretrained on public
per-minute traces (:data:`TRACES`: the Azure LLM inference trace 2024, conversation
service, before 2024-05-16; NASA-HTTP, July 1995) and the project's synthetic generator
week.  It is saved as a new version of the ``default`` deployment, made the champion, and
the older versions are removed (the package carries one model).  The metadata's
``trained_on`` names every trace (file, span, minutes, licence).  A deployment without a
champion of its own is served by it only where it beats the baselines on that
deployment's recent data (``forecaster.resolver``), and the answer says so.
Training is reproducible: the same code, data and seed rebuild the same weights.
"""
from __future__ import annotations

import argparse
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from forecaster.registry import DEFAULT_DEPLOYMENT, INDEX, SHIPPED_DIR, Registry, atomic_write_json
from warmcast.errors import InputError

# ../shared/data seen from the repository root (where the project's real traces live)
DATA_DIR = Path(__file__).resolve().parents[1].parent / "shared" / "data"
AZURE_CITE = ('Stojkovic et al., "DynamoLLM: Designing LLM Inference Clusters for Performance and Energy '
              'Efficiency" (2024); Patel et al., "Splitwise: Efficient Generative LLM Inference Using Phase '
              'Splitting" (ISCA 2024)')
NASA_CITE = ('M. Arlitt and C. Williamson, "Web Server Workload Characterization: The Search for Invariants" '
             '(ACM SIGMETRICS 1996); logs collected by Jim Dumoulin (NASA KSC)')


@dataclass(frozen=True)
class Trace:
    """One public per-minute trace the shipped model is trained on."""

    file: str
    start: str
    end: str  # inclusive; the span is cut to its last observed minute
    what: str
    licence: str
    source: str
    cite: str


TRACES: tuple[Trace, ...] = (
    Trace("azure2024_conversation_per_minute.csv", "2024-05-12 00:00", "2024-05-15 23:59",
          "Azure LLM inference trace 2024, conversation service, requests per minute (UTC); the days "
          "before 2024-05-16 only, so the benchmark test days 2024-05-16..18 stay unseen",
          "CC-BY 4.0", "Microsoft Azure Public Dataset (github.com/Azure/AzurePublicDataset)", AZURE_CITE),
    Trace("nasa_http_1995_per_minute.csv", "1995-07-01 00:00", "1995-07-31 23:59",
          "NASA Kennedy Space Center WWW server, HTTP requests per minute (local time, -0400); blank "
          "minutes are missing; the July log ends at the outage from 1995-07-28 13:33",
          "public (Internet Traffic Archive; general traffic patterns only, as its page asks)",
          "ita.ee.lbl.gov/html/contrib/NASA-HTTP.html", NASA_CITE),
)
GENERATOR = {"days": 7, "seed": 0}  # warmcast.generate.generate_minute_frame: the demo's traffic shape


def load_trace(trace: Trace, data_dir: Path) -> pd.DataFrame:
    """The trace's per-minute requests over its span, cut to its last observed minute."""
    from warmcast.ingest import load_minute_frame

    path = Path(data_dir) / trace.file
    if not path.is_file():
        raise InputError(f"{path} is missing: the shipped model is trained on the public traces in "
                         f"../shared/data (see forecaster/shipped/README.md); pass --data-dir")
    frame = load_minute_frame(path)[["requests"]]
    frame = frame.loc[pd.Timestamp(trace.start):pd.Timestamp(trace.end) + pd.Timedelta(seconds=59)]
    observed = frame.index[np.isfinite(frame["requests"].to_numpy(dtype=float))]
    if not len(observed):
        raise InputError(f"{path}: no observed minute in {trace.start} .. {trace.end}")
    return frame.loc[observed[0]:observed[-1]]


def describe(frame: pd.DataFrame, **facts) -> dict:
    """What the metadata says about one training series."""
    v = frame["requests"].to_numpy(dtype=float)
    return {**facts, "span": [str(frame.index[0]), str(frame.index[-1])], "minutes": int(len(v)),
            "observed_minutes": int(np.isfinite(v).sum()), "mean_per_min": round(float(np.nanmean(v)), 1)}


def training_series(data_dir: Path = DATA_DIR) -> tuple[list[pd.DataFrame], list[dict]]:
    """(frames, their descriptions): every public trace, then the generator week."""
    from warmcast.generate import generate_minute_frame

    frames, facts = [], []
    for t in TRACES:
        frame = load_trace(t, data_dir)
        frames.append(frame)
        facts.append(describe(frame, **{k: v for k, v in asdict(t).items() if k not in ("start", "end")}))
    gen = generate_minute_frame(**GENERATOR)
    frames.append(gen)
    facts.append(describe(gen, file=None, what=f"warmcast.generate.generate_minute_frame(days={GENERATOR['days']}, "
                                             f"seed={GENERATOR['seed']}), the project's synthetic generator",
                          licence="the project's own", source="warmcast.generate", cite=None))
    return frames, facts


def keep_only(models_dir: Path, version: str) -> None:
    """Drop every other version of the shipped default model (the package carries one)."""
    d = Path(models_dir) / DEFAULT_DEPLOYMENT
    for p in d.iterdir():
        if p.is_dir() and p.name != version and p.name.startswith("v"):
            shutil.rmtree(p)
    idx = Registry(models_dir).index(DEFAULT_DEPLOYMENT)
    idx["versions"] = {version: idx["versions"][version]}
    idx["history"] = []
    atomic_write_json(d / INDEX, idx)


def build_default(models_dir: str | Path = SHIPPED_DIR, data_dir: str | Path = DATA_DIR, config=None,
                  progress: bool = True) -> str:
    """Train the shipped default model on :func:`training_series`; returns its version."""
    from forecaster.lstm import LSTMConfig, LSTMForecaster

    frames, facts = training_series(Path(data_dir))
    # one member on one thread: a small model that rebuilds bit for bit on any machine's load
    model = LSTMForecaster(config or LSTMConfig(members=1, threads=1), progress=progress).fit(frames)
    reg = Registry(models_dir)
    version = reg.save(DEFAULT_DEPLOYMENT, model, metrics={"validation": model.meta.get("val_metrics", {})},
                       extra={"trained_on": facts, "built_by": "python -m forecaster.default_model"},
                       shipped=True)
    reg.set_champion(DEFAULT_DEPLOYMENT, version, reason="shipped default", shipped=True)
    keep_only(Path(models_dir), version)
    return version


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models-dir", type=Path, default=SHIPPED_DIR)
    ap.add_argument("--data-dir", type=Path, default=DATA_DIR, help="folder of the public traces (TRACES)")
    args = ap.parse_args()
    v = build_default(args.models_dir, args.data_dir)
    print(f"default model {DEFAULT_DEPLOYMENT}/{v} written under {args.models_dir}")


if __name__ == "__main__":
    main()
