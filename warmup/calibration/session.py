"""One ``warmcast calibrate`` run: resolve the SLO and the server, run, write the files, store.

Nothing is written or stored before the run has its answer: an unreachable server, a
server without the model or an SLO that no rate meets ends with a clear error and leaves
``calibration.json`` and the stored calibrations as they were.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, AsyncIterator, Callable, Optional
from urllib.parse import urlsplit

from warmcast.errors import InputError, WarmcastError
from warmcast.config.slo import SLO
from warmcast.text import clip, shown
from warmup.actuators.vllm_client import InstanceError, InstanceUnavailable, VLLMClient
from warmup.calibration import report
from warmup.calibration.benchserve import BenchServe
from warmup.calibration.guidellm import GuideLLM, default_python as default_guidellm_python
from warmup.calibration.tool import LoadTool
from warmup.calibration.runner import CalibrationPlan, run_calibration


ENGINES = ("vllm-bench", "guidellm")  # --engine: vllm bench serve (the default), GuideLLM


@dataclass
class CalibrateRequest:
    out: Path
    url: Optional[str] = None
    deployment: Optional[str] = None
    profile: Optional[str] = None
    model: Optional[str] = None
    engine_args: list[str] = field(default_factory=list)
    port: int = 0
    store: bool = True
    config: Optional[Path] = None
    slo_flags: dict[str, Optional[float]] = field(default_factory=dict)
    plan_args: dict[str, Any] = field(default_factory=dict)
    engine: str = "vllm-bench"            # the load generator: vllm-bench (vllm bench serve) or guidellm
    bench_python: Optional[Path] = None   # the interpreter that has it (default .venv-vllm / .venv-guidellm)
    tokenizer: Optional[str] = None       # what the tool loads for its vocabulary (default: the served model)


def resolve_slo(base: SLO, flags: dict[str, Optional[float]]) -> SLO:
    """The deployment's SLO (or the default one) with the bounds given as flags replaced."""
    given = {k: v for k, v in flags.items() if v is not None}
    try:
        return SLO(**{**base.model_dump(), **given})
    except ValueError as err:
        raise InputError(f"SLO flags: {err}") from None


def make_plan(args: dict[str, Any]) -> CalibrationPlan:
    plan = CalibrationPlan(**args)
    known = ("short", "medium", "long", "mix")
    bad = [s for s in plan.scenarios if s not in known] + (
        [plan.headline] if plan.headline and plan.headline not in plan.scenarios else [])
    if not plan.scenarios or bad:
        raise InputError(f"--scenarios/--headline: {bad or 'none given'} not among the scenarios run; "
                         f"choose from {', '.join(known)}")
    if plan.arrivals not in ("poisson", "constant"):
        raise InputError(f"--arrivals: {plan.arrivals!r}; use poisson or constant")
    return plan


async def _server_facts(client: VLLMClient, launched_args: Optional[dict[str, Any]]) -> dict[str, Any]:
    try:
        version = (await client._request("GET", "/version", retries=1)).json().get("version")
    except (InstanceError, ValueError):
        version = None
    if launched_args is not None:
        return {"vllm_version": version, "engine_args": launched_args, "engine_args_source": "launched by calibrate"}
    info = await client.server_info()
    args = (info or {}).get("vllm_config") if info else None
    return {"vllm_version": version, "engine_args": args,
            "engine_args_source": "/server_info (dev mode)" if args else "unknown: server not in dev mode"}


@contextlib.asynccontextmanager
async def _launched(dep: Any, profile: Optional[str], settings: Any, overrides: list[str], port: int,
                    echo: Callable[[str], None]) -> AsyncIterator[tuple[str, dict[str, Any]]]:
    """One instance of the profile through the local backend, stopped afterwards."""
    from warmup.actuators.launch import local_launch_spec, parse_engine_args
    from warmup.actuators.scalers import LocalProcessScaler

    model, args, notes = local_launch_spec(dep, profile, settings.state_dir, parse_engine_args(overrides))
    for n in notes:
        echo(f"note: {n}")
    backend = LocalProcessScaler(f"{dep.name}-calibrate", model, args, base_port=port or dep.scaler.base_port,
                                 python=dep.scaler.python, log_dir=Path(settings.state_dir) / "vllm-logs")
    try:
        echo(f"launching {model} ({dep.name}/{profile or dep.default_profile}) ...")
        backend.scale_to(1, "calibration")
        await backend.wait_ready(600)
        yield backend.urls()[0], args
    finally:
        backend.scale_to(0, "calibration done")
        backend.close()


def server_url(url: str, flag: str = "--url") -> str:
    """``url`` if it names an HTTP server (scheme http or https, a host, a port in 1-65535), else an
    InputError naming ``flag``: checked before anything runs, as httpx raised on some of these
    (``http://[::1``, a port of 99999) with a traceback and took others for an unreachable server."""
    try:
        parts = urlsplit(url.strip())
    except ValueError as err:   # an unclosed IPv6 bracket
        raise InputError(f"{flag} {shown(url)} is not a URL: {err}") from None
    try:
        port = parts.port
    except ValueError:          # not a number, or over 65535
        raise InputError(f"{flag} {shown(url)}: port {parts.netloc.rpartition(':')[2]} is not a number "
                         "in 1-65535") from None
    if parts.scheme not in ("http", "https"):
        raise InputError(f"{flag} {shown(url)}: give the server as http://host:port or https://host:port")
    if not parts.hostname:
        raise InputError(f"{flag} {shown(url)}: no host; give the server as http://host:port")
    if port == 0:
        raise InputError(f"{flag} {shown(url)}: port 0 is not a number in 1-65535")
    return url


