"""The fleet model live (issue 43): client series stored under their deployment within a bound, the
fleet model trained once over every deployment and its clients and judged per deployment, and the
one resolver serving its reconciled forecast where it won (and saying why where it did not)."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from forecaster.base import DAY
from forecaster.baselines import Persistence, SeasonalNaive
from forecaster.global_lstm import GlobalLSTM, tiny_fleet_config
from forecaster.global_lstm.artifacts import FLEET, fleet_registry
from forecaster.global_lstm.live import FleetSeries, fleet_data, train_fleet
from forecaster.live import forecast_deployment, serving_clients, serving_history
from forecaster.registry import ArtifactError, Registry
from forecaster.resolver import resolve
from warmcast.clients import OTHER, ClientStore, bound_clients, ingest_rows, label_for, shares_text
from warmcast.errors import InputError
from warmcast.resolution import with_resolution

from fc_panel import long_frame, noisy_panel, synth_panel


def _make(horizon_min: int) -> GlobalLSTM:
    return GlobalLSTM(tiny_fleet_config(epochs=6, threads=1), horizon_min=horizon_min)


def _quick() -> list:
    return [Persistence(), SeasonalNaive(DAY)]


def _long(panel) -> pd.DataFrame:
    """The panel as ``warmcast ingest --series-col client`` reads a count file with a model column."""
    f = long_frame(panel)
    return pd.DataFrame({"series": f["model"] + "/" + f["client"], "time": f["time"], "requests": f["requests"],
                         "group": f["model"]})


def _ingest(store, panel) -> None:
    for dep in dict.fromkeys(panel.groups):
        ingest_rows(store, dep, _long(panel), True, None, bound=50)


@pytest.fixture(scope="module")
def panel():
    return synth_panel(days=8, seed=3)


def test_the_bound_keeps_stored_clients_then_the_busiest_new_ones():
    vols = {"a": 5.0, "b": 50.0, "c": 20.0, "d": 1.0}
    first = bound_clients(vols, set(), bound=3)
    assert first.keep == ("b", "c") and set(first.summed) == {"a", "d"}
    # a later, busier newcomer does not cut a stored client's history in two
    later = bound_clients({"b": 1.0, "c": 1.0, "z": 1e6}, {"b", "c"}, bound=3)
    assert later.keep == ("b", "c") and later.summed == ("z",)
    with pytest.raises(InputError, match="at least 2"):
        bound_clients(vols, set(), bound=1)
    assert label_for("chunk-0") == "chunk-0"
    assert label_for("sk-ABC/def") != label_for("sk-ABC/deg") and label_for("sk-ABC/def").startswith("c-")
    assert label_for(OTHER) != OTHER


def test_clients_are_stored_under_their_deployment_and_sum_to_its_total(store, panel):
    _ingest(store, panel)
    assert sorted(store.deployments()) == ["a", "b"]   # clients are not deployments
    clients = ClientStore(store, "a")
    assert sorted(clients.names().values()) == ["c0", "c1", "c2"]
    frames = clients.frames()
    total = store.frame("a")["requests"]
    summed = sum(f["requests"] for f in frames.values())
    assert np.allclose(summed.to_numpy(), total.to_numpy())
    line = shares_text({k: f["requests"] for k, f in frames.items()})
    assert line.startswith("clients: 3 series, share of requests: c2 ") and line.endswith("c0 1%")


def test_a_refused_file_stores_nothing(store, panel, snap):
    _ingest(store, panel)
    before = snap()
    long = _long(panel)
    coarse = long[long["time"].dt.minute % 30 == 0]     # the same clients in 30-minute bins
    with pytest.raises(InputError, match="stores 10-minute bins; this file has 30-minute bins; nothing was stored"):
        ingest_rows(store, "a", coarse, True, None, bound=50)
    with pytest.raises(InputError, match="no rows for deployment 'zz'"):
        ingest_rows(store, "zz", long, True, None, bound=50)
    with pytest.raises(InputError, match="at least 2"):
        ingest_rows(store, "b", long, True, None, bound=1)
    assert snap() == before


def test_the_fleet_model_is_trained_once_judged_per_deployment_and_served_where_it_wins(store, tmp_path):
    panel = noisy_panel(seed=0)
    _ingest(store, panel)
    reg = Registry(tmp_path)
    rep = train_fleet(fleet_data(store), reg, _make, baselines=_quick)
    print(rep.summary())
    assert set(rep.verdicts) == {"a", "b"}
    loaded = fleet_registry(reg).load(FLEET)
    assert isinstance(loaded, GlobalLSTM) and loaded.version == f"{FLEET}/{rep.version}"
    for dep, v in rep.verdicts.items():
        own = [n.split("/")[1] for n, g in zip(panel.names, panel.groups) if g == dep]
        assert v["method"] in ("bottom_up", "top_down", "mint_shrink") and sorted(v["clients"]) == own
        assert v["serves"] and v["why"].startswith("validation MAE") and " beats " in v["why"]
        frame = serving_history(store, dep, 7)
        clients = serving_clients(store, dep, 7)
        r = resolve(reg, dep, frame, clients=clients)
        assert r.source == "fleet" and f"reconciled by {v['method']} over 3 client series" in r.why
        f = forecast_deployment(frame, reg, dep, clients=clients)
        assert f.model == "lstm_global" and f.version == loaded.version and f.step_min == 10 and f.horizon == 3
        assert f.origin == frame.index[-1] + pd.Timedelta(minutes=10) and f.note == r.why
        # the answer is the fleet model's own batch forecast of the total and its clients, reconciled
        rows = np.vstack([frame["requests"].to_numpy()] + [clients()[c]["requests"].reindex(frame.index).to_numpy()
                                                              for c in v["clients"]])
        base = loaded.predict_batch(rows, frame.index[-1], 3)
        assert np.isfinite(base).all()
        if v["method"] == "bottom_up":    # the total is its clients' sum
            np.testing.assert_allclose(f.quantiles[0.5], base[1:, :, 1].sum(axis=0), rtol=1e-9)
        elif v["method"] == "top_down":   # the total as forecast, split among the clients
            np.testing.assert_allclose(f.quantiles[0.5], base[0, :, 1], rtol=1e-9)


def test_the_fleet_model_steps_aside_where_it_lost_or_its_champion_changed(store, tmp_path):
    _ingest(store, synth_panel(days=8, seed=3))  # smooth cycles: persistence is hard to beat 30 minutes ahead
    reg = Registry(tmp_path)
    rep = train_fleet(fleet_data(store), reg, _make, baselines=_quick)
    print(rep.summary())
    for dep, v in rep.verdicts.items():
        assert v["serves"] == (v["mae"] < min(v["maes"].values()))
        r = resolve(reg, dep, serving_history(store, dep, 7), clients=serving_clients(store, dep, 7))
        assert (r.source == "fleet") == v["serves"]
        if not v["serves"]:
            assert f"fleet model {FLEET}/{rep.version} does not serve {dep!r}: validation MAE" in r.why
    assert not all(v["serves"] for v in rep.verdicts.values()), rep.summary()
    # a deployment it never saw is judged on its own recent data, as the shipped model is
    assert f"fleet model {FLEET}/{rep.version}, the deployment's total (no client series), never trained on 'zz': " \
        in resolve(reg, "zz", serving_history(store, "a", 7)).why


def test_a_new_champion_takes_over_from_the_fleet_model_it_was_not_judged_against(store, tmp_path):
    _ingest(store, noisy_panel(seed=1))
    reg = Registry(tmp_path)
    rep = train_fleet(fleet_data(store), reg, _make, baselines=_quick)
    assert rep.verdicts["a"]["serves"] and rep.verdicts["a"]["champion"] is None, rep.summary()
    frame = serving_history(store, "a", 7)
    champ = _make(30).fit({"a": frame})           # a per-deployment model promoted after the fleet's verdict
    reg.set_champion("a", reg.save("a", champ), reason="test")
    r = resolve(reg, "a", frame, clients=serving_clients(store, "a", 7))
    assert r.source == "champion" and "was judged against champion None, and the champion is now v0001" in r.why


def test_odd_fleets_give_a_forecast_or_a_clear_refusal(store, tmp_path):
    panel = noisy_panel(seed=2)
    last_day = panel.index >= panel.index[-144]
    values = panel.values.copy()
    values[1] = 0.0                                  # a client that never sent a request
    values[2] = np.where(last_day, values[2], 0.0)   # a client that appears on the last day only
    odd = type(panel)(panel.names, panel.index, values, 10, panel.groups)
    _ingest(store, odd)
    one = odd.select(np.array(odd.groups) == "b")
    ingest_rows(store, "solo", _long(one.select([True, False, False])).assign(group="solo"), True, None, 50)
    alone = pd.DataFrame({"requests": panel.values[4]}, index=panel.index)   # a deployment without clients
    store.upsert_frame("bare", with_resolution(alone, 10), resolution_min=10)
    reg = Registry(tmp_path)
    rep = train_fleet(fleet_data(store), reg, _make, baselines=_quick)
    print(rep.summary())
    assert set(rep.verdicts) == {"a", "b", "solo", "bare"} and rep.verdicts["bare"]["method"] == "total"
    for dep in rep.verdicts:
        frame = serving_history(store, dep, 7)
        f = forecast_deployment(frame, reg, dep, clients=serving_clients(store, dep, 7))
        assert np.isfinite(f.mean).all() and all(np.isfinite(v).all() for v in f.quantiles.values()), dep
        assert f.note, dep   # who answered, and why
    with pytest.raises(ArtifactError, match="training needs a day before the validation window"):
        train_fleet({"a": FleetSeries(store.frame("a").iloc[-150:])}, reg, _make, baselines=_quick)
    with pytest.raises(ArtifactError, match="nothing to train the fleet model on"):
        train_fleet({}, reg, _make, baselines=_quick)


def test_a_deployment_the_fleet_model_never_saw_gets_its_forecast_where_it_beats_the_baselines(store, tmp_path):
    panel = noisy_panel(seed=0)
    _ingest(store, panel.select(np.array(panel.groups) == "a"))    # the fleet: deployment a alone
    reg = Registry(tmp_path)
    rep = train_fleet(fleet_data(store), reg, _make, baselines=_quick)
    assert set(rep.verdicts) == {"a"}
    _ingest(store, panel.select(np.array(panel.groups) == "b"))    # b arrives after the fleet model was trained
    frame = serving_history(store, "b", 7)
    r = resolve(reg, "b", frame, clients=serving_clients(store, "b", 7))
    print(r.why)
    assert "never trained on 'b'" in r.why and "MAE on the last 6 h" in r.why
    assert (r.source == "fleet") == (" beats the baselines" in r.why)
    if r.source == "fleet":
        f = forecast_deployment(frame, reg, "b", clients=serving_clients(store, "b", 7))
        assert f.model == "lstm_global" and np.isfinite(f.mean).all()
