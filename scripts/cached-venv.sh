# Sourced by scripts/setup-vllm.sh and scripts/setup-guidellm.sh: a tool's virtualenv built once per
# machine in a cache keyed by its pinned versions, each checkout linking to it (a fresh clone, CI's
# included, then skips the build).  CACHE=none builds in the checkout itself.

# cpu_torch: pip finds torch 2.13.0's CPU build (a local wheel, else PyTorch's CPU index: PyPI's is CUDA).
cpu_torch() {
    if ! ls /opt/wheels/torch-2.13.0+cpu-*.whl >/dev/null 2>&1; then
        export PIP_EXTRA_INDEX_URL="${PIP_EXTRA_INDEX_URL:+$PIP_EXTRA_INDEX_URL }https://download.pytorch.org/whl/cpu"
    fi
}

# cached_venv NAME WHAT VENV CACHE HAS BUILD: HAS DIR tells whether DIR holds the tool, BUILD DIR builds it.
cached_venv() {
    local name=$1 what=$2 venv=$3 cache=$4 has=$5 build=$6
    if "$has" "$venv"; then
        echo "$name: $venv already has $what; nothing to do"
    elif [ "$cache" != none ] && { [ ! -e "$venv" ] || [ -L "$venv" ]; }; then
        "$has" "$cache" || "$build" "$cache"
        ln -sfn "$cache" "$venv"
        echo "$name: $venv -> $cache"
    else
        "$build" "$venv"
    fi
}
