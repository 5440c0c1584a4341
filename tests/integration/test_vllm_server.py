"""The vLLM client against ONE real vLLM CPU server (``server`` in tests/integration/conftest.py:
a tiny Llama, ``--max-num-seqs 2`` so a burst of requests queues, dev mode on)."""
from __future__ import annotations

import asyncio
import re
import time

import httpx
import numpy as np
import pytest

from promserver import NEEDS_PROMETHEUS, Prometheus
from vllmmetrics import waited_longer_than
from warmcast.config.deployments import Deployment
from warmup.actuators.launch import (
    EngineArgsError,
    default_vllm_python_path,
    gpu_available,
    render_engine_args,
    validate_engine_args,
    validate_many,
)
from warmup.actuators.local import free_port
from warmup.actuators.metrics import latency_window, parse_metrics
from warmup.calibration.runner import settle
from warmup.actuators.prometheus import PrometheusSignals, queries
from warmup.actuators.tokens import TokenDistribution
from workers.live_signals import prometheus_live, scrape_live
from warmup.actuators.vllm_client import (
    InstanceError,
    InstanceUnavailable,
    SleepModeUnavailable,
    VLLMClient,
    WarmupSpec,
    fleet_metrics,
    fleet_warmup,
)

VLLM_PY = default_vllm_python_path()
pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not VLLM_PY.exists(), reason=f"no vLLM virtualenv at {VLLM_PY}: run scripts/setup-vllm.sh"),
]

TIER_THRESHOLD = 5  # a tier's queue-depth trigger the load test must cross
HAS_GPU = gpu_available()


def run(coro):
    return asyncio.run(coro)


async def until_idle(c: VLLMClient, timeout_s: float = 10.0):
    """The server's metrics once its gauges say idle (calibration's settle): they are updated on the
    engine's next step, so a snapshot taken right after the last response can still count it as running."""
    await settle(c, timeout_s, poll_s=0.1)
    return await c.metrics()


def test_settle_returns_once_the_real_server_holds_no_request(server):
    """A calibration step starts on an empty server: settle, called once a burst has reached the engine,
    returns with the server's gauges at zero and the burst answered.  The gauges count only what the
    engine holds (on CI they read 0 a second after a burst was sent, its requests still in the API
    process), so the test waits for them to show the burst first.  Under that load this server answered
    a /metrics read only as the burst ended (12-15 s), so how long settle waited is not asserted: the
    waiting and a cut-short wait are in tests/actuators/test_client_http.py."""
    async def go():
        async with VLLMClient(server.url, name="it", timeout_s=120) as c:
            task = asyncio.create_task(_at_once(server.url, server.model, 32, 800))   # ~15 s of work
            while not task.done() and (m := await c.metrics()).running + m.waiting == 0:
                await asyncio.sleep(0.05)
            waited = await settle(c, 300.0, poll_s=0.2)
            codes = await asyncio.wait_for(task, 30.0)   # its answers were on their way
            return waited, codes, await c.metrics()

    waited, codes, after = run(go())
    assert waited.held == 0, waited
    assert codes == [200] * 32 and after.running == 0 and after.waiting == 0


def test_models_and_health(server):
    async def go():
        async with VLLMClient(server.url, name="it") as c:
            assert await c.health() is True
            info = await c.model_info()
            return info

    info = run(go())
    assert info.id == server.model
    assert info.max_model_len == 2048


def test_the_engine_has_its_core_and_the_rest_of_the_server_keeps_off_it(server):
    """The engine's OpenMP threads on the core ``one_core_env`` names; the API and scheduler processes on
    the others (``other_cores``), so a measurement's client and the server's own front end do not take
    turns on the engine's core."""
    import os

    import psutil

    from warmup.actuators.local import other_cores

    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("one core: nothing to keep off it")
    engine_core = int(server.env["VLLM_CPU_OMP_THREADS_BIND"])
    root = psutil.Process(server.pid)
    procs = [root, *root.children(recursive=True)]
    workers = [p for p in procs if p.name() == "VLLM::Worker"]
    assert workers, [p.name() for p in procs]
    for w in workers:   # its main thread is the OpenMP team's first, bound when the engine started
        assert os.sched_getaffinity(w.pid) == {engine_core}
    rest = [p for p in procs if p not in workers]
    assert rest and all(set(p.cpu_affinity()) == other_cores(0) for p in rest), \
        [(p.name(), p.cpu_affinity()) for p in rest]
    assert engine_core not in other_cores(0)


