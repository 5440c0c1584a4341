"""``warmcast plan capacity`` (the day's plan by GPU type and cost), ``warmcast plan pools`` (the
day's joint hot/cold plan) and ``warmcast pools ingest`` (a log attributed to the hot and cold
pools, one stored series per pool)."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from warmcast.errors import InputError

plan_app = typer.Typer(no_args_is_help=True, help="Capacity plans by GPU type and cost.")
pools_app = typer.Typer(no_args_is_help=True, help="Hot and cold pools: per-pool load series.")
ConfigOpt = typer.Option(None, "--config", help="YAML settings file (else WARMCAST_* env vars).")


def capacity(
    deployment: str = typer.Option(..., "--deployment", "-d"),
    horizon: str = typer.Option("24h", "--horizon", help="24h: a typical day from history; 30m: the stored forecast."),
    pool: Optional[str] = typer.Option(None, "--pool", help="hot or cold: plan that pool's series and profile."),
    quantile: float = typer.Option(0.9, "--quantile", min=0.01, max=0.99, help="Demand level planned for."),
    utilisation: Optional[float] = typer.Option(None, "--utilisation", min=0.05, max=1.0,
                                                help="Target utilisation (the SLO; default: the pool's, else 0.8)."),
    growth: Optional[float] = typer.Option(None, "--what-if-growth", min=0.01, max=100,
                                           help="What-if: demand multiplier, 1.3 = +30% traffic."),
    types: Optional[str] = typer.Option(None, "--what-if-types", help="What-if: only these GPU types (A10G,L4)."),
    what_util: Optional[float] = typer.Option(None, "--what-if-utilisation", min=0.05, max=1.0,
                                              help="What-if: another target utilisation (a stricter SLO is lower)."),
    catalogue: Optional[Path] = typer.Option(None, "--gpu-catalogue", help="YAML adding or overriding GPU types."),
    out: Path = typer.Option(Path("capacity-plan"), "--out", help="Directory for plan.json, plan.csv, plan.png."),
    config: Optional[Path] = ConfigOpt,
) -> None:
    """Print the cheapest mix of GPU types per hour that meets the SLO, its cost and the saving vs all-A100."""
    from warmcast.runtime import load_fleet, open_state, open_store
    from warmcast.config.settings import load_settings
    from warmup.planning.gpu_report import PlanAsk, build, stored_inputs, text, write_outputs

    settings = load_settings(config)
    dep = load_fleet(settings).get(deployment)
    history, forecast = stored_inputs(open_store(settings), open_state(settings), dep, pool)
    ask = PlanAsk(horizon, quantile, utilisation, pool, str(catalogue) if catalogue else None, growth,
                  tuple(t.strip() for t in types.split(",") if t.strip()) if types else None, what_util)
    doc = build(dep, history, forecast, ask)
    typer.echo(text(doc))
    for p in write_outputs(doc, out):
        typer.echo(f"wrote {p}")


def pools_plan(
    deployment: str = typer.Option(..., "--deployment", "-d"),
    step_min: int = typer.Option(10, "--step-min", min=1, max=60, help="Planning step, minutes (divides 60)."),
    quantile: float = typer.Option(0.9, "--quantile", min=0.01, max=0.99, help="Hot demand level planned for."),
    out: Path = typer.Option(Path("pools-plan.csv"), "--out", help="CSV: one row per step with its reasons."),
    config: Optional[Path] = ConfigOpt,
) -> None:
    """The next day's joint plan for the hot and cold pools under the shared limits."""
    import pandas as pd

    from warmcast.runtime import load_fleet, open_state, open_store
    from warmcast.config.settings import load_settings
    from warmup.planning.gpu_report import stored_inputs
    from warmup.planning.pools_plan import day_plan, summary

    if 60 % step_min:
        raise InputError(f"--step-min must divide 60, not {step_min}")
    settings = load_settings(config)
    dep = load_fleet(settings).get(deployment)
    store, state = open_store(settings), open_state(settings)
    hot, _ = stored_inputs(store, state, dep, "hot")
    cold, _ = stored_inputs(store, state, dep, "cold")
    rows = day_plan(dep, hot, cold, step_min, quantile)
    typer.echo(f"joint plan for {deployment}, {rows[0]['start']} + 24 h, {step_min}-min steps:")
    typer.echo(summary(rows, step_min))
    pd.DataFrame(rows).to_csv(out, index=False)
    typer.echo(f"wrote {out}")


def ingest_pools(
    log: Path = typer.Argument(..., help="Per-request log (CSV, JSONL or Parquet), or a count series with a split."),
    deployment: str = typer.Option(..., "--deployment", "-d"),
    fmt: str = typer.Option("auto", "--format", help="auto, azure, mooncake, openai, warmcast or counts."),
    hot_share: Optional[float] = typer.Option(None, "--hot-share", help="Count series: the share of each bin "
                                              "that is the hot pool's (0.8: 80% hot, 20% cold)."),
    columns: Optional[str] = typer.Option(None, "--pool-columns", metavar="HOT,COLD", help="Count series: the "
                                          "file's per-pool count columns, hot first."),
    config: Optional[Path] = ConfigOpt,
) -> None:
    """Attribute each request to hot or cold (pools.attribution) and store one series per pool; a count
    series is split by --hot-share or --pool-columns."""
    from warmcast.ingest.pool_split import CountSplit, pool_columns, store_pool_series
    from warmcast.config.pools import pool_series_name
    from warmcast.runtime import load_fleet, open_store
    from warmcast.config.settings import load_settings

    split = None
    if hot_share is not None or columns is not None:
        split = CountSplit(hot_share, pool_columns(columns) if columns is not None else None)
    settings = load_settings(config)
    dep = load_fleet(settings).get(deployment)
    if dep.pools is None:
        raise InputError(f"deployment {deployment}: no 'pools:' section in the deployments file")
    counts = store_pool_series(open_store(settings), deployment, log, dep.pools.attribution, fmt, split)
    if split is not None:
        typer.echo(f"split: {split.described}")
    for name, n in counts.items():
        typer.echo(f"{pool_series_name(deployment, name)}: {n:,.0f} requests stored")


def register(app: typer.Typer, backtest: typer.Typer) -> None:
    plan_app.command("capacity")(capacity)
    plan_app.command("pools")(pools_plan)
    pools_app.command("ingest")(ingest_pools)
    app.add_typer(plan_app, name="plan")
    app.add_typer(pools_app, name="pools")
