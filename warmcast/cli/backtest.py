"""``warmcast backtest fleet``: compare scaling policies on a replayed log."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import typer

from warmcast.errors import InputError
from warmcast.cli.log_options import LOG_HELP, LogReading, log_options
from warmcast.cli.slo_options import SLOFlags, slo_options


@log_options
@slo_options
def fleet(
    log: Path = typer.Option(..., "--log", help=LOG_HELP),
    capacity_rpm: Optional[float] = typer.Option(None, "--capacity-rpm", min=0.001,
                                                 help="Requests/min one instance serves (required without "
                                                      "--deployment, else the default profile's)."),
    calibration: Optional[Path] = typer.Option(None, "--calibration", help="calibration.json: the capacity of the "
                                               "profile it measured (none named: the default) and its latency curve "
                                               "(SLO attainment per policy)."),
    stored_calibrations: bool = typer.Option(False, "--stored-calibrations", help="With --deployment: its calibrations "
                                             "in Redis; --calibration wins. A curve per profile: switches' P99s."),
    stored_policy: bool = typer.Option(False, "--stored-policy", help="With --deployment: its stored policy-config."),
    cold_start_min: Optional[float] = typer.Option(None, "--cold-start-min", min=0, max=240,
                                                   help="Launch to ready, minutes (default 15, or the deployment's)."),
    test_start: str = typer.Option(..., "--test-start", help="First test minute (UTC); the forecaster trains before it."),
    out: Path = typer.Option(..., "--out", help="Directory for plan_<policy>.csv, report.json, fleet.png."),
    policies: str = typer.Option(",".join(("static", "reactive", "queue", "predictive", "oracle")), "--policies",
                                 help="Comma-separated subset of static,reactive,queue,predictive,oracle."),
    quantile: Optional[float] = typer.Option(None, "--quantile", min=0.01, max=0.999, help="Forecast level the "
                                             "predictive policy provisions for (default: the deployment's, else 0.9)."),
    target_utilisation: float = typer.Option(1.0, "--target-utilisation", min=0.05, max=1.5,
                                             help="Predictive: utilisation on the forecast quantile."),
    reactive_utilisation: float = typer.Option(0.8, "--reactive-utilisation", min=0.05, max=1.5,
                                               help="Reactive (the HPA's documented rules) target utilisation."),
    queue_target: float = typer.Option(5.0, "--queue-target", min=0.1, help="Queue policy: waiting requests per "
                                       "replica that trigger a scale-up."),
    forecaster: str = typer.Option("lstm", "--forecaster", help="lstm, uc_fourier, holt_winters, seasonal_naive, "
                                   "persistence or sim_seasonal_profile."),
    test_end: Optional[str] = typer.Option(None, "--test-end", help="End of the test part (exclusive)."),
    min_replicas: int = typer.Option(1, "--min-replicas", min=0),
    max_replicas: int = typer.Option(100_000, "--max-replicas", min=1),
    gpus_per_replica: int = typer.Option(1, "--gpus-per-replica", min=0),
    deployment: Optional[str] = typer.Option(None, "--deployment", "-d", help="Deployment name: the predictive "
                                             "policy uses its bounds, profiles and schedule (switches too)."),
    deployments_file: Optional[Path] = typer.Option(None, "--deployments-file", help="File to find --deployment "
                                                    "in (default: the settings'); one deployment needs no name."),
    config: Optional[Path] = typer.Option(None, "--config", help="YAML settings file (else WARMCAST_* env vars)."),
    decisions: bool = typer.Option(False, "--decisions", help="Also write decisions_predictive.csv (each minute, why)."),
    no_plot: bool = typer.Option(False, "--no-plot"),
    *,
    reading: LogReading,
    slo_flags: SLOFlags,
) -> None:
    """Replay a log through a fleet with cold start and a FIFO queue under each policy."""
    from warmup.sim import FleetBacktestConfig, load_log, run_backtest

    names, (ts, te) = tuple(p.strip() for p in policies.split(",") if p.strip()), _test_window(test_start, test_end)
    dep = _deployment(deployment, deployments_file, config)
    core, caps = _capacities(dep, capacity_rpm, calibration, stored_calibrations, stored_policy, config)
    cold_start_min, min_replicas, max_replicas, gpus_per_replica = _bounds(
        dep, cold_start_min, min_replicas, max_replicas, gpus_per_replica)
    data = load_log(log, **reading.kwargs())
    cfg = FleetBacktestConfig(capacity_rpm=caps.capacity_rpm, cold_start_min=15.0 if cold_start_min is None else
                              cold_start_min, test_start=ts, test_end=te, policies=names,
                              quantile=_quantile(quantile, core), target_utilisation=target_utilisation,
                              reactive_utilisation=reactive_utilisation, queue_target_waiting=queue_target,
                              forecaster=forecaster, min_replicas=min_replicas, max_replicas=max_replicas,
                              gpus_per_replica=gpus_per_replica, record_decisions=decisions, core=core,
                              capacity_source=caps.source, latency=caps.latency,
                              latency_by_profile=tuple(sorted(caps.curves.items())))
    _write_and_report(run_backtest(data, _tiers_and_risk(data, cfg, dep, slo_flags), progress=True), out, not no_plot)


def _bounds(dep: Any, cold_start_min: Optional[float], *flags: int) -> tuple:
    """(cold start, min, max replicas, GPUs per replica): the deployment's, its cold start only where
    the flag does not say otherwise; the flags' without a deployment."""
    if dep is None:
        return (cold_start_min, *flags)
    return (dep.cold_start_min if cold_start_min is None else cold_start_min, dep.min_replicas, dep.max_replicas,
            dep.gpus_per_replica)


