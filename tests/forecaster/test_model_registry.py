"""Model registry: round trip, promotion, refusal of bad artifacts, atomic writes."""
from __future__ import annotations

import json
import os
import pickle

import numpy as np
import pytest
import torch

from forecaster.base import DAY
from forecaster.baselines import Persistence, SeasonalNaive
from forecaster.live import forecast_deployment, train_deployment
from forecaster.lstm import LSTMConfig, LSTMForecaster
from forecaster.registry import INDEX, META, WEIGHTS, ArtifactError, Registry

from fc_synth import synth_frame

FRAME = synth_frame(3, seed=6, tokens=True)


@pytest.fixture(scope="module")
def trained():
    a = LSTMForecaster(LSTMConfig.tiny(seed=1), progress=False).fit(FRAME.iloc[: 2 * DAY])
    b = LSTMForecaster(LSTMConfig.tiny(seed=2), progress=False).fit(FRAME.iloc[: 2 * DAY])
    return a, b


def test_round_trip(tmp_path, trained):
    reg = Registry(tmp_path)
    v = reg.save("chat", trained[0], metrics={"validation_mae": 12.5})
    assert v == "v0001" and reg.champion("chat") is None
    meta = json.loads((tmp_path / "chat" / v / META).read_text())
    for key in ("config", "feature_set", "libraries", "training", "weights_sha256", "metrics"):
        assert key in meta
    assert meta["training"]["train_start"] and meta["training"]["train_end"]
    assert "torch" in meta["libraries"]
    loaded = reg.load("chat", v)
    a, b = trained[0].predict(FRAME), loaded.predict(FRAME)
    np.testing.assert_allclose(a.mean, b.mean, rtol=1e-6)
    np.testing.assert_allclose(a.quantiles[0.9], b.quantiles[0.9], rtol=1e-6)
    assert b.version == "chat/v0001"
    # weights are plain tensors
    tensors = torch.load(tmp_path / "chat" / v / WEIGHTS, weights_only=True)
    assert all(isinstance(t, torch.Tensor) for t in tensors.values())


def test_promotion_rules(tmp_path, trained):
    reg = Registry(tmp_path)
    v1 = reg.save("chat", trained[0])
    d = reg.consider("chat", v1, challenger_mae=10.0, champion_mae=None, best_baseline_mae=11.0)
    assert d.promoted and reg.champion("chat") == v1
    v2 = reg.save("chat", trained[1])
    d = reg.consider("chat", v2, challenger_mae=9.5, champion_mae=9.0, best_baseline_mae=11.0)
    assert not d.promoted and "champion" in d.reason and reg.champion("chat") == v1
    d = reg.consider("chat", v2, challenger_mae=9.5, champion_mae=10.0, best_baseline_mae=9.4,
                     best_baseline="uc_fourier")
    assert not d.promoted and "uc_fourier" in d.reason and reg.champion("chat") == v1
    d = reg.consider("chat", v2, challenger_mae=8.0, champion_mae=9.0, best_baseline_mae=9.4)
    assert d.promoted and reg.champion("chat") == v2
    assert reg.index("chat")["history"][0] == v1


