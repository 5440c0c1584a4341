"""Settings and the deployments file: valid input loads, bad input names the key."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from warmcast.config.deployments import load_deployments, parse_deployments
from warmcast.errors import InputError
from warmcast.config.settings import SettingsError, load_settings

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "deployments.yaml"


def test_example_deployments_file_loads():
    deps = load_deployments(EXAMPLE)
    chat = deps.get("chat-llama")
    assert chat.profiles["night"].engine_args["block-size"] == 32
    assert chat.schedule.windows[0].start.hour == 22
    assert deps.get("local-demo").scaler.kind == "local"


def test_bad_deployment_key_is_named(tmp_path):
    raw = yaml.safe_load(EXAMPLE.read_text())
    raw["deployments"][0]["min_replicas"] = 20  # above max_replicas 12
    with pytest.raises(InputError, match=r"deployment chat-llama: .*min_replicas 20 > max_replicas 12"):
        parse_deployments(raw)
    raw = yaml.safe_load(EXAMPLE.read_text())
    raw["deployments"][1]["profiles"]["day"]["capacity_rpm"] = -1
    with pytest.raises(InputError, match=r"deployment local-demo: profiles\.day\.capacity_rpm"):
        parse_deployments(raw)
    raw = yaml.safe_load(EXAMPLE.read_text())
    raw["deployments"][0]["schedule"]["timezone"] = "Mars/Olympus"
    with pytest.raises(InputError, match="unknown time zone 'Mars/Olympus'"):
        parse_deployments(raw)
    raw["deployments"][0]["typo_key"] = 1
    with pytest.raises(InputError, match="typo_key"):
        parse_deployments(raw)
    raw = yaml.safe_load(EXAMPLE.read_text())
    raw["deployments"][0]["signals"] = {"source": "prometheus"}
    with pytest.raises(InputError, match=r"deployment chat-llama: signals.*needs prometheus_url"):
        parse_deployments(raw)


def test_settings_from_env_and_yaml_name_the_bad_key(tmp_path, monkeypatch):
    cfg = tmp_path / "s.yaml"
    cfg.write_text("retention_days: 30\nkey_prefix: abc\n")
    monkeypatch.setenv("WARMCAST_KEY_PREFIX", "fromenv")
    s = load_settings(cfg)
    assert s.retention_days == 30 and s.key_prefix == "fromenv"
    monkeypatch.setenv("WARMCAST_RETENTION_DAYS", "zero")
    with pytest.raises(SettingsError, match="retention_days .*WARMCAST_RETENTION_DAYS"):
        load_settings(cfg)
    monkeypatch.delenv("WARMCAST_RETENTION_DAYS")
    monkeypatch.setenv("WARMCAST_REDIS_URL", "http://nope")
    with pytest.raises(SettingsError, match="redis_url"):
        load_settings()
    monkeypatch.delenv("WARMCAST_REDIS_URL")
    cfg.write_text("no_such_setting: 1\n")
    with pytest.raises(SettingsError, match="no_such_setting"):
        load_settings(cfg)


def test_missing_or_broken_yaml_files_are_named(tmp_path):
    """Settings, deployments and GPU catalogue files share one reader: a missing file or bad YAML
    is an error naming the file (the settings file's bad YAML was a traceback before)."""
    from warmup.planning.gpu_catalogue import load_catalogue

    broken = tmp_path / "broken.yaml"
    broken.write_text("a: [1, 2\n")
    with pytest.raises(SettingsError, match=r"broken\.yaml: not valid YAML"):
        load_settings(broken)
    with pytest.raises(SettingsError, match="config file .*nope.yaml does not exist"):
        load_settings(tmp_path / "nope.yaml")
    with pytest.raises(InputError, match=r"broken\.yaml: not valid YAML"):
        load_deployments(broken)
    with pytest.raises(InputError, match="deployments file .*nope.yaml does not exist"):
        load_deployments(tmp_path / "nope.yaml")
    with pytest.raises(InputError, match=r"broken\.yaml: not valid YAML"):
        load_catalogue(broken)
    with pytest.raises(InputError, match="GPU catalogue .*nope.yaml does not exist"):
        load_catalogue(tmp_path / "nope.yaml")
    binary = tmp_path / "binary.yaml"     # issue 31: a binary file was a UnicodeDecodeError traceback
    binary.write_bytes(b"\x89PNG\r\n\x1a\n\x9f\xff" + bytes(range(256)))
    with pytest.raises(InputError, match=r"binary\.yaml: not a UTF-8 text file"):
        load_deployments(binary)
    with pytest.raises(SettingsError, match=r"binary\.yaml: not a UTF-8 text file"):
        load_settings(binary)


@pytest.mark.parametrize("text", [".inf", ".nan", "-.inf"])
def test_round2_a_capacity_that_is_not_a_finite_number_is_refused_naming_the_key(text):
    """Issue 31: ``capacity_rpm: .inf`` passed ``gt=0`` and reached /v1/keda as ``Infinity`` (not JSON)."""
    raw = yaml.safe_load(EXAMPLE.read_text())
    raw["deployments"][1]["profiles"]["day"]["capacity_rpm"] = yaml.safe_load(text)   # YAML's own float
    with pytest.raises(InputError, match=r"deployment local-demo: profiles\.day\.capacity_rpm.*finite"):
        parse_deployments(raw)


def test_round2_a_deployment_named_like_a_pool_series_is_refused():
    """Issue 31: ``D.hot`` was a valid deployment name that `pools ingest -d D` overwrote."""
    raw = yaml.safe_load(EXAMPLE.read_text())
    raw["deployments"][1]["name"] = "chat-llama.hot"
    with pytest.raises(InputError, match=r"'chat-llama.hot' ends in .hot or .cold"):
        parse_deployments(raw)