def test_warmup_requests_show_in_server_counters(server):
    dist = TokenDistribution.from_stats(prompt_mean=120, prompt_p95=300, output_mean=16)

    async def go():
        async with VLLMClient(server.url, name="it") as c:
            before = await c.metrics()
            res = await c.warmup(WarmupSpec(count=6, concurrency=2, duration_s=120), dist, seed=1)
            after = await c.metrics()
            return before, res, after

    before, res, after = run(go())
    assert (res.sent, res.completed, res.failed, res.aborted, res.stopped_by) == (6, 6, 0, 0, "done")
    assert after.counter("vllm:request_success_total") - before.counter("vllm:request_success_total") == 6
    assert after.counter("vllm:prompt_tokens_total") - before.counter("vllm:prompt_tokens_total") == res.prompt_tokens
    assert (after.counter("vllm:generation_tokens_total") - before.counter("vllm:generation_tokens_total")
            == res.completion_tokens)
    # Lengths were sampled, not constant: the prompts differ in size.
    assert res.prompt_tokens > 6 and len(res.latencies_s) == 6


async def _metrics_text(url: str) -> str:
    async with httpx.AsyncClient(timeout=60) as c:
        return (await c.get(f"{url}/metrics")).text


async def _at_once(url: str, model: str, n: int, tokens: int) -> list[int]:
    """``n`` completions of ``tokens`` generated tokens sent at once, not streamed: the API process
    then admits all of them at once (streaming two 500-token answers kept it so busy that it
    admitted the burst one by one, and only 5 to 10 of 32 ever waited in the engine's queue)."""
    async with httpx.AsyncClient(timeout=240, limits=httpx.Limits(max_connections=n)) as http:
        async def one(i: int) -> int:
            body = {"model": model, "prompt": [5 + i] * 32, "max_tokens": tokens, "ignore_eos": True}
            return (await http.post(f"{url}/v1/completions", json=body)).status_code
        return list(await asyncio.gather(*(one(i) for i in range(n))))


def test_queue_depth_rises_above_threshold_under_load_and_falls(server):
    # 32 requests of 500 generated tokens, sent at once, against --max-num-seqs 2: most must queue.
    async def go():
        async with VLLMClient(server.url, name="it") as c:
            before = await _metrics_text(server.url)
            t0 = time.monotonic()
            task = asyncio.create_task(_at_once(server.url, server.model, 32, 500))
            peak_running = 0.0
            while not task.done():
                peak_running = max(peak_running, (await c.metrics()).running)
                await asyncio.sleep(0.2)  # rendering /metrics costs the API server CPU: don't hammer it
            codes = await task
            elapsed = time.monotonic() - t0
            final = await until_idle(c)
            return codes, elapsed, peak_running, final, before, await _metrics_text(server.url)

    codes, elapsed, peak_running, final, before, after = run(go())
    assert codes == [200] * 32
    # The queue depth is read from the server's own record, not by sampling its gauge mid-load (under
    # load /metrics took 5-17 s to answer). All 32 arrive at once, so each request that waited longer
    # than ``bound`` in the engine's queue was there together with the others at ``bound`` seconds:
    # more than TIER_THRESHOLD of them is a queue depth above the tier's trigger at that moment.
    bound, waited = waited_longer_than(before, after, 0.5)
    assert waited > TIER_THRESHOLD, f"{waited} of 32 requests waited more than {bound} s; load took {elapsed:.1f} s"
    assert peak_running <= 2  # --max-num-seqs holds whenever the gauge was read
    assert final.waiting == 0 and final.running == 0  # and the queue is gone after the load


def _raw_bucket_quantile(before: str, after: str, metric: str, q: float) -> float:
    """Independent reference: regex the raw exposition text, diff, interpolate (no shared code)."""
    pat = re.compile(rf'^{re.escape(metric)}_bucket\{{[^}}]*le="([^"]+)"[^}}]*\}} (\S+)$', re.M)

    def buckets(text: str) -> dict[float, float]:
        out: dict[float, float] = {}
        for le, v in pat.findall(text):
            out[float(le)] = out.get(float(le), 0.0) + float(v)
        return out

    b0, b1 = buckets(before), buckets(after)
    les = sorted(b1)
    counts = [b1[le] - b0.get(le, 0.0) for le in les]
    total = counts[-1]
    rank = q * total
    prev_le, prev_c = 0.0, 0.0
    for le, c in zip(les, counts):
        if c >= rank:
            if np.isinf(le):
                return prev_le
            return prev_le + (le - prev_le) * (rank - prev_c) / (c - prev_c)
        prev_le, prev_c = le, c
    raise AssertionError("rank beyond the +Inf bucket")


