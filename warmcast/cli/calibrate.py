"""``warmcast calibrate``: measure what one instance serves within the SLO; ``warmcast calibration``: the stored ones."""
from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, List, Optional

import typer

calibration_app = typer.Typer(no_args_is_help=True, help="Stored capacity calibrations: list, export, pick a version.")
ConfigOpt = typer.Option(None, "--config", help="YAML settings file (else WARMCAST_* env vars).")


def calibrate_cmd(
    out: Path = typer.Option(..., "--out", help="Directory for calibration.json and calibration.png."),
    url: Optional[str] = typer.Option(None, "--url", help="A running OpenAI-compatible (vLLM) server to calibrate."),
    deployment: Optional[str] = typer.Option(
        None, "--deployment", "-d", help="Deployment (deployments file): its SLO is used and the result is stored "
        "for it; without --url one instance of --profile is launched through its local backend."),
    profile: Optional[str] = typer.Option(None, "--profile", help="Profile to calibrate (default: the deployment's)."),
    model: Optional[str] = typer.Option(None, "--model", help="Served model to load (default: the first served)."),
    engine_arg: List[str] = typer.Option([], "--engine-arg", help="Launch mode: override an engine arg, KEY=VALUE."),
    port: int = typer.Option(0, "--port", help="Launch mode: first port to try (default: the scaler's base_port)."),
    slo_ttft_p99_ms: Optional[float] = typer.Option(None, min=0.001, help="SLO: TTFT P99 bound, ms (overrides the "
                                                                         "deployment's)."),
    slo_e2e_p99_ms: Optional[float] = typer.Option(None, min=0.001, help="SLO: end-to-end P99 of short prompts, ms."),
    slo_error_share: Optional[float] = typer.Option(None, min=0.0, max=1.0, help="SLO: allowed failed share "
                                                                                 "(0.001 = 0.1%)."),
    slo_late_wait_s: Optional[float] = typer.Option(None, min=0.001, help="SLO: a first token later than this is late."),
    slo_late_share: Optional[float] = typer.Option(None, min=0.0, max=1.0, help="SLO: allowed late share."),
    scenarios: str = typer.Option("short,medium,long,mix", help="Scenarios to run, comma-separated: short, medium, "
                                  "long (1k/4k/32k prompts, scaled to the server), mix (70% short + 30% long)."),
    headline: Optional[str] = typer.Option(None, help="Scenario whose capacity is the result (default: mix if run, "
                                                      "else the first)."),
    warmup_s: float = typer.Option(5.0, min=0.0, help="Unmeasured warm-up at the step's rate before each step."),
    step_s: float = typer.Option(15.0, min=1.0, help="Measured seconds per load step (longer at low rates: "
                                                     "--min-requests)."),
    hold_s: float = typer.Option(30.0, min=1.0, help="A rate holds once one step at it lasted this long (sustained)."),
    min_requests: int = typer.Option(20, min=1, help="Arrivals a step's measured window holds on average."),
    drain_s: float = typer.Option(10.0, min=0.5, help="Wait this long after a step's last request; later ones fail."),
    probe_s: float = typer.Option(8.0, min=1.0, help="Seconds of the throughput probe that scales the rates."),
    probe_concurrency: int = typer.Option(8, min=1, help="Requests outstanding during the probe."),
    arrivals: str = typer.Option("poisson", help="Arrival process of a step: poisson or constant."),
    burst: bool = typer.Option(True, "--burst/--no-burst", help="Run the low -> 6x low burst step."),
    burst_s: float = typer.Option(20.0, min=1.0, help="Seconds at 6x the low rate."),
    tolerance: float = typer.Option(0.1, min=0.01, max=1.0, help="Stop bisecting when the failing rate is within "
                                                                 "this share above the passing one."),
    max_steps: int = typer.Option(12, min=2, max=50, help="Most load steps per scenario, the answer's "
                                                          "confirmation included."),
    confidence: float = typer.Option(0.95, min=0.5, max=0.999, help="A rate holds when the upper bound of its "
                                     "TTFT P99 at this confidence is within the SLO, over at least the requests that "
                                     "resolve it (299 at 0.95)."),
    output_tokens: Optional[int] = typer.Option(None, min=1, help="Generated tokens per request (default: scaled "
                                                                  "256)."),
    seed: int = typer.Option(0, help="Seed of arrivals and prompts."),
    store: bool = typer.Option(True, "--store/--no-store", help="Store the result as a new calibration version of "
                                                                "--deployment/--profile (Redis)."),
    engine: str = typer.Option("vllm-bench", "--engine", help="Load generator that sends every step: vllm-bench "
                               "(`vllm bench serve`) or guidellm (GuideLLM; the server needs a tokenizer)."),
    bench_python: Optional[Path] = typer.Option(None, "--bench-python", help="Python of the install that has the "
        "load generator (default: vllm-bench: $WARMCAST_VLLM_PYTHON or .venv-vllm/bin/python, built by scripts/setup-"
        "vllm.sh; guidellm: $WARMCAST_GUIDELLM_PYTHON or .venv-guidellm/bin/python, built by scripts/setup-guidellm.sh)."),
    tokenizer: Optional[str] = typer.Option(None, "--tokenizer", help="Tokenizer the load generator builds prompts "
                                            "with: a local path or hub name (default: the served model)."),
    config: Optional[Path] = ConfigOpt,
) -> None:
    """Find the highest request rate per instance at which the SLO holds (load steps after a warm-up,
    bisection between the last passing and the first failing rate) and write calibration.json/.png."""
    from warmcast.cli.outputs import out_dir
    from warmup.calibration.session import calibrate

    out_dir(out)   # before the load steps: a calibration of minutes is not lost to an --out it cannot write
    asyncio.run(calibrate(_request(locals()), typer.echo))  # locals(): here, exactly the flags


