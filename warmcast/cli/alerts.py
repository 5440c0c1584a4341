"""``warmcast alerts rules``: Prometheus alert rules (and a PrometheusRule manifest) from each
deployment's SLO; see :mod:`warmup.actuators.alert_rules`."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

alerts_app = typer.Typer(no_args_is_help=True, help="Alert rules and tiered responses (Prometheus, Alertmanager).")
ConfigOpt = typer.Option(None, "--config", help="YAML settings file (else WARMCAST_* env vars).")


@alerts_app.command("rules")
def rules(
    out: Path = typer.Option(..., "--out", help="The Prometheus rules file to write (YAML)."),
    manifest: Optional[Path] = typer.Option(None, "--manifest",
                                            help="The PrometheusRule manifest (default: OUT's stem + "
                                                 ".prometheusrule.yaml)."),
    deployment: Optional[list[str]] = typer.Option(None, "--deployment", "-d", help="Only these deployments."),
    namespace: Optional[str] = typer.Option(None, "--namespace", help="Namespace of the PrometheusRule."),
    interval: str = typer.Option("30s", help="Rule evaluation interval."),
    window: str = typer.Option("5m", help="Rate window of the latency and error rules."),
    primary_for: str = typer.Option("5m", "--for-primary", help="How long a primary-tier condition must hold."),
    medium_for: str = typer.Option("10m", "--for-medium", help="... a medium-tier (users affected) condition."),
    severe_for: str = typer.Option("2m", "--for-severe", help="... a severe-tier (unavailable) condition."),
    slow_for: str = typer.Option("30m", "--for-slow", help="... forecast error and plan-vs-actual."),
    config: Optional[Path] = ConfigOpt,
) -> None:
    """Write alert rules for every deployment in the settings' deployments file, from its slo: key."""
    import yaml

    from warmcast.runtime import load_fleet
    from warmcast.config.settings import load_settings
    from warmup.actuators.alert_rules import RuleTiming, prometheus_rule, rule_groups, unscoped

    fleet = load_fleet(load_settings(config))
    deps = [fleet.get(n) for n in deployment] if deployment else list(fleet.deployments)
    timing = RuleTiming(interval=interval, window=window, primary_for=primary_for, medium_for=medium_for,
                        severe_for=severe_for, slow_for=slow_for)
    doc = rule_groups(deps, timing)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(yaml.safe_dump(doc, sort_keys=False, width=200))
    manifest = manifest or out.with_name(f"{out.stem}.prometheusrule.yaml")
    manifest.write_text(yaml.safe_dump(prometheus_rule(doc, namespace=namespace), sort_keys=False, width=200))
    n = sum(len(g["rules"]) for g in doc["groups"])
    typer.echo(f"wrote {n} rules for {len(deps)} deployment(s) to {out}; PrometheusRule manifest {manifest}")
    for warning in unscoped(deps):
        typer.echo(f"warning: {warning}", err=True)


def register(app: typer.Typer, backtest: typer.Typer) -> None:
    app.add_typer(alerts_app, name="alerts")
