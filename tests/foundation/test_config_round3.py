"""Issue 41 (reliability round three), the deployments file: a duplicate key, an absurd integer and an
overlong name are refused with a short message naming the key (and line)."""
from __future__ import annotations

import typing
from pathlib import Path

import pytest
import yaml
from pydantic import BaseModel

from warmcast.config.deployments import DeploymentsFile, check_deployment_name, load_deployments, parse_deployments
from warmcast.config.settings import SettingsError, load_settings
from warmcast.errors import InputError, NotFoundError

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "deployments.yaml"
MINIMAL = "deployments:\n  - name: chat\n    max_replicas: 4\n    profiles:\n      day: {capacity_rpm: 60}\n"



def test_round3_item4e_a_duplicate_yaml_key_is_refused_naming_key_and_line(tmp_path):
    """Issue 41 (4e): a key given twice was read as its last value without a word."""
    path = tmp_path / "deployments.yaml"
    path.write_text(MINIMAL + "    max_replicas: 40\n")
    with pytest.raises(InputError, match=r"deployments\.yaml:6: key 'max_replicas' appears twice .*first on line 3"):
        load_deployments(path)
    settings = tmp_path / "settings.yaml"
    settings.write_text("retention_days: 30\nkey_prefix: a\nretention_days: 60\n")
    with pytest.raises(SettingsError, match=r"settings\.yaml:3: key 'retention_days' appears twice"):
        load_settings(settings)
    path.write_text(MINIMAL)  # the same keys in different mappings are not duplicates
    assert load_deployments(path).get("chat").max_replicas == 4


def test_round3_item4g_an_overlong_deployment_name_is_refused_and_not_echoed_whole():
    """Issue 41 (4g): a 10,000-character name came back whole in the error."""
    long = "a" * 10_000
    raw = yaml.safe_load(MINIMAL)
    raw["deployments"][0]["name"] = long
    for call in (lambda: parse_deployments(raw), lambda: check_deployment_name(long),
                 lambda: parse_deployments(yaml.safe_load(MINIMAL)).get(long)):
        with pytest.raises((InputError, NotFoundError)) as err:
            call()
        text = str(err.value)
        assert len(text) < 400, text[:500]
        assert "10,000 characters" in text, text
    with pytest.raises(InputError, match=r"1-63 characters of a-z"):
        check_deployment_name(long)