async def calibrate(req: CalibrateRequest, echo: Callable[[str], None]) -> dict[str, Any]:
    """Run the calibration ``req`` describes; returns the document written."""
    if req.url is not None:
        server_url(req.url)
    plan = make_plan(req.plan_args)
    if req.engine not in ENGINES:
        raise InputError(f"--engine: {req.engine!r}; choose from {', '.join(ENGINES)}")
    settings = dep = None
    if req.deployment or not req.url:
        from warmcast.runtime import load_fleet
        from warmcast.config.settings import load_settings

        if not req.deployment:
            raise InputError("give --url (a running server) or --deployment (launch one through its local backend)")
        settings = load_settings(req.config)
        dep = load_fleet(settings).get(req.deployment)
        if (req.profile or dep.default_profile) not in dep.profiles:
            raise InputError(f"deployment {dep.name}: no profile {req.profile!r}; has {sorted(dep.profiles)}")
    slo = resolve_slo(dep.slo if dep is not None else SLO(), req.slo_flags)
    echo(f"SLO: {slo.describe()}")
    async with contextlib.AsyncExitStack() as stack:
        url, launched, tool = req.url, None, None
        if url is None:
            tool = _load_engine(req, echo, dep, settings)  # before a launch that takes minutes
            url, launched = await stack.enter_async_context(
                _launched(dep, req.profile, settings, req.engine_args, req.port, echo))
        client = await stack.enter_async_context(VLLMClient(url, model=req.model, retries=1))
        try:
            client_model = (await client.model_info()).id
        except InstanceUnavailable as err:
            raise WarmcastError(f"calibrate: server {url} is unreachable: {err}") from None
        except InstanceError as err:
            raise WarmcastError(f"calibrate: server {url} cannot be calibrated: {err}") from None
        tool = tool or _load_engine(req, echo)
        stack.push_async_callback(tool.close)
        tool.url, tool.model = url, client_model
        with _progress(plan) as progress:
            run = await run_calibration(client, tool, plan, slo, progress)
        server = await _server_facts(client, launched)
    profile = (req.profile or dep.default_profile) if dep is not None else req.profile
    run["generator"] = tool.describe()
    doc = report.document(run, slo=slo, plan=plan, url=url, server=server,
                          deployment=dep.name if dep else None, profile=profile)
    js, png = report.write_files(doc, req.out)
    cap = doc["capacity"]
    echo(f"capacity {cap['rpm']:g} req/min ({cap['tokens_per_s']} tokens/s) in scenario {cap['scenario']}: "
         f"held over {cap['requests']} requests, TTFT P99 {cap['ttft_p99_ms']} ms, its {cap['confidence']:.0%} "
         f"upper bound {cap['ttft_p99_upper_ms']} ms"
         + (f"; {cap['lowest_broken_rps'] * 60:g} req/min broke" if cap["lowest_broken_rps"] else "")
         + f"; wrote {js} and {png}")
    if dep is not None and req.store:
        from warmup.calibration.store import CalibrationStore
        from warmcast.runtime import redis_client

        version = CalibrationStore(redis_client(settings), settings.key_prefix).put(dep.name, profile, doc)
        echo(f"stored as calibration v{version} of {dep.name}/{profile}")
    return doc


def _load_engine(req: CalibrateRequest, echo: Callable[[str], None], dep: Any = None,
                 settings: Any = None) -> LoadTool:
    """The load generator --engine names, from --bench-python (default: its own environment),
    checked before a launch: a missing tool says how to install it.  The tiny ``dummy`` model
    has no tokenizer: ``vllm bench serve`` gets the word-level one built for it (it only draws
    token ids from its vocabulary); GuideLLM sends text, which such a server cannot read."""
    from warmup.actuators.launch import default_vllm_python_path, local_state_dir, write_tiny_tokenizer

    dummy = dep is not None and dep.model == "dummy" and not dep.scaler.model_dir
    if req.engine == "guidellm":
        if dummy:
            raise InputError("--engine guidellm sends text prompts and the launched 'dummy' model has no tokenizer "
                             "(--skip-tokenizer-init): use the default engine, or --url of a server with a tokenizer")
        tool: LoadTool = GuideLLM("", "", Path(req.bench_python or default_guidellm_python()), tokenizer=req.tokenizer)
    else:
        tool = BenchServe("", "", Path(req.bench_python or default_vllm_python_path()), tokenizer=req.tokenizer)
    tool.tool_version = tool.version()
    if tool.tokenizer is None and dummy:
        tool.tokenizer = str(write_tiny_tokenizer(local_state_dir(settings.state_dir) / "tiny-tokenizer", tool.python))
    echo(f"load generator: {tool.name} {tool.tool_version} ({tool.python})")
    return tool


@contextlib.contextmanager
def _progress(plan: CalibrationPlan):
    """A progress bar over the step budget; each message advances it by one step."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn(), transient=False) as bar:
        task = bar.add_task("calibrating", total=plan.steps_budget())

        def advance(msg: str) -> None:
            bar.console.print(msg)
            bar.update(task, advance=1, description=clip(msg, 60))

        yield advance
        bar.update(task, completed=plan.steps_budget())
