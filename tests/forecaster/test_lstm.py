"""LSTM specifics: batching, seeds, tokens, non-crossing quantiles, NaN handling."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from forecaster.base import DAY
from forecaster.lstm import LSTMConfig, LSTMForecaster
from forecaster.lstm.features import build_features, n_static
from forecaster.lstm.network import make_net, pinball_loss

from fc_synth import synth_frame

FRAME = synth_frame(3, seed=7, tokens=True, gap=(2000, 2100))


@pytest.fixture(scope="module")
def model():
    return LSTMForecaster(LSTMConfig.tiny(), progress=False).fit(FRAME.iloc[: int(2.5 * DAY)])


def test_same_seed_same_model_bit_for_bit():
    """Same data, seed and configuration: the same weights exactly, whatever torch's thread
    setting was before fit (fit fixes its own) -- and no time budget unless one is set."""
    torch.set_num_threads(1)
    a = LSTMForecaster(LSTMConfig.tiny(threads=2), progress=False).fit(FRAME.iloc[:DAY + 600])
    torch.set_num_threads(2)
    b = LSTMForecaster(LSTMConfig.tiny(threads=2), progress=False).fit(FRAME.iloc[:DAY + 600])
    ta, tb = a.to_artifact()[0], b.to_artifact()[0]
    assert ta.keys() == tb.keys()
    assert all(torch.equal(ta[k], tb[k]) for k in ta), "weights differ between two identical fits"
    assert a.scale == b.scale
    np.testing.assert_array_equal(a.predict(FRAME).mean, b.predict(FRAME).mean)
    assert "time_budget" not in a.meta


def test_members_side_by_side_give_the_weights_they_give_in_turn(monkeypatch):
    """Two members trained in forked processes (one torch thread each) and the same two trained
    one after another: the same weights bit for bit, and the same early-stopping record."""
    from forecaster.lstm import members, model as lstm_model

    cfg = LSTMConfig.tiny(members=2, threads=1, epochs=4, min_epochs=2)   # forked even if pytest has threads
    fits = {}
    for parallel in (True, False):
        monkeypatch.setattr(lstm_model, "train_members",
                            lambda *a, p=parallel, **kw: members.train_members(*a, parallel=p, **kw))
        fits[parallel] = LSTMForecaster(cfg, progress=False).fit(FRAME.iloc[:DAY + 600])
    ta, tb = fits[True].to_artifact()[0], fits[False].to_artifact()[0]
    assert ta.keys() == tb.keys() and all(torch.equal(ta[k], tb[k]) for k in ta)
    assert fits[True].meta["members"] == fits[False].meta["members"] and fits[True].scale == fits[False].scale


def test_members_go_side_by_side_only_where_their_threads_fit_the_cores(monkeypatch):
    from forecaster.lstm import members

    seen = []
    monkeypatch.setattr(members, "_forked", lambda *a: seen.append("forked") or [])
    monkeypatch.setattr(members, "_one", lambda m, *a: seen.append(m))
    monkeypatch.setattr(members.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(members, "can_fork", lambda: True)   # the suite's process may hold threads
    members.train_members(None, None, None, LSTMConfig(members=2, threads=2), None, None)
    members.train_members(None, None, None, LSTMConfig(members=2, threads=1), None, None)
    assert seen == [0, 1, "forked"]


def test_a_time_budget_that_fires_is_recorded():
    m = LSTMForecaster(LSTMConfig.tiny(time_budget_s=0.0, epochs=5), progress=False).fit(FRAME.iloc[:DAY + 600])
    assert m.meta["time_budget"]["budget_s"] == 0.0
    assert "member 0 early-stopping run" in m.meta["time_budget"]["fired"]
    assert m.to_artifact()[1]["training"]["time_budget"]["fired"]


def test_heads_for_every_provisioning_level_and_no_other(model):
    """P95 and P99 come from heads trained for them (pinball loss), not extrapolated; a level
    between two heads is interpolated (a simulator's sweep), one outside them is refused."""
    from warmcast.forecast import DEFAULT_QUANTILES

    assert model.levels == (0.1, 0.5, 0.9, 0.95, 0.99) == DEFAULT_QUANTILES
    assert make_net(model.cfg).head[-1].out_features == model.cfg.horizon * 5
    f = model.predict(FRAME)
    assert set(f.quantiles) == set(DEFAULT_QUANTILES)
    assert (f.quantiles[0.99] >= f.quantiles[0.95]).all() and (f.quantiles[0.95] >= f.quantiles[0.9]).all()
    assert set(model.meta["val_metrics"]) >= {"coverage_p95", "coverage_p99"}
    g = model.predict(FRAME, quantiles=(0.5, 0.97))
    assert (f.quantiles[0.95] <= g.quantiles[0.97]).all() and (g.quantiles[0.97] <= f.quantiles[0.99]).all()
    with pytest.raises(ValueError, match="cannot produce"):
        model.predict(FRAME, quantiles=(0.5, 0.995))


def test_the_mean_is_estimated_from_the_quantiles_not_the_p50(model):
    """Issue 32: the LSTM's mean was its P50 head, so ``warmcast forecast`` showed a mean always
    equal to the P50; it is the trapezoid estimate over the trained heads, whatever levels were asked."""
    from warmcast.forecast import mean_from_quantiles

    f = model.predict(FRAME)
    levels = sorted(f.quantiles)
    np.testing.assert_allclose(f.mean, mean_from_quantiles(levels, np.stack([f.quantiles[q] for q in levels], -1)))
    assert not np.allclose(f.mean, f.quantiles[0.5])
    assert (f.quantiles[0.1] <= f.mean).all() and (f.mean <= f.quantiles[0.99]).all()
    np.testing.assert_allclose(model.predict(FRAME, quantiles=(0.5, 0.97)).mean, f.mean, rtol=1e-6)


def test_predict_many_matches_predict(model):
    hs = {"a": FRAME, "b": FRAME.iloc[:-77] * 3.0, "c": synth_frame(2, seed=1, level=5000),
          "empty": FRAME.iloc[:0], "a minute missing": FRAME.drop(FRAME.index[-10]),  # read by pandas
          "a series": FRAME["requests"].iloc[:-5]}
    many = model.predict_many(hs)
    # the empty history is left out for the caller to fall back
    assert set(many) == {"a", "b", "c", "a minute missing", "a series"}
    for k in ("a", "b", "c", "a minute missing", "a series"):
        one = model.predict(hs[k])
        np.testing.assert_allclose(many[k].mean, one.mean, rtol=1e-5)
        np.testing.assert_allclose(many[k].quantiles[0.9], one.quantiles[0.9], rtol=1e-5)
        assert many[k].origin == hs[k].index[-1] + pd.Timedelta(minutes=1)


def test_the_numpy_read_of_a_regular_history_equals_the_general_one(model):
    """predict and predict_many read a history already on the minute grid with numpy alone (issue 32:
    pandas' general path was most of a 1,000-deployment call); it must give what the general path
    gives, bit for bit, and leave every other shape to it."""
    from forecaster.lstm.features import lookback
    from forecaster.lstm.tails import regular_counts

    def _regular_tail(h, need, step):  # the numpy read, logged as predict logs it
        got = regular_counts(h, need, step)
        return got and (np.log1p(got[0]), None if got[1] is None else np.log1p(got[1]), got[2])

    need = lookback(model.cfg)
    covered = FRAME.assign(coverage=np.where(np.arange(len(FRAME)) % 97 == 0, 0.5, 1.0))
    covered.iloc[5:9, covered.columns.get_loc("input_tokens")] = np.nan
    cases = {"tokens and a gap": FRAME, "coverage, NaN tokens": covered, "short": FRAME.iloc[-500:],
             "a series": FRAME["requests"], "no tokens": FRAME[["requests"]] * 3,
             "no frequency set": FRAME.set_axis(pd.DatetimeIndex(list(FRAME.index)))}
    for name, h in cases.items():
        fast, general = _regular_tail(h, need, 1), model._tail(h, need)
        assert fast is not None, name
        np.testing.assert_array_equal(fast[0], general[0], err_msg=name)
        assert (fast[1] is None) == (general[1] is None), name
        if fast[1] is not None:
            np.testing.assert_array_equal(fast[1], general[1], err_msg=name)
        assert fast[2] == general[2], name
    irregular = FRAME.drop(FRAME.index[-10])
    assert _regular_tail(irregular, need, 1) is None  # a missing minute: the general path fills it
    assert _regular_tail(FRAME.iloc[::5], need, 1) is None  # 5-minute bins for a per-minute model
    assert _regular_tail(FRAME.assign(model="llama"), need, 1) is None  # a column that is not a number
    np.testing.assert_array_equal(model.predict(FRAME.assign(model="llama")).mean, model.predict(FRAME).mean)
    with pytest.raises(ValueError, match="5-minute bins"):
        model.predict(FRAME["requests"].resample("5min").sum())


def test_window_means_count_only_observed_values():
    """A window's count is its width less the missing positions in it (no prefix sum of the mask):
    the same means as numpy's nanmean over each window, with or without anything missing."""
    from forecaster.lstm.features import _Sums

    v = np.random.default_rng(3).normal(size=5000)
    v[::13] = np.nan
    v[100:160] = np.nan
    lo = np.array([0, 5, 90, 100, 120, 4990, 3000])
    hi = np.array([50, 6, 170, 160, 130, 5000, 3000])
    for series in (v, np.nan_to_num(v)):
        got = _Sums(series).mean(lo, hi)
        with np.errstate(invalid="ignore"), pytest.warns(RuntimeWarning):
            want = np.array([np.nanmean(series[a:b]) for a, b in zip(lo, hi)])
        np.testing.assert_allclose(got, want, rtol=1e-12)
        assert np.isnan(got[[4, 6]]).all() if series is v else np.isnan(got[6])


def test_per_series_scaling(model):
    """One global model: a series scaled by 10x gets (about) a 10x forecast."""
    f1 = model.predict(FRAME[["requests"]])
    f10 = model.predict(FRAME[["requests"]] * 10)
    ratio = f10.mean / f1.mean
    assert np.all((ratio > 8) & (ratio < 12))


def test_tokens_are_used_when_present(model):
    assert model.meta["has_tokens"]
    seq, _, _ = build_features(np.log1p(FRAME.requests.to_numpy()), np.log1p(FRAME.input_tokens.to_numpy()),
                               np.array([len(FRAME)]), pd.DatetimeIndex([FRAME.index[-1]]), model.cfg)
    assert seq[0, :, 5].all()
    f = model.predict(FRAME[["requests"]])  # and it still answers without them
    assert np.isfinite(f.mean).all()


def test_quantiles_never_cross_by_construction():
    cfg = LSTMConfig.tiny(levels=(0.05, 0.1, 0.5, 0.9, 0.95))
    torch.manual_seed(0)
    net = make_net(cfg)
    for p in net.parameters():
        torch.nn.init.normal_(p, std=3.0)  # wild weights
    out = net(torch.randn(64, cfg.window, 8), torch.randn(64, n_static(cfg.horizon)))
    assert (out.diff(dim=-1) >= 0).all()


def test_pinball_skips_nan_targets():
    pred = torch.zeros(2, 3, 3)
    t = torch.tensor([[1.0, float("nan"), 1.0], [float("nan")] * 3])
    loss = pinball_loss(pred, t, (0.1, 0.5, 0.9))
    assert torch.isfinite(loss) and loss > 0


def test_outage_gap_history(model):
    """A history ending inside an outage still answers (ffill-free masking of inputs)."""
    h = FRAME.iloc[:2050]  # ends 50 minutes into the gap
    f = model.predict(h)
    assert np.isfinite(f.mean).all()
    with pytest.raises(ValueError):
        model.predict(FRAME.iloc[:0])


def test_horizon_guard(model):
    with pytest.raises(ValueError):
        model.predict(FRAME, horizon=31)


def test_no_level_above_ten_times_the_weeks_peak(model):
    """ServeGen m-mid (a million requests per 10 min, zero runs of hours: outage gaps) trained heads
    whose P99, exponentiated, read up to 1e22 requests (bench/forecast_accuracy.py, 2026-12-05).
    Spreads blown up here by hand: every answer stays within CEILING times the lookback's peak."""
    import copy

    from forecaster.lstm.model import CEILING

    wild = copy.copy(model)
    wild.scale = {q: [60.0] * model.cfg.horizon for q in model.scale}  # log-space distances x60
    hist = FRAME.iloc[: 2 * DAY]
    peak = float(hist["requests"].max())
    one = wild.predict(hist)
    many = wild.predict_many({"a": hist, "b": hist * 3})
    at = wild.predict_origins(FRAME.iloc[: 2 * DAY + 120], [hist.index[-1] + pd.Timedelta(minutes=1)])
    for fc, top in ((one, peak), (many["a"], peak), (many["b"], 3 * peak), (at[0], peak)):
        assert fc.quantiles[0.99].max() <= CEILING * top + 1e-6 and fc.mean.max() <= CEILING * top + 1e-6
        assert fc.quantiles[0.99].max() >= 0.99 * CEILING * top  # the bound binds: the blow-up was there
    assert model.predict(hist).quantiles[0.99].max() < 2 * peak  # a sane model never comes near it


def _with(frame, rows: slice, value: float):
    out = frame.copy()
    out.iloc[rows, out.columns.get_loc("requests")] = value
    return out


def test_a_zero_that_cannot_be_load_is_read_as_missing(model):
    """ServeGen m-mid's outage-like zero runs (hours of 0 between a million requests per bin) are
    gaps, as NASA's blanks are: training and every forecasting path read them as missing, while a
    low-volume series' zeros stay load."""
    busy = FRAME.iloc[: 2 * DAY]  # 71..354 requests a minute: never a real zero
    gone, blank = _with(busy, slice(-300, -200), 0.0), _with(busy, slice(-300, -200), np.nan)
    for a, b in ((model.predict(gone), model.predict(blank)),  # the numpy read of a regular history
                 (model.predict(gone.assign(note="x")), model.predict(blank)),  # the pandas read
                 (model.predict_many({"x": gone})["x"], model.predict(blank))):
        for q in a.quantiles:
            np.testing.assert_array_equal(a.quantiles[q], b.quantiles[q])
    fit = [LSTMForecaster(LSTMConfig.tiny(), progress=False).fit(f).predict(busy) for f in (gone, blank)]
    np.testing.assert_array_equal(fit[0].quantiles[0.99], fit[1].quantiles[0.99])  # trained the same too
    quiet = busy.assign(requests=np.floor(busy["requests"] / 60.0))  # 1..5 a minute: a zero is load
    low_zero, low_blank = _with(quiet, slice(-30, None), 0.0), _with(quiet, slice(-30, -1), np.nan)
    assert not np.array_equal(model.predict(low_zero).quantiles[0.5], model.predict(low_blank).quantiles[0.5])


def test_the_step_an_outage_ends_in_and_a_trickle_while_down_are_missing_too():
    """In a series whose zeros cannot be load, a step below 1% of its median is part of the outage
    (ServeGen: 5,000-9,000 requests in the step after each zero run, a median of 1.17 M); without a
    zero, or in a low-volume series, low steps stay load."""
    from forecaster.lstm.features import outage_zeros

    y = np.full(100, 1.3e6)
    y[40:45], y[45], y[60:63] = 0.0, 8e3, 3e3      # a zero run, its partial last step, a trickle
    out = outage_zeros(y)
    assert np.isnan(out[40:46]).all() and np.isnan(out[60:63]).all()
    assert np.isfinite(out[:40]).all() and np.isfinite(out[46:60]).all() and np.isfinite(out[63:]).all()
    no_zero = np.where(y == 0, 1.2e6, y)             # nothing proves an outage: a low step is load
    np.testing.assert_array_equal(outage_zeros(no_zero), no_zero)
    quiet = np.tile([0.0, 1.0, 3.0, 250.0], 25)     # zeros that can be load: nothing is missing
    np.testing.assert_array_equal(outage_zeros(quiet), quiet)


def test_the_outage_rule_reads_nothing_at_or_after_the_first_origin(model):
    """Issue 42: the rule's median and 1% quantile were taken over the whole history handed to
    ``predict_origins``, test window included.  A busy history with an outage (zeros that cannot be
    load: missing) followed, after the origins, by hours at 1-5 requests a minute (which would make
    those zeros load, when read) forecasts its origins exactly as the history cut at the last origin."""
    from forecaster.lstm.features import outage_zeros

    busy = _with(FRAME.iloc[: 2 * DAY], slice(-200, -150), 0.0)   # 71..354 a minute, an outage
    origins = busy.index[-100:-90]
    later = FRAME.iloc[2 * DAY: 2 * DAY + 600]
    later = later.assign(requests=np.floor(later["requests"] / 60.0))
    full = pd.concat([busy, later])
    y = full["requests"].to_numpy(dtype=float)
    assert not np.isnan(outage_zeros(y)[len(busy) - 200]), "read whole, the quiet hours make the zeros load"
    a = model.predict_origins(full, origins, horizon=30)
    b = model.predict_origins(full.loc[: origins[-1]].iloc[:-1], origins, horizon=30)   # cut at the last origin
    for fa, fb in zip(a, b):
        for q in fa.quantiles:
            np.testing.assert_array_equal(fa.quantiles[q], fb.quantiles[q])
