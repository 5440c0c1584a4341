"""Engine-arg rendering and the token-length distribution (no vLLM needed)."""
from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from warmcast.config.deployments import demo_deployment
from warmcast.errors import InputError
from warmup.actuators.launch import (
    EngineArgsError,
    container_args,
    launch_command,
    merged_args,
    render_engine_args,
    write_tiny_llama,
)
from warmup.actuators.tokens import TokenDistribution, lognormal_from_mean_p95


def test_render_rules():
    argv = render_engine_args({
        "max-num-seqs": 16, "enable_prefix_caching": True, "enforce-eager": False, "seed": None,
        "--block-size": 32, "compilation-config": {"level": 0}, "allowed-origins": ["a", "b"], "dtype": "bfloat16",
    })
    assert argv == ["--max-num-seqs", "16", "--enable-prefix-caching", "--no-enforce-eager", "--block-size", "32",
                    "--compilation-config", '{"level":0}', "--allowed-origins", "a", "b", "--dtype", "bfloat16"]


def test_render_rejects_bad_names_and_values():
    with pytest.raises(EngineArgsError, match="not a CLI option"):
        render_engine_args({"max num seqs": 1})
    with pytest.raises(EngineArgsError, match="--tp"):
        render_engine_args({"tp": []})
    with pytest.raises(EngineArgsError, match="unsupported"):
        render_engine_args({"x": object()})
    assert isinstance(EngineArgsError("x"), InputError)


def test_demo_profiles_render_to_launch_and_container_args(tmp_path):
    dep = demo_deployment()
    day = dep.profiles["day"].engine_args
    cmd = launch_command("meta/llama", day, port=8123, python="/py")
    assert cmd[:3] == ["/py", "-m", "vllm.entrypoints.openai.api_server"]
    assert cmd[3:9] == ["--model", "meta/llama", "--host", "127.0.0.1", "--port", "8123"]
    assert "--max-num-seqs" in cmd and cmd[cmd.index("--max-num-seqs") + 1] == "16"
    assert container_args("meta/llama", day)[:4] == ["--model", "meta/llama", "--port", "8000"]
    with pytest.raises(EngineArgsError, match="port"):
        launch_command("m", {"port": 1}, python="/py")


def test_merged_args_normalises_keys():
    assert merged_args({"max_num_seqs": 2}, {"--max-num-seqs": 4, "x": 1}) == {"max-num-seqs": 4, "x": 1}


def test_tiny_llama_head_dim_64(tmp_path):
    cfg = json.loads((write_tiny_llama(tmp_path) / "config.json").read_text())
    assert cfg["hidden_size"] // cfg["num_attention_heads"] == 64
    assert cfg["architectures"] == ["LlamaForCausalLM"]


def test_lognormal_fit_reproduces_mean_and_p95():
    mu, s = lognormal_from_mean_p95(1000, 3000)
    assert math.exp(mu + s * s / 2) == pytest.approx(1000)
    assert math.exp(mu + 1.6448536269514722 * s) == pytest.approx(3000)
    with pytest.raises(InputError):
        lognormal_from_mean_p95(0, 10)


def _frame() -> pd.DataFrame:
    idx = pd.date_range("2024-05-12", periods=4, freq="min")
    return pd.DataFrame({"requests": [10, 20, np.nan, 0],
                         "input_tokens": [10_000, 20_000, np.nan, 0],
                         "output_tokens": [2_000, 4_000, np.nan, 0],
                         "ctx_mean": [1000, 1000, np.nan, np.nan],
                         "ctx_p95": [2500, 2500, np.nan, np.nan]}, index=idx)


def test_from_frame_is_request_weighted_and_sampling_matches():
    d = TokenDistribution.from_frame(_frame())
    assert d.prompt_mean == pytest.approx(1000)
    assert d.output_mean == pytest.approx(200)
    rng = np.random.default_rng(0)
    d = TokenDistribution(d.prompt_mu, d.prompt_sigma, d.output_mu, d.output_sigma, max_prompt=10**6, max_output=10**6)
    pairs = np.array(d.sample(rng, 40_000))
    assert pairs[:, 0].mean() == pytest.approx(1000, rel=0.05)
    assert np.percentile(pairs[:, 0], 95) == pytest.approx(2500, rel=0.05)
    assert pairs[:, 1].mean() == pytest.approx(200, rel=0.05)


def test_from_frame_without_token_columns_uses_default_or_errors():
    counts = pd.DataFrame({"requests": [1.0, 2.0]})
    default = TokenDistribution.fixed(10, 5)
    assert TokenDistribution.from_frame(counts, default=default) is default
    with pytest.raises(InputError, match="token columns"):
        TokenDistribution.from_frame(counts)


def test_capped_respects_context_length():
    d = TokenDistribution.from_stats(5000, 20000, 3000).capped(2048)
    pairs = d.sample(np.random.default_rng(1), 2000)
    assert all(1 <= p and 1 <= o and p + o <= 2048 for p, o in pairs)


def test_validation_without_vllm_interpreter_is_reported_not_checked(tmp_path):
    from warmup.actuators.launch import validate_engine_args

    v = validate_engine_args({"max-num-seqs": 4}, python=tmp_path / "no-python")
    assert v.ok and v.checked_by.startswith("not checked") and "setup-vllm.sh" in v.checked_by
    with pytest.raises(EngineArgsError, match="model"):
        validate_engine_args({"model": "x"}, python=tmp_path / "no-python")
