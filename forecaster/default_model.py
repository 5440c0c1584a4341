"""Build the small default model shipped as read-only package data in ``forecaster/shipped``.

    .venv/bin/python -m forecaster.default_model [--models-dir forecaster/shipped]

Trains the LSTM on the synthetic generator's week (``generate_minute_frame(days=7,
seed=0)``; no third-party data, so no licence to carry), saves it as a new version
of the ``default`` deployment and makes it the champion.  A deployment without a
champion of its own is served by it only where it beats the baselines on that
deployment's recent data (``forecaster.resolver``), and the answer says so.
Training is reproducible: the same code and seed rebuild the same weights.
"""
from __future__ import annotations

import argparse
from pathlib import Path

from forecaster.registry import DEFAULT_DEPLOYMENT, SHIPPED_DIR, Registry


def build_default(models_dir: str | Path = SHIPPED_DIR, days: int = 7, seed: int = 0, config=None,
                  progress: bool = True) -> str:
    from warmcast.generate import generate_minute_frame

    from forecaster.lstm import LSTMConfig, LSTMForecaster

    frame = generate_minute_frame(days=days, seed=seed)
    # one member on one thread: a small model that rebuilds bit for bit on any machine's load
    model = LSTMForecaster(config or LSTMConfig(members=1, threads=1), progress=progress).fit(frame)
    reg = Registry(models_dir)
    version = reg.save(DEFAULT_DEPLOYMENT, model, metrics={"validation": model.meta.get("val_metrics", {})},
                       extra={"trained_on": f"warmcast.generate.generate_minute_frame(days={days}, seed={seed})"},
                       shipped=True)
    reg.set_champion(DEFAULT_DEPLOYMENT, version, reason="shipped default", shipped=True)
    return version


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models-dir", type=Path, default=SHIPPED_DIR)
    args = ap.parse_args()
    v = build_default(args.models_dir)
    print(f"default model {DEFAULT_DEPLOYMENT}/{v} written under {args.models_dir}")


if __name__ == "__main__":
    main()
