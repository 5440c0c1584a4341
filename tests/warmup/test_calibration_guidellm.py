"""GuideLLM as calibration's load engine: the command it is given and how its JSON report is read.

The tool itself runs against a real vLLM server in tests/integration/test_calibrate_guidellm.py;
here, the pure translations.  The reports below hold only the fields warmcast reads, with the
names and nesting of GuideLLM 0.8.1's report (``benchmarks[0].requests.{successful,errored,
incomplete}[*]``, each request's ``info.settings.relative_timestamp`` and ``info.timings``).
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from warmup.calibration.guidellm import GuideLLM, records
from warmup.calibration.search import Scenario
from warmup.calibration.steps import schedule, step_stats
from warmup.calibration.tool import ToolError

MIX = Scenario("mix", ((0.7, 60, "short"), (0.3, 700, "long")), 32)
START = 1_796_000_000.0  # the run's wall-clock start (trace time 0)


def _request(rel: float, prompt: int, ttft_ms: float = 50.0, latency_s: float = 0.4, error: str | None = None) -> dict:
    return {"info": {"settings": {"relative_timestamp": rel}, "timings": {"targeted_start": START + rel},
                     "error": error},
            "time_to_first_token_ms": None if error else ttft_ms, "request_latency": latency_s,
            "request_start_time": START + rel, "request_end_time": START + rel + latency_s,
            "prompt_tokens": prompt, "output_tokens": 32}


def _report(successful: list, errored: list = (), incomplete: list = ()) -> dict:
    return {"benchmarks": [{"requests": {"successful": list(successful), "errored": list(errored),
                                         "incomplete": list(incomplete)}}]}


def _arrivals():
    arrivals = schedule(MIX, 4.0, 1.0, 5.0, np.random.default_rng(3))
    return arrivals, arrivals[0].at_s


def test_records_pair_requests_with_arrivals_by_trace_time_whatever_the_reports_order():
    arrivals, t0 = _arrivals()
    reqs = [_request(a.at_s - t0, a.prompt, ttft_ms=10.0 + i) for i, a in enumerate(arrivals)]
    recs = records(arrivals, _report(reversed(reqs)), drain_s=10.0)
    assert [r.arrival for r in recs] == arrivals and all(r.ok for r in recs)
    assert [r.ttft_ms for r in recs] == [10.0 + i for i in range(len(arrivals))]
    assert recs[0].e2e_ms == pytest.approx(400.0) and recs[0].prompt_tokens == arrivals[0].prompt
    assert recs[0].completion_tokens == 32


def test_errors_cancellations_late_finishes_and_dropped_requests_fail():
    arrivals, t0 = _arrivals()
    reqs = [_request(a.at_s - t0, a.prompt) for a in arrivals]
    errored = reqs.pop(1)
    errored["info"]["error"], errored["time_to_first_token_ms"] = "ConnectTimeout('')", None
    incomplete = reqs.pop(1)  # now arrival 2
    reqs[-1] = _request(arrivals[-1].at_s - t0, arrivals[-1].prompt, latency_s=30.0)  # past the drain
    recs = records(arrivals, _report(reqs, [errored], [incomplete]), drain_s=10.0)
    assert recs[0].ok and not recs[1].ok and recs[1].error == "ConnectTimeout('')"
    assert not recs[2].ok and "cancelled" in recs[2].error
    assert not recs[-1].ok and "unfinished 10 s after the last arrival" in recs[-1].error
    assert sum(r.ok for r in recs) == len(arrivals) - 3


def test_a_request_the_report_lost_is_left_out_of_the_step_not_counted_as_the_servers_failure():
    arrivals = [a for a in _arrivals()[0] if a.measured]
    t0 = arrivals[0].at_s
    reqs = [_request(a.at_s - t0, a.prompt) for a in arrivals]
    lost = reqs.pop(4)  # GuideLLM 0.8.1 left it out of its report
    recs = records(arrivals, _report(reqs), drain_s=10.0)
    assert lost and not recs[4].arrival.measured and "not in guidellm's report" in recs[4].error
    st = step_stats("mix", 4.0, 5.0, recs, late_wait_s=5.0)
    assert st.sent == len(arrivals) - 1 and st.errors == 0
    with pytest.raises(ToolError, match="lacks 3 of"):  # more lost than 2 and 5% of the step
        records(arrivals, _report(reqs[:1] + reqs[3:]), drain_s=10.0)


def test_a_report_that_is_not_this_steps_is_refused():
    arrivals, t0 = _arrivals()
    shifted = [_request(a.at_s - t0 + 0.25, a.prompt) for a in arrivals]
    with pytest.raises(ToolError, match="did not send"):
        records(arrivals, _report(shifted), drain_s=10.0)
    extra = [_request(a.at_s - t0, a.prompt) for a in arrivals] + [_request(99.0, 60)]
    with pytest.raises(ToolError, match="past the step's last trace time"):
        records(arrivals, _report(extra), drain_s=10.0)
    with pytest.raises(ToolError, match="2 benchmarks"):
        records(arrivals, {"benchmarks": [{}, {}]}, drain_s=10.0)


def test_the_command_replays_the_trace_or_holds_a_concurrency():
    tool = GuideLLM("http://h:8000", "m", Path("/py"), tokenizer="/tok")
    cmd = tool.command(Path("/t/trace.jsonl"), 40, Path("/t/out.json"), 7, None)
    assert cmd[:4] == ["/py", "-m", "guidellm", "run"] and cmd[-1] == "--disable-console"
    opts = {cmd[i]: json.loads(cmd[i + 1]) for i in range(4, len(cmd) - 1, 2)}
    assert opts["--profile"] == {"kind": "replay", "schedule_turn": "timestamp"} and "--constraint" not in opts
    assert opts["--data"]["kind"] == "mooncake" and opts["--data"]["source"]["path"] == "/t/trace.jsonl"
    assert opts["--backend"]["target"] == "http://h:8000" and opts["--tokenizer"]["model"] == "/tok"
    assert opts["--output"] == {"kind": "json", "path": "/t/out.json"} and opts["--seed"]["value"] == 7
    closed = tool.command(Path("/t/trace.jsonl"), 40, Path("/t/out.json"), 7, 8)
    copts = {closed[i]: json.loads(closed[i + 1]) for i in range(4, len(closed) - 1, 2)}
    assert copts["--profile"] == {"kind": "concurrent", "streams": [8]}
    assert copts["--constraint"] == {"kind": "max_requests", "count": 40}


def test_a_missing_guidellm_says_how_to_install_it(tmp_path: Path):
    with pytest.raises(ToolError, match="setup-guidellm.sh") as err:
        GuideLLM("http://x", "m", tmp_path / "none" / "python").version()
    assert "--bench-python" in str(err.value) and "pip install guidellm==" in str(err.value)
    with pytest.raises(ToolError, match="cannot import guidellm"):
        GuideLLM("http://x", "m", Path("/usr/bin/python3")).version()