def test_p99_ttft_matches_raw_buckets(server):
    async def go():
        async with VLLMClient(server.url, name="it") as c, httpx.AsyncClient() as http:
            raw0 = (await http.get(server.url + "/metrics")).text
            res = await c.warmup(WarmupSpec(count=20, concurrency=10, duration_s=120),
                                 TokenDistribution.from_stats(200, 600, 24), seed=3)
            raw1 = (await http.get(server.url + "/metrics")).text
            live = await c.metrics()  # idle now: same cumulative buckets as raw1
            return raw0, raw1, live, res

    raw0, raw1, live, res = run(go())
    assert res.completed == 20
    win = latency_window(parse_metrics(raw0, "it"), parse_metrics(raw1, "it"), qs=(0.5, 0.95, 0.99))
    assert win.requests == 20
    for q in (0.5, 0.95, 0.99):
        ref = _raw_bucket_quantile(raw0, raw1, "vllm:time_to_first_token_seconds", q)
        assert win.ttft[q] == pytest.approx(ref, rel=1e-9), q
        assert win.e2e[q] == pytest.approx(
            _raw_bucket_quantile(raw0, raw1, "vllm:e2e_request_latency_seconds", q), rel=1e-9)
    # The live client reads the same cumulative histogram as the raw text.
    assert live.ttft.quantile(0.99) == pytest.approx(
        _raw_bucket_quantile("", raw1, "vllm:time_to_first_token_seconds", 0.99), rel=1e-9)
    # A TTFT cannot exceed the slowest whole request the client timed (up to bucket resolution: bounds grow <= 2.5x).
    assert 0 < win.ttft[0.99] <= max(res.latencies_s) * 3


def test_unreachable_instance_gives_clear_error_and_fleet_keeps_going(server):
    dead_port = free_port(8600)

    async def go():
        good = VLLMClient(server.url, name="good")
        bad = VLLMClient(f"http://127.0.0.1:{dead_port}", name="dead-one", retries=2, backoff_s=0.05)
        try:
            with pytest.raises(InstanceUnavailable) as exc:
                await bad.metrics()
            fleet = await fleet_metrics([good, bad])
            warm = await fleet_warmup([good, bad], WarmupSpec(count=2, concurrency=1, duration_s=60),
                                      TokenDistribution.fixed(16, 4))
            return exc.value, fleet, warm
        finally:
            await good.aclose()
            await bad.aclose()

    err, fleet, warm = run(go())
    assert "dead-one" in str(err) and "ConnectError" in str(err) and "2 attempt" in str(err)
    assert fleet.answered == 1
    assert set(fleet.errors) == {"dead-one"} and "dead-one" in fleet.errors["dead-one"]
    by = {r.instance: r for r in warm}
    assert by["good"].ok and by["good"].value.completed == 2
    assert not by["dead-one"].ok and "dead-one" in by["dead-one"].error


def test_bad_request_is_permanent_error_naming_instance(server):
    async def go():
        async with VLLMClient(server.url, name="it", prompt_mode="text") as c:
            # Text prompt to a server without tokenizer: a 400, not retried.
            await c.complete(8, 4)

    with pytest.raises(InstanceError) as exc:
        run(go())
    assert not isinstance(exc.value, InstanceUnavailable)
    assert exc.value.status == 400 and "it" in str(exc.value) and "Tokenizer" in str(exc.value)


