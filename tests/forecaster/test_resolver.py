"""One model resolver for the CLI, the API and the workers; state outside the checkout."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import pandas as pd

from forecaster.base import DAY

from warmcast.forecast import Forecast
from forecaster.live import forecast_deployment
from forecaster.lstm import LSTMConfig, LSTMForecaster
from forecaster.registry import SHIPPED_DIR, Registry
from forecaster.resolver import judge, resolve, resolve_forecaster

from fc_synth import synth_frame

FRAME = synth_frame(2, seed=4)  # two days: enough to judge a pretrained model on the last 6 h


class Scaled:
    """A pretrained model for the judge: the true next minutes times ``factor``.  With 1.0 it
    must beat every baseline, with 5.0 it must lose to them (the test builds both on purpose)."""

    name = "scaled"
    version = "test/v1"
    levels = None

    def __init__(self, truth: pd.Series, factor: float) -> None:
        self.truth, self.factor = truth, factor

    def predict(self, history, horizon=30, quantiles=(0.1, 0.5, 0.9)):
        origin = history.index[-1] + pd.Timedelta(minutes=1)
        v = self.truth.reindex(pd.date_range(origin, periods=horizon, freq="min")).to_numpy() * self.factor
        v = np.nan_to_num(v)
        return Forecast(origin, v, {float(q): v * (0.8 + 0.4 * q) for q in quantiles}, self.name, self.version)

    def predict_origins(self, history, origins, horizon=30, quantiles=(0.1, 0.5, 0.9)):
        return [self.predict(history.loc[history.index < o], horizon, quantiles) for o in origins]


def test_the_shipped_model_is_judged_on_the_deployments_recent_data():
    good, why_good = judge(Scaled(FRAME["requests"], 1.0), FRAME)
    bad, why_bad = judge(Scaled(FRAME["requests"], 5.0), FRAME)
    assert good and "beats the baselines" in why_good and "persistence" in why_good
    assert not bad and "does not beat" in why_bad
    short, why_short = judge(Scaled(FRAME["requests"], 1.0), FRAME.iloc[:DAY])
    assert not short and "too little history" in why_short


def test_resolution_says_why_and_every_forecast_carries_it(tmp_path):
    reg = Registry(tmp_path)
    r = resolve(reg, "newdep", FRAME, shipped=Scaled(FRAME["requests"], 1.0))
    assert r.source == "shipped" and "no trained model for 'newdep'" in r.why and "beats" in r.why
    r = resolve(reg, "newdep", FRAME, shipped=Scaled(FRAME["requests"], 5.0))
    assert r.source == "baselines" and r.model is None and "does not beat" in r.why
    fb, r = resolve_forecaster(reg, "newdep", FRAME, shipped=Scaled(FRAME["requests"], 5.0))
    f = fb.predict(FRAME)
    assert f.model in ("seasonal_naive_day", "persistence") and r.why in f.note


def test_a_champion_answers_first_and_cli_and_resolver_agree(tmp_path):
    reg = Registry(tmp_path)
    model = LSTMForecaster(LSTMConfig.tiny(), progress=False).fit(FRAME)
    v = reg.save("chat", model)
    reg.set_champion("chat", v)
    fb, r = resolve_forecaster(reg, "chat", FRAME)
    assert r.source == "champion" and r.why == f"champion chat/{v}"
    cli = forecast_deployment(FRAME, reg, "chat")  # what `warmcast forecast` prints
    direct = fb.predict(FRAME)
    assert cli.model == direct.model == "lstm" and cli.note == direct.note == r.why
    np.testing.assert_array_equal(cli.mean, direct.mean)


def test_state_lives_under_the_state_dir_not_the_checkout(tmp_path, monkeypatch):
    from warmcast.config.settings import load_settings

    monkeypatch.delenv("WARMCAST_MODELS_DIR", raising=False)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    s = load_settings()
    checkout = Path(__file__).resolve().parents[2]
    assert s.models_dir == s.state_dir / "models"
    assert checkout not in s.models_dir.parents
    assert (SHIPPED_DIR / "default").is_dir(), "the shipped model is package data"


def test_a_verdict_cached_for_a_gone_model_is_not_given_to_a_new_one_at_its_address():
    """The verdict cache is keyed by the model's id(), which Python reuses once an object is gone: a
    suite run served a shipped model judged worse than the baselines because a better one judged
    earlier had lived at the same address.  The stale entry is planted here at the new model's key."""
    from forecaster import resolver

    bad = Scaled(FRAME["requests"], 5.0)
    window_end = resolver.judge_window(FRAME, "newdep").index[-1]
    key = ("newdep", id(bad), bad.version, window_end)
    resolver._verdicts[key] = (Scaled(FRAME["requests"], 1.0), (True, "stale verdict of another model"))
    try:
        wins, why = resolver._judged("newdep", bad, FRAME)
    finally:
        resolver._verdicts.pop(key, None)
    assert not wins and "does not beat" in why


