"""GuideLLM as calibration's load engine (``warmcast calibrate --engine guidellm``), where installed.

The step's schedule goes to GuideLLM as a Mooncake trace file (``--data kind=mooncake``; the same
lines ``vllm bench serve`` reads as ``timed_trace``) replayed at its timestamps
(``--profile kind=replay,schedule_turn=timestamp``); the probe is its ``concurrent`` profile.
GuideLLM writes its own JSON report, which keeps every request's timings (``requests.successful``,
``errored``, ``incomplete``); :func:`records` pairs them with the arrivals by their trace time.

GuideLLM builds prompts as text (Faker's English re-tokenized with ``--tokenizer``) and sends
text, so the server needs a tokenizer of its own: a server started with ``--skip-tokenizer-init``
cannot be calibrated with it (the default engine sends token ids and can).
"""
from __future__ import annotations

import json
import math
import os
import subprocess
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Optional

from warmup.calibration.steps import Arrival, Record
from warmup.calibration.tool import CHUNK, LoadTool, ToolError, last_line

NAME = "guidellm"
PINNED = "0.8.1"  # the version scripts/setup-guidellm.sh installs and the tests ran
INSTALL = (f"install GuideLLM (`bash scripts/setup-guidellm.sh` builds .venv-guidellm; or `pip install "
           f"guidellm=={PINNED}` in any environment) and pass its interpreter with --bench-python")
TIME_TOL_S = 1e-3  # the trace file keeps send times to the microsecond


def default_python() -> Path:
    """``$WARMCAST_GUIDELLM_PYTHON`` or the repo's ``.venv-guidellm/bin/python`` (may not exist)."""
    from warmup.actuators.launch import REPO_ROOT

    return Path(os.environ.get("WARMCAST_GUIDELLM_PYTHON") or REPO_ROOT / ".venv-guidellm" / "bin" / "python")


