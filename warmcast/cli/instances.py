"""``warmcast measure-coldstart``: the cold-start figure of a deployment, measured on this machine."""
from __future__ import annotations

import asyncio
from pathlib import Path
from typing import List, Optional

import typer


def measure_coldstart_cmd(
    deployment: str = typer.Option(..., "--deployment", "-d", help="Deployment name (deployments file, or 'demo')."),
    profile: Optional[str] = typer.Option(None, help="Profile whose engine args to launch (default profile if unset)."),
    engine_arg: List[str] = typer.Option([], "--engine-arg", help="Override an engine arg: KEY=VALUE (repeatable)."),
    warmup_requests: int = typer.Option(8, min=1, help="Warmup requests between the cold and warm probes."),
    concurrency: int = typer.Option(2, min=1),
    repeats: int = typer.Option(3, min=1, help="Warm probes; the median is reported."),
    probe_prompt: int = typer.Option(128, min=1, help="Prompt tokens of the probe request."),
    probe_output: int = typer.Option(16, min=1, help="Generated tokens of the probe request."),
    port: int = typer.Option(0, help="First port to try (default: the deployment's scaler base_port)."),
    store: bool = typer.Option(True, "--store/--no-store", help="Save as the deployment's cold-start figure."),
    sleep_wake: Optional[bool] = typer.Option(None, "--sleep-wake/--no-sleep-wake",
                                              help="Also time /sleep and /wake_up (default: when a GPU is visible)."),
    config: Optional[Path] = typer.Option(None, "--config", help="YAML settings file (else WARMCAST_* env vars)."),
) -> None:
    """Launch one instance through the local backend and measure time to healthy and cold vs warm latency."""
    from warmcast.runtime import load_fleet, open_store
    from warmcast.config.settings import load_settings
    from warmup.actuators.coldstart import measure_coldstart, store_coldstart
    from warmup.actuators.launch import gpu_available, local_launch_spec, parse_engine_args
    from warmup.actuators.scalers import LocalProcessScaler
    from warmup.actuators.tokens import DEFAULT_TOKENS, TokenDistribution
    from warmup.actuators.vllm_client import WarmupSpec

    settings = load_settings(config)
    dep = load_fleet(settings).get(deployment)
    model, args, notes = local_launch_spec(dep, profile, settings.state_dir, parse_engine_args(engine_arg))
    if sleep_wake is None:
        sleep_wake = gpu_available()
    if sleep_wake:  # vLLM refuses --enable-sleep-mode on CPU: only ask for it where it can work
        args["enable-sleep-mode"] = True
    if dep.scaler.kind not in ("local", "dryrun"):
        notes.append(f"scaler kind {dep.scaler.kind}: measured with local processes on this machine instead")
    for n in notes:
        typer.echo(f"note: {n}")
    load_store = open_store(settings) if store else None
    tokens = DEFAULT_TOKENS
    if load_store is not None and deployment in load_store.deployments():
        tokens = TokenDistribution.from_frame(load_store.frame(deployment), default=DEFAULT_TOKENS)
        typer.echo(f"warmup lengths from stored load: prompt mean {tokens.prompt_mean:.0f}, "
                   f"output mean {tokens.output_mean:.0f} tokens")
    backend = LocalProcessScaler(dep.name, model, args, base_port=port or dep.scaler.base_port,
                                 python=dep.scaler.python, log_dir=Path(settings.state_dir) / "vllm-logs",
                                 dev_mode=True)
    typer.echo(f"launching {model} with {' '.join(f'{k}={v}' for k, v in args.items())} ...")
    result = asyncio.run(measure_coldstart(
        backend, dep.name, model=model, engine_args=args, tokens=tokens,
        warmup=WarmupSpec(count=warmup_requests, concurrency=concurrency, duration_s=600),
        probe=(probe_prompt, probe_output), repeats=repeats, notes=notes))
    typer.echo(result.summary())
    if load_store is not None:
        key = store_coldstart(load_store.r, settings.key_prefix, result)
        typer.echo(f"stored as {key}")


def register(app: typer.Typer, backtest: typer.Typer) -> None:
    app.command("measure-coldstart")(measure_coldstart_cmd)
