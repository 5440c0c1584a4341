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


def test_round3_item4f_an_absurd_integer_is_refused_naming_the_key():
    """Issue 41 (4f): ``max_replicas: 99999999999999999999`` was accepted."""
    raw = yaml.safe_load(MINIMAL.replace("max_replicas: 4", "max_replicas: 99999999999999999999"))
    with pytest.raises(InputError, match=r"deployment chat: max_replicas: .*less than or equal to 10000"):
        parse_deployments(raw)


def _int_fields(model: type[BaseModel], seen: set) -> typing.Iterator[tuple[str, object]]:
    if model in seen:
        return
    seen.add(model)
    for name, field in model.model_fields.items():
        args = typing.get_args(field.annotation) or (field.annotation,)
        for arg in args:
            if arg is int:
                yield f"{model.__name__}.{name}", field
            elif isinstance(arg, type) and issubclass(arg, BaseModel):
                yield from _int_fields(arg, seen)
            for inner in typing.get_args(arg):  # list[...] and dict[..., ...] of sections
                if isinstance(inner, type) and issubclass(inner, BaseModel):
                    yield from _int_fields(inner, seen)


def test_round3_item4f_every_integer_key_of_the_deployments_file_has_an_upper_bound():
    """Issue 41 (4f): the same for every integer key, today's and tomorrow's."""
    unbounded = [name for name, field in _int_fields(DeploymentsFile, set())
                 if not any(getattr(m, "le", None) is not None or getattr(m, "lt", None) is not None
                            for m in field.metadata)]
    assert unbounded == []


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
