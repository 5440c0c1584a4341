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


def _burst(recovery_s, peak) -> dict:
    return {"low_rps": 1.0, "high_rps": 6.0, "step_at_s": 8.0, "burst_s": 20.0, "window_s": 2.5, "bound_ms": 1000.0,
            "recovery_s": recovery_s, "recovered": recovery_s is not None, "peak_window_p99_ms": peak,
            "samples": [[t * 0.5, 10.0 + t] for t in range(56)]}


def test_the_burst_is_told_as_it_went_not_as_recovered_after_0_s():
    from warmup.calibration.report import burst_text

    calm = burst_text(_burst(0.0, 727.0))
    assert "under 1000 ms in every 2.5-s window" in calm and "727" in calm and "recovered after 0" not in calm
    assert "back under 6.5 s after the step" in burst_text(_burst(6.5, 2100.0))
    assert "not recovered" in burst_text(_burst(None, None)) and "failed" in burst_text(_burst(None, None))


def test_window_p99s_and_recovery_read_the_same_windows():
    from warmup.calibration.search import recovery_time_s, window_p99s

    samples = [(t * 0.1, 10.0) for t in range(100)] + [(10 + t * 0.1, 2000.0 if t < 30 else 10.0) for t in range(60)]
    windows = window_p99s(samples, 10.0, 2.0)
    assert windows[0] == (10.0, 2000.0) and max(p for _, p in windows) == 2000.0 and windows[-1][1] == 10.0
    assert recovery_time_s(samples, 10.0, 500.0, 2.0) == pytest.approx(4.0)  # last bad window starts at 12 s


def test_the_calibration_plot_is_a_readable_grid(tmp_path: Path):
    """Five panels (four scenarios and the burst) in one 1890x324 strip were too small to read."""
    from PIL import Image

    from warmup.calibration.report import plot

    curve = [{"rate_rps": r, "passed": r < 3, "ttft_ms": {"p50": 10.0, "p99": 100.0 * r},
              "e2e_ms": {"p50": 50.0, "p99": 300.0 * r}} for r in (1.0, 2.0, 4.0)]
    scen = {n: {"parts": [{"prompt_tokens": 60}], "curve": curve, "capacity_rps": 2.0}
            for n in ("short", "medium", "long", "mix")}
    doc = {"scenarios": scen, "burst": _burst(0.0, 727.0), "slo": {"ttft_p99_ms": 1000.0, "late_wait_s": 5.0},
           "slo_text": "TTFT P99 <= 1000 ms", "server": {"model": "/m/tiny"}, "generator": {"name": "vllm bench serve"}}
    plot(doc, tmp_path / "c.png")
    w, h = Image.open(tmp_path / "c.png").size
    assert h >= 0.8 * w and w <= 1300, (w, h)


def test_one_resident_process_runs_every_step_and_outlives_a_failed_one(tmp_path: Path):
    """The tool's imports cost 8 s of CPU a step, so one process runs them all (the real tool, from the
    vLLM environment; no server is needed to fail).  A step the tool refuses (a bad flag: argparse's
    SystemExit) or cannot send (nothing listens) is a failed step, with the tool's own words, and the
    same process runs the next; close() ends it."""
    import asyncio
    import os

    from warmup.actuators.launch import default_vllm_python_path
    from warmup.calibration.benchserve import DRIVER

    python = default_vllm_python_path()
    if not python.exists():
        pytest.skip(f"no vLLM virtualenv at {python} (bash scripts/setup-vllm.sh)")
    tool = BenchServe("http://127.0.0.1:9", "m", python)
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}  # the tokenizer "m" fails at once, not after the hub's retries

    async def steps():
        bad = await tool.execute([str(python), "-c", DRIVER, "--no-such-flag"], env, 300)
        first = tool._resident.pid
        argv = tool.argv(tmp_path / "trace.jsonl", 1, tmp_path / "out.json", 0)
        unreachable = await tool.execute([str(python), "-c", DRIVER, *argv], env, 300)
        same = tool._resident.pid == first
        await tool.close()
        return bad, unreachable, same

    (tmp_path / "trace.jsonl").write_text(trace_lines([Arrival(0.0, 16, 4, "short", True)], 0)[0] + "\n")
    (bad_rc, bad_log), (rc, log), same = asyncio.run(steps())
    assert bad_rc == 1 and "--no-such-flag" in bad_log, bad_log[-2000:]
    assert rc == 1 and same and tool._resident is None, log[-2000:]
