"""Check a profile's ``engine_args`` against vLLM's own argument parser before any instance starts.

Where vLLM is importable in this interpreter its parser is read directly; otherwise (the usual
case: vLLM lives in ``.venv-vllm``) the constraints recorded from vLLM's parser by
``scripts/dump-vllm-args.py`` are used (``vllm_args.json``, shipped as package data), and the
error says so. This module imports only the standard library, so that script can import it
under vLLM's interpreter.
"""
from __future__ import annotations

import difflib
import functools
import importlib.util
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

RECORDED = Path(__file__).with_name("vllm_args.json")
HUMAN_INT = re.compile(r"^-?\d+(\.\d+)?[kKmMgGtT]?$")
# vLLM picks one of these by GPU; a profile must run on whichever it gets unless it pins one
GPU_BACKENDS = ("FLASH_ATTN", "FLASHINFER", "TRITON_ATTN", "FLEX_ATTENTION")


def _type_name(fn: Any) -> str:
    name = getattr(fn, "__name__", "str") if fn is not None else "str"
    if name == "_optional_type" and fn.__closure__:  # vLLM's optional_type(T): read T
        inner = [c.cell_contents for c in fn.__closure__ if callable(c.cell_contents)]
        return f"optional:{_type_name(inner[0])}" if inner else "str"
    return name


def constraints_from_parser(parser: Any, version: str) -> dict[str, Any]:
    """Options of an argparse parser: long names, whether a flag, type, choices, nargs."""
    options: dict[str, dict[str, Any]] = {}
    for action in parser._actions:
        longs = [o[2:] for o in action.option_strings if o.startswith("--")]
        if not longs or action.dest == "help":
            continue
        spec = {"dest": action.dest, "flag": action.nargs == 0, "type": _type_name(action.type),
                "nargs": action.nargs if isinstance(action.nargs, (str, int)) else None,
                "choices": sorted(map(str, action.choices)) if action.choices else None}
        for name in longs:
            options[name] = {**spec, "negated": name.startswith("no-") and name[3:] in longs}
    return {"vllm_version": version, "options": options}


@dataclass(frozen=True)
class Constraints:
    version: str
    options: dict[str, dict[str, Any]]
    kernel_block_sizes: dict[str, dict[str, Any]]
    origin: str  # says where they came from, for error messages


@functools.lru_cache(maxsize=1)
def load_constraints() -> Constraints:
    """vLLM's parser if vLLM is importable here, else the recorded constraints."""
    if importlib.util.find_spec("vllm") is not None:
        import vllm  # type: ignore[import-not-found]
        from vllm.entrypoints.launchers.cli_args import make_arg_parser  # type: ignore[import-not-found]
        from vllm.utils.argparse_utils import FlexibleArgumentParser  # type: ignore[import-not-found]

        live = constraints_from_parser(make_arg_parser(FlexibleArgumentParser()), vllm.__version__)
        recorded = json.loads(RECORDED.read_text())
        return Constraints(live["vllm_version"], live["options"], recorded["kernel_block_sizes"],
                           f"the installed vLLM {vllm.__version__}'s argument parser")
    data = json.loads(RECORDED.read_text())
    return Constraints(data["vllm_version"], data["options"], data["kernel_block_sizes"],
                       f"constraints recorded from vLLM {data['vllm_version']}'s argument parser "
                       "(vLLM is not installed in this environment)")


def _value_problem(spec: dict[str, Any], value: Any) -> str | None:
    """Why argparse (with vLLM's type) would refuse ``value``, or None."""
    if spec["flag"]:
        return None if isinstance(value, bool) else "is a switch: give true or false"
    values = value if isinstance(value, list) and spec["nargs"] in ("+", "*") else [value]
    for v in values:
        if spec["choices"] is not None and str(v) not in spec["choices"]:
            return f"is not one of the accepted values {', '.join(spec['choices'])}"
        problem = _type_problem(spec["type"].removeprefix("optional:"), v)
        if problem:
            return problem
    return None


def _type_problem(kind: str, v: Any) -> str | None:
    if isinstance(v, bool):
        return f"must be a {kind} value, not true/false"
    if kind == "int" and not (isinstance(v, int) or (isinstance(v, str) and re.fullmatch(r"-?\d+", v))):
        return "must be an integer"
    if kind == "float":
        try:
            float(v)
        except (TypeError, ValueError):
            return "must be a number"
    if kind.startswith("human_readable_int") and not (
            isinstance(v, int) or (isinstance(v, str) and (HUMAN_INT.match(v) or v == "auto"))):
        return "must be an integer such as 4096 or 4k"
    if kind in ("loads", "parse_dataclass") and isinstance(v, str):
        try:
            json.loads(v)
        except ValueError:
            return "must be a mapping or JSON text"
    if kind not in ("loads", "parse_dataclass") and isinstance(v, (dict, list)):
        return "must be a single value"
    return None


def _fits(size: int, accepted: list[Any]) -> bool:
    return any(size == a if isinstance(a, int) else size % a["multiple_of"] == 0 for a in accepted)


def accepted_block_sizes(c: Constraints, backend: str | None) -> tuple[list[int], str]:
    """Block sizes (up to 1024) the pinned backend, or every GPU backend, accepts, and which those are."""
    names = [backend] if backend in c.kernel_block_sizes else [b for b in GPU_BACKENDS if b in c.kernel_block_sizes]
    sizes = [s for s in range(1, 1025) if all(_fits(s, c.kernel_block_sizes[n]["sizes"]) for n in names)]
    return sizes, "/".join(names)


def check_engine_args(args: Mapping[str, Any], c: Constraints) -> list[str]:
    """Problems with one profile's engine args, each naming the arg, the value and what is accepted."""
    problems = []
    for key, value in args.items():
        name = str(key).lstrip("-").replace("_", "-")
        spec = c.options.get(name)
        if spec is None:
            near = difflib.get_close_matches(name, c.options, n=1)
            problems.append(f"{name}: not a vLLM option" + (f" (did you mean {near[0]}?)" if near else ""))
            continue
        if value is False and spec["flag"] and f"no-{name}" not in c.options:
            problems.append(f"{name}: false is not accepted (vLLM has no --no-{name}; leave it out)")
            continue
        problem = None if value is None else _value_problem(spec, value)
        if problem:
            problems.append(f"{name}: {value!r} {problem}")
    problems += _block_size_problem(args, c)
    return problems


def _block_size_problem(args: Mapping[str, Any], c: Constraints) -> list[str]:
    norm = {str(k).lstrip("-").replace("_", "-"): v for k, v in args.items()}
    size = norm.get("block-size")
    if not isinstance(size, int) or isinstance(size, bool):
        return []
    backend = norm.get("attention-backend")
    accepted, names = accepted_block_sizes(c, backend)
    if size in accepted:
        return []
    shown = ", ".join(map(str, accepted[:8])) + (", ..." if len(accepted) > 8 else "")
    why = (f"the pinned attention backend {backend}" if backend in c.kernel_block_sizes else
           f"every GPU attention backend vLLM may pick ({names}; pin one with attention-backend)")
    return [f"block-size: {size} is not accepted by {why}; accepted: {shown}"]