PLAN_FLAGS = ("headline", "warmup_s", "step_s", "hold_s", "min_requests", "drain_s", "probe_s", "probe_concurrency",
              "arrivals", "burst", "burst_s", "tolerance", "max_steps", "confidence", "output_tokens", "seed")
SLO_FLAGS = ("ttft_p99_ms", "e2e_p99_ms", "error_share", "late_wait_s", "late_share")


def _request(flags: dict[str, Any]) -> Any:
    """The calibration run ``calibrate_cmd``'s flags (its parameters, by name) describe."""
    from warmup.calibration.session import CalibrateRequest

    plan = {k: flags[k] for k in PLAN_FLAGS}
    plan["scenarios"] = tuple(s.strip() for s in flags["scenarios"].split(",") if s.strip())
    return CalibrateRequest(out=flags["out"], url=flags["url"], deployment=flags["deployment"],
                            profile=flags["profile"], model=flags["model"], engine_args=list(flags["engine_arg"]),
                            port=flags["port"], store=flags["store"], config=flags["config"],
                            engine=flags["engine"], bench_python=flags["bench_python"], tokenizer=flags["tokenizer"],
                            slo_flags={k: flags[f"slo_{k}"] for k in SLO_FLAGS}, plan_args=plan)


@calibration_app.command("list")
def list_cmd(deployment: str = typer.Option(..., "--deployment", "-d"), config: Optional[Path] = ConfigOpt) -> None:
    """Per profile: the capacity the planner uses (calibrated or declared) and the stored versions."""
    from warmup.calibration.store import CalibrationStore, load_capacities
    from warmcast.runtime import load_fleet, redis_client
    from warmcast.config.settings import load_settings

    settings = load_settings(config)
    dep, r = load_fleet(settings).get(deployment), redis_client(settings)
    store = CalibrationStore(r, settings.key_prefix)
    for name, cap in load_capacities(r, settings.key_prefix, dep).items():
        typer.echo(f"{deployment}/{name}: {cap.describe()}; versions {store.versions(deployment, name)}")


@calibration_app.command("export")
def export_cmd(deployment: str = typer.Option(..., "--deployment", "-d"),
               out: Optional[Path] = typer.Option(None, "--out", help="YAML file (default: stdout)."),
               config: Optional[Path] = ConfigOpt) -> None:
    """Every stored calibration version of a deployment as YAML."""
    from warmup.calibration.store import CalibrationStore
    from warmcast.runtime import redis_client
    from warmcast.config.settings import load_settings

    settings = load_settings(config)
    text = CalibrationStore(redis_client(settings), settings.key_prefix).export_yaml(deployment)
    if out is None:
        typer.echo(text)
    else:
        out.write_text(text)
        typer.echo(f"wrote {out}")


@calibration_app.command("use")
def use_cmd(deployment: str = typer.Option(..., "--deployment", "-d"), profile: str = typer.Option(..., "--profile"),
            version: int = typer.Option(..., "--version", min=1), config: Optional[Path] = ConfigOpt) -> None:
    """Make a stored version the current calibration (roll back or forward)."""
    from warmup.calibration.store import CalibrationStore
    from warmcast.runtime import redis_client
    from warmcast.config.settings import load_settings

    settings = load_settings(config)
    CalibrationStore(redis_client(settings), settings.key_prefix).set_current(deployment, profile, version)
    typer.echo(f"{deployment}/{profile}: calibration v{version} is current")


def register(app: typer.Typer, backtest: typer.Typer) -> None:
    app.command("calibrate")(calibrate_cmd)
    app.add_typer(calibration_app, name="calibration")