def _quantile(flag: Optional[float], core: Any) -> float:
    """The predictive policy's level: the flag's, else the deployment's (with its stored policy), else 0.9."""
    if flag is not None:
        return flag
    return core.scaling.quantile if core is not None else 0.9


def _capacities(dep: Any, capacity_rpm: Optional[float], calibration: Optional[Path], stored: bool,
                stored_policy: bool, config: Optional[Path]) -> tuple[Any, Any]:
    """(the deployment's core config, the capacities); says which capacities it is."""
    from warmup.sim.fleet_capacity import for_backtest

    if (stored or stored_policy) and dep is None:
        raise InputError("--stored-calibrations and --stored-policy need --deployment (both are stored per deployment)")
    overrides = (_stored_policy(dep, config) or {}) if stored_policy else None
    core, caps = for_backtest(dep, capacity_rpm, calibration, stored, overrides)
    typer.echo(caps.describe() + (f"; {caps.note}" if caps.note and (calibration is not None or stored) else ""))
    return core, caps


def _stored_policy(dep: Any, config: Optional[Path]) -> Optional[dict]:
    """The deployment's stored policy-config (the settings' Redis), as the live loop reads it."""
    from warmcast.runtime import redis_client
    from warmcast.config.settings import load_settings
    from warmcast.state import StateStore

    settings = load_settings(config)
    return StateStore(redis_client(settings), settings.key_prefix).get("policy-config", dep.name)


def _write_and_report(result: Any, out: Path, plot: bool) -> None:
    from warmup.sim import write_outputs

    paths = write_outputs(result, out, plot=plot)
    _echo_report(result)
    typer.echo("wrote " + ", ".join(str(p) for p in paths))


def _tiers_and_risk(data: Any, cfg: Any, dep: Any, flags: SLOFlags) -> Any:
    """The configuration with the deployment's asleep tier and SLO, tuned for the SLO when the flags ask."""
    from warmcast.config.slo import SLO
    from warmup.sim.risk import for_deployment

    slo = None
    if flags.wanted:
        slo = (dep.slo if dep is not None else SLO()).model_copy(update={
            k: v for k, v in (("late_share", flags.late_share), ("late_wait_s", flags.wait_s)) if v is not None})
    cfg, tuning = for_deployment(data, cfg, dep, slo, flags.validation_days, progress=True, windows=flags.windows)
    if tuning is not None:
        typer.echo(tuning.report())
    return cfg


def _test_window(test_start: str, test_end: Optional[str]) -> tuple[Any, Any]:
    import pandas as pd

    try:
        return pd.Timestamp(test_start), (pd.Timestamp(test_end) if test_end else None)
    except ValueError as err:
        raise InputError(f"--test-start/--test-end: {err}") from None


def _deployment(name: Optional[str], path: Optional[Path], config: Optional[Path]) -> Any:
    """The deployment --deployment names, found as every command finds it (the settings' deployments
    file, or the demo), or in --deployments-file; that file's only one when no name is given; else None."""
    from warmcast.config.deployments import load_deployments

    if name is not None and Path(name).is_file():  # this option took the file until issue 32
        raise InputError(f"--deployment takes a deployment name, not a file: use --deployments-file {name} "
                         "--deployment NAME (NAME may be left out when the file holds one deployment)")
    if path is None:
        if name is None:
            return None
        from warmcast.config.settings import load_settings
        from warmcast.runtime import load_fleet

        return load_fleet(load_settings(config)).get(name)
    dfile = load_deployments(path)
    if name is None and len(dfile.deployments) != 1:
        raise InputError(f"{path} holds {len(dfile.deployments)} deployments: name one with --deployment")
    return dfile.get(name) if name else dfile.deployments[0]


def header_lines(m: dict[str, Any]) -> list[str]:
    """The run's first lines: the test part and the resolution it was read at, named once (a coarse
    series' replay step is no resolution of its own: "resolution 60 s" beside "5 min", issue 46)."""
    r = m.get("series_resolution_min", 1)
    head = f"{m['test_minutes']} test minutes from {m['test_start']}, {m['requests']:,} requests"
    if r <= 1:
        return [f"{head}, resolution {m['resolution_s']} s"]
    return [head, f"series resolution {r} min: replayed spread evenly over each bin's minutes; forecasts made "
                  f"in {r}-minute bins, each from the bins that had ended"]


def _echo_report(result: Any) -> None:
    from warmup.sim import format_table

    m = result.meta
    for line in header_lines(m):
        typer.echo(line)
    if "forecaster" in m:
        typer.echo(f"forecaster {m['forecaster']}: fit {m['forecaster_fit_seconds']} s, "
                   f"forecasts {m['forecaster_predict_seconds']} s" + (f" ({m['forecaster_note']})"
                                                                       if m.get("forecaster_note") else ""))
    typer.echo(f"simulation of {len(result.rows)} policies: {m['simulation_seconds']} s")
    typer.echo(format_table(result.rows))
    if "latency_curve" in m:
        lc = m["latency_curve"]
        typer.echo(f"TTFT SLO min %: {lc['slo_attainment']} (P99 <= {lc['bound_ms']:g} ms, {lc['bound_source']}; "
                   f"curve of profile {lc['profile'] or '(none named)'}, scenario {lc['scenario']})")
    for name, row in result.rows.items():
        if row.get("switch_minutes"):
            typer.echo(f"{name}: {row['switch_minutes']} switch minutes cost {row['switch_gpu_hours']} GPU-h; "
                       f"{row['late_during_switches']} requests late in them, "
                       f"{row['late_caused_by_switches']} caused by the switches (late after any backlog "
                       "carried into the switch had drained)")


def register(app: typer.Typer, backtest: typer.Typer) -> None:
    backtest.command("fleet")(fleet)
