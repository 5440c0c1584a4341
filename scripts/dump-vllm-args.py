"""Record the constraints of vLLM's own server argument parser as JSON, for checking
deployments files where vLLM is not installed (it lives in .venv-vllm, not the project's venv).

Run it with the vLLM interpreter after changing the vLLM version (scripts/setup-vllm.sh pins it):

    .venv-vllm/bin/python scripts/dump-vllm-args.py            # writes warmcast/config/vllm_args.json

It records every option's names, type, choices and nargs from ``make_arg_parser``, and the
KV block sizes each common attention backend accepts (``get_supported_kernel_block_sizes``).
"""
from __future__ import annotations

import ast
import importlib.util
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # warmcast.config.engine_args is stdlib-only, so it imports under vLLM's venv

from warmcast.config.engine_args import constraints_from_parser  # noqa: E402

# GPU backends vLLM picks by hardware, and the CPU one; FlashInfer is not importable in the CPU
# build (no flashinfer package), so its sizes are read from its source when the import fails.
BACKENDS = ("FLASH_ATTN", "FLASHINFER", "TRITON_ATTN", "FLEX_ATTENTION", "CPU_ATTN")


def _sizes(values: list) -> list:
    return [{"multiple_of": v.base} if hasattr(v, "base") else int(v) for v in values]


def _sizes_from_source(class_path: str) -> list:
    """The first list literal ``get_supported_kernel_block_sizes`` returns in its source, read with ast."""
    module, cls = class_path.rsplit(".", 1)
    tree = ast.parse(Path(importlib.util.find_spec(module).origin).read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == cls:
            for fn in node.body:
                if isinstance(fn, ast.FunctionDef) and fn.name == "get_supported_kernel_block_sizes":
                    # the first return in source order: the sizes without optional large-page kernels
                    returns = sorted((n for n in ast.walk(fn) if isinstance(n, ast.Return)), key=lambda n: n.lineno)
                    for ret in returns:
                        if isinstance(ret.value, ast.List):
                            return [ast.literal_eval(e) for e in ret.value.elts]
    raise RuntimeError(f"no block-size list found in {class_path}")


def kernel_block_sizes() -> dict[str, dict]:
    from vllm.v1.attention.backends.registry import AttentionBackendEnum

    out = {}
    for name in BACKENDS:
        backend = AttentionBackendEnum[name]
        try:
            out[name] = {"sizes": _sizes(backend.get_class().get_supported_kernel_block_sizes()), "read": "called"}
        except ImportError:
            out[name] = {"sizes": _sizes_from_source(backend.get_path()), "read": "source"}
    return out


def main() -> None:
    import argparse

    import vllm
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    cli = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    cli.add_argument("--out", type=Path, default=ROOT / "warmcast" / "config" / "vllm_args.json")
    out = cli.parse_args().out
    data = constraints_from_parser(make_arg_parser(FlexibleArgumentParser()), vllm.__version__)
    data["kernel_block_sizes"] = kernel_block_sizes()
    out.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    print(f"wrote {out}: {len(data['options'])} options of vLLM {vllm.__version__}, "
          f"block sizes of {', '.join(data['kernel_block_sizes'])}")


if __name__ == "__main__":
    main()
