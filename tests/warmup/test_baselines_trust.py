"""Issue 46 item 7: baselines a reader can trust.

- The HPA (and KEDA, which hands its metric to an HPA) seeds its scale-down window with the replica
  count it starts from (Kubernetes' ``recordInitialRecommendation``): the queue baseline dropped every
  fleet to one replica at its very first minute, whatever the trace.
- The oracle obeys the same ``max_replicas`` as every other policy (it read "0.960x oracle" because
  the oracle held more replicas than the fleet may).
- ``static`` sized on the test part's peak is hindsight: labelled so in the table, the picture and the
  report, and given no SLO verdict.
"""
from __future__ import annotations

import json

import numpy as np
import pandas as pd

from wu_helpers import synthetic_minutes
from warmup.core.hpa import HPAState, follow
from warmup.sim import FleetBacktestConfig, from_series, run_backtest, write_outputs
from warmup.sim.autoscalers import QueueKEDA, ReactiveHPA
from warmup.sim.backtest import make_split, run_policy
from warmup.sim.fleet import Observation
from warmup.sim.fleet import policy_label
from warmup.sim.report import format_table

START = pd.Timestamp("2024-01-03")


def _obs(t: int, rpm: float, prov: int, queue: float = 0.0) -> Observation:
    return Observation(t, rpm, queue, prov, 0, 0.0)


def test_the_scale_down_window_starts_with_the_count_the_autoscaler_starts_from() -> None:
    k = QueueKEDA(capacity_rpm=60.0, target_waiting=5, stabilisation_min=3)
    # nothing waits from the start: the 12 it started with count as minute 0's recommendation, held
    # through the 3-minute window; then down to min_replicas (a queue-only trigger asks for none)
    assert [k.decide(_obs(t, 600.0, 12)) for t in range(4)] == [12, 12, 12, 1]
    hpa = ReactiveHPA(capacity_rpm=60.0, target_utilisation=0.5, stabilisation_min=3)
    assert [hpa.decide(_obs(t, 0.0, 10)) for t in range(4)] == [10, 10, 10, 1]
    # the decision core's followed HPA (the reactive guard) starts the same way
    st = follow(HPAState(), 10, 0.0, 30.0, 3, 1, 100)
    assert st.replicas == 10 and st.recent == (10,)


def _cfg(**kw) -> FleetBacktestConfig:
    base = dict(capacity_rpm=300.0, cold_start_min=15, test_start=START, forecaster="sim_seasonal_profile",
                policies=("static", "queue", "oracle"))
    base.update(kw)
    return FleetBacktestConfig(**base)


def test_the_oracle_and_static_obey_max_replicas() -> None:
    log = from_series(synthetic_minutes(days=4, mean=1500.0, seed=1), source="synthetic")
    split = make_split(log, START)
    assert split.demand.max() / 300.0 > 4   # the peak needs more than 4 replicas
    cfg = _cfg(max_replicas=4)
    for name in ("oracle", "static"):
        run = run_policy(name, split, cfg)
        assert run.provisioned.max() <= 4, (name, run.provisioned.max())


def test_static_sized_in_hindsight_is_labelled_so_everywhere_and_given_no_verdict(tmp_path) -> None:
    from warmcast.config.slo import SLO

    log = from_series(synthetic_minutes(days=4, mean=1500.0, seed=1), source="synthetic")
    result = run_backtest(log, _cfg(slo=SLO(late_share=0.5)))
    row = result.rows["static"]
    assert row["hindsight"] is True and "slo_on_test" not in row
    assert result.rows["queue"]["slo_on_test"] in ("met", "missed")   # the others keep theirs
    table = format_table(result.rows)
    line = next(x for x in table.splitlines() if x.startswith("static"))
    assert line.startswith("static (hindsight)") and "met" not in line
    write_outputs(result, tmp_path, plot=False)
    rep = json.loads((tmp_path / "report.json").read_text())
    assert rep["policies"]["static"]["hindsight"] is True
    assert "static" not in rep["meta"]["slo"]["on_test"]
    assert policy_label("static", row) == "static (hindsight)" and policy_label("queue", result.rows["queue"]) == "queue"


def test_a_static_fleet_of_a_given_size_is_no_hindsight() -> None:
    log = from_series(synthetic_minutes(days=4, mean=1500.0, seed=1), source="synthetic")
    result = run_backtest(log, _cfg(static_replicas=9, policies=("static", "oracle")))
    assert "hindsight" not in result.rows["static"]
    assert np.all(result.runs["static"].provisioned == 9)
