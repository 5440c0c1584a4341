"""`warmcast deployments check` and the engine-args check every load of a deployments file runs."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from warmcast.config.deployments import load_deployments
from warmcast.config.engine_args import check_engine_args, load_constraints
from warmcast.errors import InputError

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "deployments.yaml"
WARMCAST = [sys.executable, "-m", "warmcast.cli"]


def _bad_example(tmp_path: Path) -> Path:
    """The shipped example with the night profile's block size the seed once shipped (48)."""
    text = EXAMPLE.read_text()
    assert "engine_args: {max-num-seqs: 8, block-size: 32}" in text
    bad = tmp_path / "deployments.yaml"
    bad.write_text(text.replace("engine_args: {max-num-seqs: 8, block-size: 32}",
                                "engine_args: {max-num-seqs: 8, block-size: 48}"))
    return bad


def _run(args: list[str], tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(WARMCAST + args, capture_output=True, text=True, timeout=180, cwd=tmp_path,
                          env={**os.environ, **env})


def test_the_shipped_example_passes(tmp_path):
    r = _run(["deployments", "check", str(EXAMPLE)], tmp_path)
    assert r.returncode == 0, r.stderr
    assert f"{EXAMPLE}: OK, {len(load_deployments(EXAMPLE).deployments)} deployments" in r.stdout
    assert "deployment chat-llama: profiles day, night" in r.stdout
    # vLLM is not installed in the project's environment: the check says what it used
    assert "vLLM 0.32.0" in r.stdout


def test_block_size_48_fails_naming_deployment_profile_arg_value_and_choices(tmp_path):
    bad = _bad_example(tmp_path)
    r = _run(["deployments", "check", str(bad)], tmp_path)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    msg = r.stderr
    assert f"{bad}: deployment chat-llama: profile night: engine_args.block-size: 48 is not accepted" in msg
    assert "accepted: 16, 32, 64" in msg and "FLASH_ATTN" in msg and "FLASHINFER" in msg
    assert "recorded from vLLM 0.32.0" in msg and "not installed in this environment" in msg


def test_every_command_that_loads_the_file_fails_with_the_same_message(tmp_path):
    bad = _bad_example(tmp_path)
    check = _run(["deployments", "check", str(bad)], tmp_path).stderr.strip()
    log = tmp_path / "load.csv"
    log.write_text("time,requests\n2024-01-01 00:00:00,1\n2024-01-01 00:01:00,2\n")
    runs = [
        _run(["backtest", "fleet", "--log", str(log), "--deployment", "chat-llama",
              "--test-start", "2024-01-01 00:01", "--out", "out"], tmp_path, WARMCAST_DEPLOYMENTS_FILE=str(bad)),
        _run(["backtest", "fleet", "--log", str(log), "--deployments-file", str(bad), "--deployment", "chat-llama",
              "--test-start", "2024-01-01 00:01", "--out", "out"], tmp_path),
        _run(["plan", "capacity", "--deployment", "chat-llama"], tmp_path, WARMCAST_DEPLOYMENTS_FILE=str(bad)),
        _run(["measure-coldstart", "--deployment", "local-demo"], tmp_path, WARMCAST_DEPLOYMENTS_FILE=str(bad)),
    ]
    for r in runs:
        assert r.returncode == 2, (r.args, r.stderr)
        assert r.stderr.strip() == check, r.args


def test_a_pinned_attention_backend_decides_the_block_size():
    c = load_constraints()
    assert check_engine_args({"block-size": 48, "attention-backend": "FLASH_ATTN"}, c) == []  # multiples of 16
    problems = check_engine_args({"block-size": 48, "attention-backend": "CPU_ATTN"}, c)
    assert problems and "pinned attention backend CPU_ATTN" in problems[0] and "accepted: 32, 64, 96" in problems[0]
    assert check_engine_args({"block-size": 32}, c) == []


@pytest.mark.parametrize("args, expected", [
    ({"max-num-seq": 4}, "max-num-seq: not a vLLM option (did you mean max-num-seqs?)"),
    ({"dtype": "fp17"}, "dtype: 'fp17' is not one of the accepted values auto, bfloat16, float, float16"),
    ({"max-num-seqs": "many"}, "max-num-seqs: 'many' must be an integer"),
    ({"enforce-eager": "yes"}, "enforce-eager: 'yes' is a switch: give true or false"),
    ({"max-model-len": "lots"}, "max-model-len: 'lots' must be an integer such as 4096 or 4k"),
    ({"gpu-memory-utilization": "most"}, "gpu-memory-utilization: 'most' must be a number"),
    ({"compilation-config": "{level: 0"}, "compilation-config: '{level: 0' must be a mapping or JSON text"),
])
def test_engine_args_are_checked_for_names_choices_and_types(args, expected):
    problems = check_engine_args(args, load_constraints())
    assert len(problems) == 1 and problems[0].startswith(expected), problems


def test_good_engine_args_pass_in_every_spelling():
    args = {"max-num-seqs": 16, "max_model_len": "4k", "--enforce-eager": True, "enable-prefix-caching": False,
            "kv-cache-memory-bytes": 134217728, "compilation-config": {"level": 0}, "dtype": "bfloat16",
            "gpu-memory-utilization": 0.9, "load-format": "dummy", "skip-tokenizer-init": True}
    assert check_engine_args(args, load_constraints()) == []


def test_load_deployments_raises_input_error_for_unknown_flag(tmp_path):
    f = tmp_path / "d.yaml"
    f.write_text("deployments:\n  - name: a\n    profiles:\n"
                 "      day: {capacity_rpm: 10, engine_args: {max-num-seq: 4}}\n")
    with pytest.raises(InputError, match=r"deployment a: profile day: engine_args.max-num-seq: not a vLLM option"):
        load_deployments(f)
