"""Build the small default model shipped in ``models/default`` so a new install forecasts at once.

    .venv/bin/python -m forecaster.default_model [--models-dir models]

Trains the LSTM on the synthetic generator's week (``generate_minute_frame(days=7,
seed=0)``), saves it as a new version of the ``default`` deployment and makes it
the champion.  Deployments without a champion of their own are served by it
(``Registry.serving_model``), and the forecast's note says so.
"""
from __future__ import annotations

import argparse
from pathlib import Path

from forecaster.registry import DEFAULT_DEPLOYMENT, Registry

ROOT = Path(__file__).resolve().parent.parent


def build_default(models_dir: str | Path = ROOT / "models", days: int = 7, seed: int = 0, config=None,
                  progress: bool = True) -> str:
    from warmcast.generate import generate_minute_frame

    from forecaster.lstm import LSTMConfig, LSTMForecaster

    frame = generate_minute_frame(days=days, seed=seed)
    # no time budget: the shipped artifact must not depend on how busy the machine was
    model = LSTMForecaster(config or LSTMConfig(time_budget_s=1e9), progress=progress).fit(frame)
    reg = Registry(models_dir)
    version = reg.save(DEFAULT_DEPLOYMENT, model, metrics={"validation": model.meta.get("val_metrics", {})},
                       extra={"trained_on": f"warmcast.generate.generate_minute_frame(days={days}, seed={seed})"},
                       shipped=True)
    reg.set_champion(DEFAULT_DEPLOYMENT, version, reason="shipped default", shipped=True)
    return version


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models-dir", type=Path, default=ROOT / "models")
    args = ap.parse_args()
    v = build_default(args.models_dir)
    print(f"default model {DEFAULT_DEPLOYMENT}/{v} written under {args.models_dir}")


if __name__ == "__main__":
    main()
