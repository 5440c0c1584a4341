"""The calibration's load engine, ``vllm bench serve``: what it is given and how its results are read.

The tool itself runs against a real vLLM server in tests/integration/test_calibrate_vllm.py; here,
the two pure translations: a step's schedule into the tool's ``timed_trace`` lines, and the tool's
saved per-request results (its ``--save-detailed`` JSON fields) back into one record per arrival.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from warmup.calibration.benchserve import CHUNK, BenchServe, ToolError, records, trace_lines
from warmup.calibration.search import Scenario
from warmup.calibration.steps import Arrival, schedule, step_stats

MIX = Scenario("mix", ((0.7, 60, "short"), (0.3, 700, "long")), 32)


def test_trace_lines_carry_each_arrival_and_give_every_prompt_its_own_tokens():
    arrivals = schedule(MIX, 4.0, 1.0, 5.0, np.random.default_rng(3))
    lines = [json.loads(x) for x in trace_lines(arrivals, seed=5)]
    assert [x["timestamp"] for x in lines] == [round(a.at_s, 6) for a in arrivals]
    assert [(x["input_length"], x["output_length"]) for x in lines] == [(a.prompt, a.output) for a in arrivals]
    ids = [h for x in lines for h in x["hash_ids"]]
    assert len(ids) == len(set(ids)), "two prompts share a hash id: the prefix cache would serve one free"
    assert all(len(x["hash_ids"]) == math.ceil(x["input_length"] / CHUNK) for x in lines)
    other = {h for x in trace_lines(arrivals, seed=6) for h in json.loads(x)["hash_ids"]}
    assert not other & set(ids), "another step's prompts repeat this one's"


def _result(arrivals: list[Arrival], **over) -> dict:
    n = len(arrivals)
    r = {"input_lens": [a.prompt for a in arrivals], "output_lens": [x.output for x in arrivals], "ttfts": [0.05] * n,
         "latencies": [0.4] * n, "errors": [""] * n}
    r.update(over)
    return r


def test_records_read_the_tools_timings_failures_and_late_finishes():
    arrivals = schedule(MIX, 4.0, 1.0, 5.0, np.random.default_rng(3))
    n = len(arrivals)
    errors = [""] * n
    errors[1] = "Traceback (most recent call last):\n  ...\naiohttp.ClientConnectorError: refused\n"
    latencies = [0.4] * n
    latencies[-1] = 30.0  # still running 10 s after the last arrival
    recs = records(arrivals, _result(arrivals, errors=errors, latencies=latencies), drain_s=10.0)
    assert [r.arrival for r in recs] == arrivals
    assert recs[0].ok and recs[0].ttft_ms == pytest.approx(50.0) and recs[0].e2e_ms == pytest.approx(400.0)
    assert recs[0].completion_tokens == 32 and recs[0].prompt_tokens == arrivals[0].prompt
    assert not recs[1].ok and recs[1].error == "aiohttp.ClientConnectorError: refused"
    assert not recs[-1].ok and "unfinished 10 s after the last arrival" in recs[-1].error
    st = step_stats("mix", 4.0, 5.0, recs, late_wait_s=5.0)
    measured = [a for a in arrivals if a.measured]
    assert st.sent == len(measured) and st.errors == sum(1 for i, a in enumerate(arrivals)
                                                         if a.measured and i in (1, n - 1))


def test_records_refuse_a_result_that_is_not_this_steps():
    arrivals = schedule(MIX, 4.0, 1.0, 5.0, np.random.default_rng(3))
    with pytest.raises(ToolError, match="do not match"):
        records(arrivals, _result(arrivals[:-1]), drain_s=10.0)
    with pytest.raises(ToolError, match="do not match"):
        records(arrivals, _result(arrivals, input_lens=[a.prompt + 1 for a in arrivals]), drain_s=10.0)


def test_a_missing_tool_says_how_to_install_it(tmp_path: Path):
    with pytest.raises(ToolError, match="setup-vllm.sh") as err:
        BenchServe("http://x", "m", tmp_path / "none" / "python").version()
    assert "--bench-python" in str(err.value)
    with pytest.raises(ToolError, match="cannot import vllm.benchmarks.serve"):
        BenchServe("http://x", "m", Path("/usr/bin/python3")).version()
