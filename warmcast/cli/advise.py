"""``warmcast advise profiles``: profiles per daily window from the stored context lengths."""
from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import Optional

import typer

advise_app = typer.Typer(no_args_is_help=True, help="Recommendations read from the stored load.")


def profiles(
    deployment: str = typer.Option(..., "--deployment", "-d", help="Deployment name (its stored load is read)."),
    out: Optional[Path] = typer.Option(None, "--out", help="Write the deployments-file fragment here (else stdout)."),
    plot: Optional[Path] = typer.Option(None, "--plot", help="Context length by hour with the windows (.png/.svg)."),
    memory_gb: Optional[float] = typer.Option(None, "--memory-gb", min=1,
                                              help="Accelerator memory per instance (default: gpu: section, else 80)."),
    weights_gb: Optional[float] = typer.Option(None, "--weights-gb", min=0.1, help="Model weight memory (default 16)."),
    kv_bytes: float = typer.Option(131072.0, "--kv-bytes-per-token", min=1,
                                   help="KV cache bytes per token (default: Llama-3-8B in 16 bit)."),
    config: Optional[Path] = typer.Option(None, "--config", help="YAML settings file (else WARMCAST_* env vars)."),
) -> None:
    """Find the daily windows where the context-length distribution shifts and propose a profile
    per window (block size, sequences, batched tokens, swap space) with the schedule and pre-warm
    times, as a deployments-file fragment with the reasons as comments."""
    from warmcast.runtime import load_fleet, open_store
    from warmcast.config.settings import load_settings
    from warmup.planning.advisor_io import advise, deployment_or_bare
    from warmup.planning.advisor_render import plot as draw, plot_path

    if plot is not None:
        plot_path(plot)  # a bad suffix is refused before any work
    settings = load_settings(config)
    store = open_store(settings)
    dep = deployment_or_bare(load_fleet(settings), deployment)
    advice = advise(store, dep, datetime.now(timezone.utc), memory_gb=memory_gb, weights_gb=weights_gb,
                    kv_bytes_per_token=kv_bytes)
    for r in advice.windows.reasons + advice.proposal.reasons:
        typer.echo(r, err=out is None)
    if out is None:
        typer.echo(advice.fragment)
    else:
        out.write_text(advice.fragment)
        typer.echo(f"wrote the deployments-file fragment to {out} (check it: warmcast deployments check {out})")
    if plot is not None:
        typer.echo(f"wrote {draw(advice.windows, advice.proposal, plot, deployment)}")


def register(app: typer.Typer, backtest: typer.Typer) -> None:
    advise_app.command("profiles")(profiles)
    app.add_typer(advise_app, name="advise")