def test_a_verdict_is_judged_once_per_hour_for_every_process_that_shares_it(redis_client, key_prefix, tmp_path):
    """Issue 44: each worker process judged every deployment itself, once an hour, about a quarter
    of a CPU-second each.  With shared verdicts the first process writes its verdict and the next
    (here: this process with its own cache emptied) reads it; unreadable entries are judged again."""
    from forecaster import resolver
    from forecaster.verdicts import SharedVerdicts

    shared = SharedVerdicts(redis_client, key_prefix)
    good = Scaled(FRAME["requests"], 1.0)
    end = resolver.judge_window(FRAME, "dep").index[-1]
    named = f"the shipped default model|{good.version}|{end}"
    resolver._verdicts.clear()
    wins, why = resolver._judged("dep", good, FRAME, shared=shared)
    assert wins and shared.get("dep", named) == (True, why)
    assert 0 < redis_client.ttl(f"{key_prefix}:verdicts:dep") <= (resolver.JUDGE_EVERY_H + 1) * 3600
    # another process: its own cache empty, the verdict planted as the first process wrote it
    resolver._verdicts.clear()
    shared.put("dep", named, (True, "judged by the other process"))
    assert resolver._judged("dep", good, FRAME, shared=shared) == (True, "judged by the other process")
    resolver._verdicts.clear()
    r = resolve(Registry(tmp_path), "dep", FRAME, shipped=good, shared=shared)
    assert r.source == "shipped" and "judged by the other process" in r.why
    # what this code did not write is judged again, and overwritten
    resolver._verdicts.clear()
    redis_client.hset(f"{key_prefix}:verdicts:dep", named, "not json")
    wins, why = resolver._judged("dep", good, FRAME, shared=shared)
    assert wins and "beats the baselines" in why and shared.get("dep", named) == (True, why)
    resolver._verdicts.clear()


@pytest.mark.parametrize("which", ["judge", "fit"])
def test_a_deployments_window_moves_once_a_period_at_a_minute_of_its_own(which):
    """Issue 44: every deployment judged its pretrained model and refitted its fallback at the top of
    the hour, all at once; at thousands of deployments the judgements alone took most of a core.  A
    deployment's judge window now moves every JUDGE_EVERY_H hours, its fit window every hour, each at
    a minute of the deployment's own ("" keeps the top of the hour)."""
    from forecaster.resolver import JUDGE_EVERY_H, fit_window, judge_window

    window, hours = (judge_window, JUDGE_EVERY_H) if which == "judge" else (fit_window, 1)
    ends = {}
    for name in ("a", "b", "chat-eu", "chat-us", ""):
        cuts = range(DAY + 60, len(FRAME), 7)
        seen = [window(FRAME.iloc[:n], name).index[-1] for n in cuts]
        assert all(t < FRAME.index[n - 1] + pd.Timedelta(minutes=1) for t, n in zip(seen, cuts))   # the past only
        moves = [t for prev, t in zip(seen, seen[1:]) if t != prev]
        gaps = {b - a for a, b in zip(moves, moves[1:])}
        assert gaps == {pd.Timedelta(hours=hours)}, (name, gaps)
        ends[name] = (moves[0] + pd.Timedelta(minutes=1)).minute + 60 * (moves[0].hour % hours)
    assert ends[""] % 60 == 0   # no name: on the hour, as before
    assert len(set(ends.values())) == len(ends), ends   # five deployments, five minutes of the period
