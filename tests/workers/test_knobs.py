"""Issue 42: live tunes what the benchmark tunes, and an operator can see each knob's layer.
``warmcast deployments show D`` (a real process on the real Redis) names the layer of every knob: a
value from the deployments file's ``policy:``, one the nightly re-tune stored, one an operator stored,
an alert's standby floor, and the core's defaults; ``--json`` gives ``{knob: {"value", "layer"}}``."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from clienv import cli_env

from warmcast.config.deployments import load_deployments
from warmcast.errors import InputError
from workers.knobs import KNOBS, defaults
from workers.steps.alert_responses import _raise_floor

DEPLOYMENTS = """deployments:
  - name: conv
    cold_start_min: 10
    min_replicas: 2
    max_replicas: 40
    policy: {buffer_level: 0.9, reactive_guard: 0.7}
    profiles:
      day: {capacity_rpm: 300}
"""


@pytest.fixture
def env(tmp_path, redis_server_url, key_prefix) -> dict[str, str]:
    return cli_env(tmp_path, DEPLOYMENTS, redis_server_url, key_prefix)


def _ctx(env):
    from warmcast.config.settings import load_settings
    from workers.context import Ctx
    from workers.options import WorkerOptions

    settings = load_settings(redis_url=env["WARMCAST_REDIS_URL"], key_prefix=env["WARMCAST_KEY_PREFIX"],
                             deployments_file=env["WARMCAST_DEPLOYMENTS_FILE"], state_dir=env["WARMCAST_STATE_DIR"])
    return Ctx(settings, WorkerOptions())


def _show(env, *extra: str) -> subprocess.CompletedProcess:
    r = subprocess.run([sys.executable, "-m", "warmcast.cli", "deployments", "show", "conv", *extra],
                       capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    return r


def test_show_names_the_layer_of_every_knob(env) -> None:
    ctx = _ctx(env)
    # what the nightly re-tune stores (workers/steps/retune.py: the knobs, and which it set)
    ctx.state.put("policy-config", "conv", {"scaling": {"quantile": 0.8, "stabilisation_s": 900.0}})
    ctx.state.put("retuned", "conv", {"knobs": {"quantile": 0.8}})     # the operator set stabilisation_s
    _raise_floor(ctx, "conv", 5, "group-1")                             # an alert's standby
    out = json.loads(_show(env, "--json").stdout)
    assert set(out) == set(KNOBS)
    assert out["buffer_level"] == {"value": 0.9, "layer": "file"}
    assert out["reactive_guard"] == {"value": 0.7, "layer": "file"}
    assert out["quantile"] == {"value": 0.8, "layer": "retune"}
    assert out["stabilisation_s"] == {"value": 900.0, "layer": "manual"}
    assert out["min_replicas"]["value"] == 5 and out["min_replicas"]["layer"] == "alert"
    assert out["max_replicas"] == {"value": 40, "layer": "file"}
    assert out["reactive_guard_window_min"] == {"value": defaults()["reactive_guard_window_min"], "layer": "default"}
    assert out["capacity_rpm"]["layer"] == "file" and out["cold_start_min"]["layer"] == "file"
    # the values are the ones the tick decides with
    cfg = ctx.cfg("conv").scaling
    assert (cfg.quantile, cfg.buffer_level, cfg.reactive_guard, cfg.min_replicas) == (0.8, 0.9, 0.7, 5)
    table = _show(env).stdout
    assert "quantile" in table and "retune" in table and "alert" in table


def test_a_policy_knob_out_of_range_is_refused_naming_it(tmp_path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(DEPLOYMENTS.replace("buffer_level: 0.9", "buffer_level: 1.5"))
    with pytest.raises(InputError, match="policy.buffer_level"):
        load_deployments(bad)
    bad.write_text(DEPLOYMENTS.replace("buffer_level: 0.9", "quantile: 0.999"))
    with pytest.raises(InputError, match="policy.quantile"):
        load_deployments(bad)
