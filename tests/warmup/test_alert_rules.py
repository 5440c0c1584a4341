"""``warmcast alerts rules``: rules from each deployment's SLO, accepted by promtool, and the TTFT
rule firing (promtool's rule unit test) on a histogram over the SLO bound and not under it."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from warmcast.cli import _register_all, app
from warmcast.config.deployments import load_deployments
from warmcast.errors import InputError
from warmup.actuators.alert_rules import RuleTiming, prometheus_rule, rule_groups

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "deployments.yaml"
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason="no promtool (scripts/setup-prometheus.sh installs it)")


def _write_rules(tmp_path: Path, *args: str) -> tuple[Path, str]:
    _register_all()
    out = tmp_path / "rules.yml"
    res = CliRunner().invoke(app, ["alerts", "rules", "--out", str(out), *args],
                             env={"WARMCAST_DEPLOYMENTS_FILE": str(EXAMPLE)})
    assert res.exit_code == 0, res.output
    return out, res.output


def test_rules_cover_every_deployment_with_tiers_from_its_slo(tmp_path):
    out, said = _write_rules(tmp_path)
    doc = yaml.safe_load(out.read_text())
    deps = load_deployments(EXAMPLE).deployments
    assert [g["name"] for g in doc["groups"]] == [f"warmcast-{d.name}" for d in deps]
    rules = {(g["name"], r["alert"]): r for g in doc["groups"] for r in g["rules"]}
    assert {r["labels"]["tier"] for r in rules.values()} == {"primary", "medium", "severe"}
    ttft = rules[("warmcast-chat-llama", "WarmcastTTFTHigh")]
    assert ttft["expr"].endswith("* 1000 > 500") and 'model_name="meta-llama/Llama-3.1-8B-Instruct"' in ttft["expr"]
    assert ttft["labels"] == {"deployment": "chat-llama", "tier": "primary", "source": "warmcast", "adjust": "up"}
    assert rules[("warmcast-chat-llama", "WarmcastE2EHigh")]["expr"].endswith("* 1000 > 800")
    # local-demo declares no TTFT bound: no TTFT rule, but the error share (0.1% default) rule
    assert ("warmcast-local-demo", "WarmcastTTFTHigh") not in rules
    assert rules[("warmcast-local-demo", "WarmcastErrorRate")]["expr"].endswith("> 0.001")
    manifest = yaml.safe_load((tmp_path / "rules.prometheusrule.yaml").read_text())
    assert manifest["kind"] == "PrometheusRule" and manifest["spec"] == doc
    assert "rules for 3 deployment(s)" in said


@needs_promtool
def test_promtool_accepts_the_rules_file(tmp_path):
    out, _ = _write_rules(tmp_path, "--interval", "1s", "--for-primary", "10s")
    res = subprocess.run([PROMTOOL, "check", "rules", str(out)], capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "SUCCESS" in res.stdout


@needs_promtool
def test_ttft_rule_fires_over_the_slo_bound_only(tmp_path):
    dep = load_deployments(EXAMPLE).get("chat-llama")
    (tmp_path / "rules.yml").write_text(yaml.safe_dump(rule_groups([dep], RuleTiming(interval="1m")), sort_keys=False))
    sel = 'model_name="meta-llama/Llama-3.1-8B-Instruct"'
    slow = [{"series": f'vllm:time_to_first_token_seconds_bucket{{{sel},le="{le}"}}', "values": v}
            for le, v in (("0.25", "0+10x40"), ("0.5", "0+10x40"), ("1", "0+20x40"), ("+Inf", "0+20x40"))]
    ttft_high = {"exp_labels": {"deployment": "chat-llama", "tier": "primary", "source": "warmcast", "adjust": "up"},
                 "exp_annotations": {"summary": "TTFT P99 above 500 ms", "slo": dep.slo.describe(),
                                     "description": "chat-llama: TTFT P99 above 500 ms (value 990)"}}
    test = {"rule_files": ["rules.yml"], "evaluation_interval": "1m", "tests": [
        {"interval": "1m", "input_series": slow, "alert_rule_test": [
            {"eval_time": "3m", "alertname": "WarmcastTTFTHigh", "exp_alerts": []},       # not yet 5 minutes
            {"eval_time": "12m", "alertname": "WarmcastTTFTHigh", "exp_alerts": [ttft_high]},
            {"eval_time": "12m", "alertname": "WarmcastTTFTUsersAffected", "exp_alerts": []}]},  # 990 ms < 1000
        {"interval": "1m", "input_series": [{**s, "values": "0+10x40"} for s in slow], "alert_rule_test": [
            {"eval_time": "12m", "alertname": "WarmcastTTFTHigh", "exp_alerts": []}]}]}  # all under 250 ms
    (tmp_path / "test.yml").write_text(yaml.safe_dump(test, sort_keys=False))
    res = subprocess.run([PROMTOOL, "test", "rules", "test.yml"], cwd=tmp_path, capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr


def test_bad_duration_is_a_clear_error():
    with pytest.raises(InputError, match="primary_for: '5 minutes' is not a Prometheus duration"):
        RuleTiming(primary_for="5 minutes")


def test_prometheus_rule_manifest_names_its_namespace():
    m = prometheus_rule({"groups": []}, namespace="monitoring")
    assert m["metadata"]["namespace"] == "monitoring" and m["apiVersion"] == "monitoring.coreos.com/v1"


def test_round2_rules_of_a_deployment_without_a_selector_are_named_in_a_warning(tmp_path):
    """Issue 32: rules without signals.selector matched every vLLM (sum(vllm:num_requests_waiting{}) > 0),
    silently.  chat-llama has a selector; local-demo and chat-pools have none."""
    _, said = _write_rules(tmp_path)
    warned = [line for line in said.splitlines() if line.startswith("warning:")]
    assert [w.split(":")[1].strip() for w in warned] == ["deployment local-demo", "deployment chat-pools"], said
    assert all("signals.selector is empty" in w for w in warned)