def test_abort_stops_warmup_and_server_drains(server):
    async def go():
        async with VLLMClient(server.url, name="it") as c:
            for _ in range(100):  # the module's server is shared: earlier tests' requests end first
                m = await c.metrics()
                if m.waiting == 0 and m.running == 0:
                    break
                await asyncio.sleep(0.1)
            finished_before = m.counter("vllm:request_success_total")
            abort = asyncio.Event()
            task = asyncio.create_task(c.warmup(WarmupSpec(count=None, concurrency=4, duration_s=120),
                                                TokenDistribution.fixed(32, 500), abort=abort, seed=4))
            await asyncio.sleep(1.5)
            t0 = time.monotonic()
            abort.set()
            res = await task
            stop_s = time.monotonic() - t0
            for _ in range(100):
                m = await c.metrics()
                if m.waiting == 0 and m.running == 0:
                    break
                await asyncio.sleep(0.1)
            return res, stop_s, m, m.counter("vllm:request_success_total") - finished_before

    res, stop_s, m, finished = run(go())
    assert res.stopped_by == "abort" and res.aborted >= 1 and stop_s < 5
    assert res.sent == res.completed + res.failed + res.aborted
    assert m.waiting == 0 and m.running == 0  # the server dropped the cancelled requests
    # What arrivals counting rests on (workers.steps.warmup_run.record_done): the server's finished
    # counter counts the completed warmups, and the cancelled ones only where the server finished them
    # before it saw the client go.  How many it finishes so is timing: 1 of 4 cancelled on one loaded
    # run (9 sent, 5 completed, 6 counted), all 3 of 3 on a run with the rest of the suite on the
    # other core (5 sent, 2 completed, 5 counted).  So the bound is ``completed <= counted <= sent``: what record_done
    # subtracts (completed) never exceeds what the server counted, and nothing is counted unsent.
    assert res.completed <= finished <= res.sent, (finished, res)


def test_reset_prefix_cache_really_drops_cached_prefixes(server):
    async def go():
        async with VLLMClient(server.url, name="it") as c:
            async def hits_after_same_prompt() -> float:
                before = (await c.metrics()).counter("vllm:prefix_cache_hits_total")
                await c.complete(96, 2, rng=np.random.default_rng(123))
                return (await c.metrics()).counter("vllm:prefix_cache_hits_total") - before

            await c.reset_prefix_cache()
            first = await hits_after_same_prompt()
            second = await hits_after_same_prompt()
            assert await c.reset_prefix_cache() is True
            third = await hits_after_same_prompt()
            return first, second, third

    first, second, third = run(go())
    assert first == 0 and second >= 64 and third == 0


def test_sleep_mode_probe(server):
    async def go():
        async with VLLMClient(server.url, name="it") as c:
            return await c.sleep_support()

    support = run(go())
    if HAS_GPU:
        assert support.available, support.reason
    else:
        assert not support.available and "--enable-sleep-mode" in support.reason


@pytest.mark.gpu
def test_sleep_and_wake(server):
    async def go():
        async with VLLMClient(server.url, name="it") as c:
            support = await c.sleep_support()
            if not support.available:
                with pytest.raises(SleepModeUnavailable):
                    await c.sleep(1)
                return support, None
            sleep_s = await c.sleep(1)
            assert await c.is_sleeping() is True
            wake_s = await c.wake_up()
            assert await c.is_sleeping() is False
            t0 = time.perf_counter()
            await c.complete(32, 8)
            return support, (sleep_s, wake_s, time.perf_counter() - t0)

    support, times = run(go())
    if times is None:
        pytest.skip(f"sleep mode unavailable: {support.reason}")
    print(f"sleep level 1: {times[0]:.3f}s, wake_up: {times[1]:.3f}s, first request after wake: {times[2]:.3f}s")


def test_engine_args_validated_by_vllms_own_parser():
    # One interpreter start for all cases (importing vLLM takes ~10 s here).
    argvs = [["--model", "m", *render_engine_args(a)] for a in (
        {"max-num-seqs": 4, "enforce-eager": True, "block-size": 32, "enable-prefix-caching": False},
        {"no-such-option": 1},
        {"max-num-seqs": "many"},
        {"max-num-seq": 4},  # argparse alone would take the prefix
    )]
    ok, unknown, bad_value, prefix = validate_many(argvs, python=VLLM_PY)
    assert not prefix.ok and "--max-num-seq " in prefix.error + " "
    assert ok.ok and ok.checked_by.startswith("vllm 0.32"), ok
    assert not unknown.ok and "--no-such-option" in unknown.error
    assert not bad_value.ok and "--max-num-seqs" in bad_value.error and "many" in bad_value.error
    with pytest.raises(EngineArgsError, match=r"profile night: .*--no-such-option"):
        validate_engine_args({"no-such-option": 1}, python=VLLM_PY, profile="night")


