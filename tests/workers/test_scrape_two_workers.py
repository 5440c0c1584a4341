"""Issues 42 and 44: a deployment scraped by two worker processes in turn counts each request once.

Each round counts an instance between two of its readings; the round before used to be kept in the
worker process's memory, so two workers (or two threads) scraping the same deployment in turn each
counted from their own last round and every interval between theirs was counted twice.  Here two
worker contexts (each its own process memory) scrape one instance in turn, through the live scrape
over HTTP (an endpoint answering vLLM's /metrics text, its counters set by the test: a real vLLM's
would move between the reads being compared), and the arrivals stored sum to exactly what the
instance finished and queued.  A round counted from a carry another round has replaced since is
dropped whole, and the next round counts its interval: nothing lost, nothing twice."""
from __future__ import annotations

from vllmmetrics import serve_metrics
from warmcast.config.settings import load_settings
from workers import counting
from workers.context import Ctx
from workers.options import WorkerOptions
from workers.steps import signals

DEPLOYMENTS = """
deployments:
  - name: two
    instances: [{url}]
    scaler: {{kind: dryrun}}
    signals: {{source: scrape}}
    profiles: {{day: {{capacity_rpm: 60}}}}
"""


class Instance:
    """vLLM's /metrics text with the finished counter and the waiting gauge the test sets."""

    def __init__(self) -> None:
        self.finished, self.waiting = 0.0, 0.0
        self.srv, self.url = serve_metrics(self.text)

    def text(self) -> str:
        lab = 'model_name="dummy"'
        return ("# TYPE vllm:num_requests_waiting gauge\n"
                f"vllm:num_requests_waiting{{{lab}}} {self.waiting}\n"
                "# TYPE vllm:num_requests_running gauge\n"
                f"vllm:num_requests_running{{{lab}}} 0.0\n"
                "# TYPE vllm:request_success_total counter\n"
                f'vllm:request_success_total{{{lab},finished_reason="stop"}} {self.finished}\n')


def _counted(ctx: Ctx) -> float:
    return sum(float(v) for v in ctx.r.hgetall(f"{ctx.prefix}:arrivals:two").values())


def test_two_workers_scraping_in_turn_count_each_request_once(tmp_path, redis_client, key_prefix, redis_server_url):
    inst = Instance()
    try:
        deps = tmp_path / "deployments.yaml"
        deps.write_text(DEPLOYMENTS.format(url=inst.url))
        settings = load_settings(redis_url=redis_server_url, key_prefix=key_prefix, deployments_file=deps,
                                 state_dir=tmp_path / "state")
        a, b = (Ctx(settings, WorkerOptions(), redis_client) for _ in range(2))   # two processes' memories
        signals.step(a, "two")   # the first round ever: the baseline
        arrived = 0.0
        for k in range(8):
            inst.finished += 10.0 + k          # served since the round before
            inst.waiting = float(k % 3)        # and what waits now
            arrived = inst.finished + inst.waiting
            signals.step(b if k % 2 == 0 else a, "two")
        assert _counted(a) == arrived == 8 * 10 + sum(range(8)) + 7 % 3

        # a round that counted from a carry another round has replaced since is dropped whole
        token, prev = counting.load_carry(a, "two")
        inst.finished += 5.0
        signals.step(b, "two")                 # recorded: it claims the current carry
        stale = {"by_minute": {"1": 99.0}, "minute": 1, "expected": 1, "missed": 0, "held_since": None}
        assert not counting.record_round(a, "two", stale, claim=(token, {**prev, "ts": prev["ts"] + 1}))
        assert _counted(a) == arrived + 5.0
    finally:
        inst.srv.shutdown()
