"""What calibration's load generators share: the step as a trace file, the tool as a process,
the closed-loop probe.

Each generator (``vllm bench serve``: :mod:`warmup.calibration.benchserve`; GuideLLM:
:mod:`warmup.calibration.guidellm`) gets a step's schedule as one JSON line per request (send time
in seconds, prompt and output length, hash ids that make each prompt its own tokens: the Mooncake
trace schema, which both tools read), sends it with its own client and timing, and saves a JSON
report; a subclass says how to call it (:meth:`LoadTool.command`) and how to read its report back
(:meth:`LoadTool.records`, :meth:`LoadTool.throughput`).
"""
from __future__ import annotations

import asyncio
import json
import math
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence

from warmcast.errors import WarmcastError
from warmup.calibration.search import Scenario
from warmup.calibration.steps import Arrival, Record

CHUNK = 16  # tokens per hash id (vllm bench serve's default --timed-trace-chunk-hash-size)


class ToolError(WarmcastError):
    """The load generator is missing or could not run a step."""


def trace_lines(arrivals: Sequence[Arrival], seed: int) -> list[str]:
    """The step as trace lines; each request's hash ids are its own, so no two prompts share a
    prefix (the server's prefix cache would otherwise serve later ones for free)."""
    lines, next_id = [], (seed % 100_000) * 10_000_000
    for a in arrivals:
        n = max(1, math.ceil(a.prompt / CHUNK))
        lines.append(json.dumps({"timestamp": round(a.at_s, 6), "input_length": a.prompt,
                                 "output_length": a.output, "hash_ids": list(range(next_id, next_id + n))}))
        next_id += n
    return lines


def last_line(text: str) -> str:
    lines = [x for x in str(text).strip().splitlines() if x.strip()]
    return (lines[-1] if lines else str(text))[:200]


def tool_error(log: str) -> str:
    """The line of the tool's output that says what went wrong (its last exception line)."""
    lines = [x for x in log.strip().splitlines() if x.strip()]
    errs = [x for x in lines if "Error" in x or "error" in x]
    tail = (errs or lines or ["no output"])[-1][:300]
    if "tokenizer" in log.lower() and ("OSError" in log or "Can't load" in log or "not a local folder" in log):
        tail += "; give a tokenizer the tool can load with --tokenizer (a local path or a hub name)"
    return tail


def closed_loop(scenario: Scenario, n: int, seed: int) -> list[Arrival]:
    """``n`` requests all due at once, the scenario's parts in turn by share (the tool keeps the
    set number outstanding)."""
    parts = [p for p in scenario.parts for _ in range(max(1, round(p[0] * 10)))]
    return [Arrival(0.0, parts[(i + seed) % len(parts)][1], scenario.output, parts[(i + seed) % len(parts)][2], True)
            for i in range(n)]


@dataclass
class LoadTool:
    """A load generator against one server, run as its own process with ``python``.
    ``tokenizer``: a name or path the tool can load (default: the served model's id)."""

    url: str
    model: str
    python: Path
    tokenizer: Optional[str] = None
    tool_version: str = ""
    startup_s: float = 180.0  # the tool's imports and tokenizer before its first request
    name = "load tool"

    def command(self, trace: Path, n: int, out: Path, seed: int, concurrency: Optional[int]) -> list[str]:
        raise NotImplementedError

    def records(self, arrivals: list[Arrival], report: dict[str, Any], drain_s: float) -> list[Record]:
        raise NotImplementedError

    def throughput(self, report: dict[str, Any]) -> tuple[int, float]:
        """(completed requests, seconds they took) of a closed-loop run."""
        raise NotImplementedError

    def env(self) -> dict[str, str]:
        """Environment the tool runs with, beside this process's."""
        return {}

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "version": self.tool_version, "python": str(self.python),
                "tokenizer": self.tokenizer or self.model, "dataset": "warmcast's schedule as a trace file"}

    async def send(self, arrivals: list[Arrival], *, drain_s: float, seed: int = 0) -> list[Record]:
        """Send the step's arrivals at their times; one record per arrival, in order."""
        if not arrivals:
            return []
        report = await self._run(arrivals, seed, timeout_s=arrivals[-1].at_s + drain_s + self.startup_s)
        return self.records(arrivals, report, drain_s) if report is not None else [
            Record(a, False, error=f"{self.name} did not finish within {drain_s:g} s after the last arrival")
            for a in arrivals]

    async def probe(self, scenario: Scenario, *, concurrency: int, duration_s: float, seed: int = 0) -> float:
        """Saturation throughput (completed req/s) with ``concurrency`` requests outstanding: a short
        run sizes a second one that lasts about ``duration_s``."""
        n, thr = 2 * concurrency, math.nan
        for _ in range(2):
            report = await self._run(closed_loop(scenario, n, seed), seed, timeout_s=self.startup_s + 10 * duration_s,
                                     concurrency=concurrency)
            done, took = self.throughput(report) if report is not None else (0, math.nan)
            if not done:
                return math.nan
            thr = done / took
            if took >= duration_s / 2:
                return thr
            n = max(n, min(5000, math.ceil(thr * duration_s)))
        return thr

    async def _run(self, arrivals: list[Arrival], seed: int, *, timeout_s: float,
                   concurrency: Optional[int] = None) -> Optional[dict[str, Any]]:
        """The tool's JSON report of one run, or None when it ran past ``timeout_s`` (killed)."""
        with tempfile.TemporaryDirectory(prefix="warmcast-tool-") as tmp:
            trace, out = Path(tmp) / "trace.jsonl", Path(tmp) / "result.json"
            trace.write_text("\n".join(trace_lines(arrivals, seed)) + "\n")
            cmd = self.command(trace, len(arrivals), out, seed, concurrency)
            env = {**os.environ, "PYTHONHASHSEED": str(seed % 2**32), **self.env()}  # vllm bench seeds by hash()
            ran = await self.execute(cmd, env, timeout_s)
            if ran is None:
                return None
            rc, log = ran
            if rc != 0 or not out.exists():
                raise ToolError(f"{self.name} exited {rc}: {tool_error(log)}")
            return json.loads(out.read_text())

    async def execute(self, cmd: list[str], env: dict[str, str], timeout_s: float) -> Optional[tuple[int, str]]:
        """Run one step's command: (exit status, its output), or None when it ran past ``timeout_s`` (killed)."""
        proc = await asyncio.create_subprocess_exec(*cmd, stdout=asyncio.subprocess.PIPE,
                                                    stderr=asyncio.subprocess.STDOUT, env=env)
        try:
            log, _ = await asyncio.wait_for(proc.communicate(), timeout_s)
        except asyncio.TimeoutError:
            proc.kill()
            await proc.wait()
            return None
        return int(proc.returncode or 0), log.decode(errors="replace")

    async def close(self) -> None:
        """End whatever the tool keeps running between steps (nothing, unless a subclass keeps a process)."""