@NEEDS_PROMETHEUS
def test_prometheus_promql_matches_the_scrape(server, tmp_path):
    prom = Prometheus(tmp_path, static=[server.url])
    url = prom.url

    async def go():
        async with VLLMClient(server.url, name="it") as c, PrometheusSignals(url, 'job="vllm"', window="1m") as p:
            # rate() needs a scrape before the load: wait until the target is up.
            for _ in range(120):
                try:
                    if await p.query('up{job="vllm"}') == 1:
                        break
                except Exception:
                    pass
                await asyncio.sleep(0.5)
            await c.warmup(WarmupSpec(count=12, concurrency=6, duration_s=60), TokenDistribution.from_stats(100, 300, 16))
            direct = await until_idle(c)
            # Wait until Prometheus has scraped the idle server after the load.
            want = direct.counter("vllm:prompt_tokens_total")
            for _ in range(120):
                try:
                    got = await p.query('sum(vllm:prompt_tokens_total{job="vllm"})')
                    busy = await p.query('sum(vllm:num_requests_running{job="vllm"})'
                                         ' + sum(vllm:num_requests_waiting{job="vllm"})')
                    idle = busy == 0
                except Exception:
                    got, idle = None, False
                if got == want and idle:
                    break
                await asyncio.sleep(0.5)
            cumulative = PrometheusSignals(url, 'job="vllm"', window=None)
            try:
                cum_p99 = await cumulative.ttft_quantile(0.99)
            finally:
                await cumulative.aclose()
            sig = await p.signals()
            return direct, got, want, cum_p99, sig

    try:
        direct, got, want, cum_p99, sig = run(go())
        # The loop's two signal sources give the same document for the idle server.
        dep = Deployment(name="it", profiles={"day": {"capacity_rpm": 60}},
                         signals={"source": "prometheus", "prometheus_url": url, "selector": 'job="vllm"'})
        from_prom, _ = prometheus_live(dep, [server.url], None, warmed=set())
        from_scrape, _ = scrape_live(dep, [server.url], None, None, warmed=set())
    finally:
        prom.stop()
    keys = ("queue_depth", "running", "ready", "provisioned", "requests_total")
    assert {k: from_prom[k] for k in keys} == {k: from_scrape[k] for k in keys}
    assert from_prom["requests_total"] == direct.counter("vllm:request_success_total") > 0
    assert [(i["url"], i["state"]) for i in from_prom["instances"]] == [(server.url, "ready_idle")]
    assert from_prom["source"] == "prometheus" and from_scrape["source"] == "scrape"
    assert got == want, "Prometheus never saw the server's prompt-token counter"
    assert sig.waiting == 0 and sig.running == 0
    assert sig.kv_cache_usage is not None and 0 <= sig.kv_cache_usage <= 1
    # PromQL histogram_quantile over the same cumulative buckets = our quantile.
    assert cum_p99 == pytest.approx(direct.ttft.quantile(0.99), rel=1e-9)
    assert sig.ttft[0.99] is not None and sig.ttft[0.99] > 0  # rate() window over the recent load
    assert set(queries('job="vllm"')) >= {"waiting", "running", "kv_cache_usage", "ttft_p99"}


def test_core_warmup_decision_applied_to_named_instances(server):
    from warmup.actuators.vllm_client import apply_warmup_decision
    from warmup.core import Reason, ReasonCode, WarmupAction, WarmupDecision

    decision = WarmupDecision(action=WarmupAction.START, reason=Reason(next(iter(ReasonCode)), "queue above tier"),
                              tier="low", requests_per_instance=3, concurrency=2, duration_s=60.0,
                              instances=(server.url, "http://127.0.0.1:1/gone"))

    async def go():
        async with VLLMClient(server.url, name="it") as c:
            before = (await c.metrics()).counter("vllm:request_success_total")
            results = await apply_warmup_decision([c], decision, TokenDistribution.fixed(24, 4))
            after = (await c.metrics()).counter("vllm:request_success_total")
            return results, after - before

    results, done = run(go())
    by = {r.instance: r for r in results}
    assert by["it"].ok and by["it"].value.completed == 3 and done == 3
    assert not by["http://127.0.0.1:1/gone"].ok and "not among the known clients" in by["http://127.0.0.1:1/gone"].error