def _settled(report: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """Every request of the report's one benchmark with its status."""
    benches = report.get("benchmarks") or []
    if len(benches) != 1:
        raise ToolError(f"{NAME}: its report holds {len(benches)} benchmarks, expected the one run")
    groups = benches[0].get("requests") or {}
    return [(status, r) for status in ("successful", "errored", "incomplete") for r in groups.get(status) or []]


def _record(a: Arrival, status: str, r: dict[str, Any], deadline_s: float, drain_s: float) -> Record:
    """One request: failed unless it completed with a first token before the deadline (seconds
    after the trace's first line: the last arrival's time plus ``drain_s``)."""
    info = r.get("info") or {}
    if status != "successful" or r.get("time_to_first_token_ms") is None:
        why = info.get("error") or ("cancelled unfinished at the end of the run" if status == "incomplete"
                                    else "no first token")
        return Record(a, False, error=last_line(why))
    start = info["timings"]["targeted_start"] - info["settings"]["relative_timestamp"]
    if r["request_end_time"] - start > deadline_s:
        return Record(a, False, error=f"unfinished {drain_s:g} s after the last arrival")
    return Record(a, True, float(r["time_to_first_token_ms"]), float(r["request_latency"]) * 1000.0,
                  int(r.get("prompt_tokens") or 0), int(r.get("output_tokens") or 0))


def _paired(times: list[float], settled: list[tuple[str, dict[str, Any]]]) -> list[Optional[tuple[str, dict]]]:
    """For each trace time (ascending), the report's request at that time, or None where the report
    has none; a request at a time the trace does not hold means the report is not this step's."""
    out: list[Optional[tuple[str, dict]]] = []
    j = 0
    for t in times:
        rel = settled[j][1]["info"]["settings"]["relative_timestamp"] if j < len(settled) else math.inf
        if rel < t - TIME_TOL_S:
            raise ToolError(f"{NAME}: its report holds a request at trace time {rel:.6f} s that this step did not "
                            f"send; is this the report of this step's trace?")
        out.append(settled[j] if abs(rel - t) <= TIME_TOL_S else None)
        j += out[-1] is not None
    if j < len(settled):
        raise ToolError(f"{NAME}: its report holds {len(settled) - j} requests past the step's last trace time")
    return out


LOST = f"not in {NAME}'s report (the tool lost it): left out of the step's figures"
MAX_LOST = 0.05  # more lost than this share of a step (and more than 2): the report cannot judge it


def records(arrivals: list[Arrival], report: dict[str, Any], drain_s: float) -> list[Record]:
    """One record per arrival, in order.  GuideLLM's requests carry their trace time (relative to
    the first line), so arrival i is the request at its own trace time.

    GuideLLM 0.8.1 leaves an occasional request out of its report (1 of 26 at 0.65 req/s with TTFT
    P99 20 ms, 2 of 89 at 6.5 req/s; with 1 and with 10 worker processes): its own bookkeeping, not
    the server, since it happens at any load.  Such an arrival is left out of the step's figures
    (its record is marked unmeasured, with the reason), not counted as the server's failure; a
    step that loses more than ``MAX_LOST`` of its requests is refused."""
    if not arrivals:
        return []
    settled = sorted(_settled(report), key=lambda sr: sr[1]["info"]["settings"]["relative_timestamp"])
    order = sorted(range(len(arrivals)), key=lambda i: arrivals[i].at_s)
    t0 = arrivals[order[0]].at_s
    deadline = arrivals[order[-1]].at_s - t0 + drain_s
    out = [Record(replace(a, measured=False), False, error=LOST) for a in arrivals]
    for i, sr in zip(order, _paired([arrivals[i].at_s - t0 for i in order], settled)):
        if sr is not None:
            out[i] = _record(arrivals[i], sr[0], sr[1], deadline, drain_s)
    lost = sum(r.error == LOST for r in out)
    if lost > max(2, MAX_LOST * len(arrivals)):
        raise ToolError(f"{NAME}: its report lacks {lost} of the {len(arrivals)} requests sent; it cannot judge "
                        f"this step")
    return out


@dataclass
class GuideLLM(LoadTool):
    """GuideLLM against one server, run as ``python -m guidellm run`` with its own interpreter."""

    name = NAME
    # GuideLLM's worker processes (its default 10; $GUIDELLM__MAX_WORKER_PROCESSES wins).  At 12 req/s
    # on 2 cores beside the server, TTFT P50 read 63 ms with 10 and 11 ms with 1 (the tool's own
    # processes took the server's CPU).  A GPU server at hundreds of req/s may need more.
    workers: int = 1

    def env(self) -> dict[str, str]:
        return {"GUIDELLM__MAX_WORKER_PROCESSES": os.environ.get("GUIDELLM__MAX_WORKER_PROCESSES", str(self.workers))}

    def version(self) -> str:
        """The installed GuideLLM's version; raises ToolError saying how to install it when missing."""
        if not Path(self.python).exists():
            raise ToolError(f"{NAME} not found: no interpreter at {self.python}; {INSTALL}")
        proc = subprocess.run([str(self.python), "-c", "import importlib.metadata as m, guidellm.benchmark; "
                               "print(m.version('guidellm'))"], capture_output=True, text=True, timeout=300)
        if proc.returncode != 0:
            raise ToolError(f"{NAME} not found: {self.python} cannot import guidellm ({last_line(proc.stderr)}); "
                            f"{INSTALL}")
        return proc.stdout.strip().splitlines()[-1]

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "dataset": "mooncake trace replay (warmcast's schedule)"}

    def command(self, trace: Path, n: int, out: Path, seed: int, concurrency: Optional[int]) -> list[str]:
        """``guidellm run`` for one step; each option is GuideLLM's own ``kind=...`` object, as JSON."""
        # A replay ends with its trace; max_requests there dropped the last line (0.8.1), so only
        # the closed loop, which would cycle its data forever, is bounded by it.
        bound = ["--constraint", json.dumps({"kind": "max_requests", "count": n})] if concurrency else []
        profile = ({"kind": "concurrent", "streams": [concurrency]} if concurrency
                   else {"kind": "replay", "schedule_turn": "timestamp"})
        opts = {"--backend": {"kind": "openai_http", "target": self.url, "model": self.model,
                              "request_format": "/v1/completions"},
                "--tokenizer": {"kind": "hf_auto", "model": self.tokenizer or self.model},
                "--data": {"kind": "mooncake", "source": {"kind": "json_file", "path": str(trace)},
                           "hash_id_block_size": CHUNK},
                "--profile": profile,
                "--seed": {"kind": "static", "value": seed}, "--output": {"kind": "json", "path": str(out)}}
        return [str(self.python), "-m", "guidellm", "run", *[x for k, v in opts.items() for x in (k, json.dumps(v))],
                *bound, "--disable-console"]

    def records(self, arrivals: list[Arrival], report: dict[str, Any], drain_s: float) -> list[Record]:
        return records(arrivals, report, drain_s)

    def throughput(self, report: dict[str, Any]) -> tuple[int, float]:
        done = [r for status, r in _settled(report) if status == "successful"]
        if not done:
            return 0, 0.0
        return len(done), max(r["request_end_time"] for r in done) - min(r["request_start_time"] for r in done)