def _corrupt_bytes(p):
    data = bytearray(p.read_bytes())
    data[len(data) // 2] ^= 0xFF
    p.write_bytes(bytes(data))


@pytest.mark.parametrize("how", ["flip_weights", "truncate_weights", "bad_json", "incompatible", "pickle"])
def test_corrupted_challenger_refused_champion_keeps_serving(tmp_path, trained, how):
    reg = Registry(tmp_path)
    v1 = reg.save("chat", trained[0])
    reg.set_champion("chat", v1)
    v2 = reg.save("chat", trained[1])
    d2 = tmp_path / "chat" / v2
    if how == "flip_weights":
        _corrupt_bytes(d2 / WEIGHTS)
    elif how == "truncate_weights":
        (d2 / WEIGHTS).write_bytes((d2 / WEIGHTS).read_bytes()[:100])
    elif how == "bad_json":
        (d2 / META).write_text("{not json")
    elif how == "incompatible":
        meta = json.loads((d2 / META).read_text())
        meta["feature_set"] = "lstm-v0"
        (d2 / META).write_text(json.dumps(meta))
    elif how == "pickle":  # an arbitrary pickled object instead of tensors
        class Evil:
            def __reduce__(self):
                return (os.system, ("echo pwned",))

        (d2 / WEIGHTS).write_bytes(pickle.dumps({"x": Evil()}))
        meta = json.loads((d2 / META).read_text())
        meta.pop("weights_sha256")
        (d2 / META).write_text(json.dumps(meta))
    with pytest.raises(ArtifactError) as err:
        reg.load("chat", v2)
    assert str(d2) in str(err.value) or v2 in str(err.value)
    d = reg.consider("chat", v2, challenger_mae=1.0, champion_mae=5.0, best_baseline_mae=5.0)
    assert not d.promoted and "refused" in d.reason
    assert reg.champion("chat") == v1
    model, problems = reg.champion_model("chat")
    assert model is not None and model.version == f"chat/{v1}" and problems == []


def test_corrupted_champion_previous_serves(tmp_path, trained):
    reg = Registry(tmp_path)
    v1 = reg.save("chat", trained[0])
    reg.set_champion("chat", v1)
    v2 = reg.save("chat", trained[1])
    reg.set_champion("chat", v2)
    _corrupt_bytes(tmp_path / "chat" / v2 / WEIGHTS)
    model, problems = reg.champion_model("chat")
    assert model.version == f"chat/{v1}"
    assert "checksum" in problems[0] and v2 in problems[0]
    f = forecast_deployment(FRAME, reg, "chat")
    assert f.model == "lstm" and f.version == f"chat/{v1}" and "checksum" in f.note


def test_atomic_writes(tmp_path, trained, monkeypatch):
    reg = Registry(tmp_path)
    v1 = reg.save("chat", trained[0])
    reg.set_champion("chat", v1)
    before = (tmp_path / "chat" / INDEX).read_text()
    real_replace = os.replace

    def crash(src, dst):
        raise OSError("disk died mid-write")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError):
        reg.save("chat", trained[1])
    with pytest.raises(OSError):
        reg.set_champion("chat", v1)
    monkeypatch.setattr(os, "replace", real_replace)
    # nothing half-written is visible: same index, no new version, no temp files left
    assert (tmp_path / "chat" / INDEX).read_text() == before
    assert reg.versions("chat") == [v1]
    assert [p.name for p in (tmp_path / "chat").iterdir() if p.name.startswith(".")] == []
    assert reg.load("chat").version == f"chat/{v1}"


def test_train_deployment_promotes_then_guards(tmp_path):
    reg = Registry(tmp_path)
    frame = synth_frame(3, seed=8)
    rep = train_deployment(frame, reg, "chat", val_hours=6, config=LSTMConfig.tiny(epochs=2), progress=False,
                           baselines=[Persistence(), SeasonalNaive(DAY)])
    assert rep.version == "v0001"
    assert set(rep.maes) == {"lstm", "persistence", "seasonal_naive_day"}
    assert rep.decision.promoted == (reg.champion("chat") == "v0001")
    assert "MAE" in rep.summary()


def test_shipped_default_model_loads_and_forecasts():
    """forecaster/shipped must match this code (rebuild it with python -m forecaster.default_model)."""
    from warmcast.forecast import DEFAULT_QUANTILES
    from forecaster.registry import SHIPPED_DIR

    reg = Registry(SHIPPED_DIR)
    model = reg.load("default")
    assert model.version.startswith("default/v")
    weights = SHIPPED_DIR / "default" / reg.champion("default") / WEIGHTS
    assert weights.stat().st_size < 2_000_000
    f = model.predict(synth_frame(2, seed=3)[["requests"]])
    assert np.isfinite(f.mean).all() and f.horizon == 30
    assert set(f.quantiles) == set(DEFAULT_QUANTILES)
