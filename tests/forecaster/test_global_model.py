"""A global LSTM fitted on several series of any size; the shipped model says what it was
trained on (public traces, their spans and licences) and its documents agree."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from forecaster.base import InsufficientHistory
from forecaster.lstm import LSTMConfig, LSTMForecaster
from forecaster.registry import SHIPPED_DIR, Registry

from fc_synth import synth_frame

ROOT = Path(__file__).resolve().parents[2]
SMALL = synth_frame(3, seed=11, level=40.0)  # a web log's size...
LARGE = synth_frame(2, seed=12, level=3000.0, start="2024-05-12")  # ...and an LLM service's


def _fit(histories, **kw):
    return LSTMForecaster(LSTMConfig.tiny(threads=1, **kw), progress=False).fit(histories)


def test_one_model_fits_several_series_of_any_size():
    m = _fit([SMALL, LARGE])
    spans = m.meta["series"]
    assert [s["start"] for s in spans] == [str(SMALL.index[0]), str(LARGE.index[0])]
    assert all(s["train_origins"] > 0 and s["val_origins"] > 0 for s in spans)
    assert m.meta["train_origins"] == sum(s["train_origins"] for s in spans)
    assert m.meta["train_end"] == str(LARGE.index[-1])
    # each series scaled by its own level: the forecast sits at each one's size
    for frame, level in ((SMALL, 40.0), (LARGE, 3000.0)):
        f = m.predict(frame.iloc[:-60])
        actual = frame["requests"].iloc[-60:-30].mean()
        assert 0.5 < f.mean.mean() / actual < 2.0, (level, f.mean.mean(), actual)


def test_the_origins_are_shared_and_one_series_trains_as_before():
    two = _fit([SMALL, LARGE], max_origins=1000)
    assert all(s["train_origins"] + s["val_origins"] <= 500 for s in two.meta["series"])
    a, b = _fit(SMALL), _fit([SMALL])
    ta, tb = a.to_artifact()[0], b.to_artifact()[0]
    assert all(torch.equal(ta[k], tb[k]) for k in ta) and "series" not in a.meta
    assert a.meta["val_start"] == b.meta["val_start"]


def test_several_series_train_bit_for_bit():
    a, b = _fit([SMALL, LARGE]), _fit([SMALL, LARGE])
    ta, tb = a.to_artifact()[0], b.to_artifact()[0]
    assert all(torch.equal(ta[k], tb[k]) for k in ta) and a.scale == b.scale


def test_day_of_week_only_when_every_series_spans_enough_days():
    long = synth_frame(15, seed=13)
    assert _fit(long, epochs=1).cfg.use_dow
    assert not _fit([long, SMALL], epochs=1).cfg.use_dow


def test_bad_series_lists_are_refused():
    with pytest.raises(InsufficientHistory, match="no series"):
        _fit([])
    with pytest.raises(InsufficientHistory, match="series 2 of 2"):
        _fit([SMALL, SMALL.iloc[:30]])
    coarse = SMALL["requests"].resample("5min").sum().to_frame()
    with pytest.raises(ValueError, match="different resolutions"):
        _fit([SMALL, coarse])


def _shipped_meta() -> dict:
    reg = Registry(SHIPPED_DIR)
    return reg.read_meta("default", reg.champion("default"))


def test_the_shipped_model_is_pretrained_on_public_traces_and_says_which():
    from forecaster.default_model import TRACES

    meta = _shipped_meta()
    files = {t["file"]: t for t in meta["trained_on"] if t["file"]}
    assert set(files) == {t.file for t in TRACES} == {"azure2024_conversation_per_minute.csv",
                                                      "nasa_http_1995_per_minute.csv"}
    azure = files["azure2024_conversation_per_minute.csv"]
    assert azure["licence"] == "CC-BY 4.0" and "DynamoLLM" in azure["cite"] and "Splitwise" in azure["cite"]
    assert azure["span"][1] < "2024-05-16"  # the benchmark test days stay unseen
    assert files["nasa_http_1995_per_minute.csv"]["span"][0].startswith("1995-07-01")
    assert len(meta["training"]["series"]) == len(meta["trained_on"])
    assert not meta["config"]["use_dow"]  # the Azure days span less than dow_min_days
    assert sorted(p.name for p in (SHIPPED_DIR / "default").iterdir() if p.is_dir()) == [meta["version"]]


def test_the_documents_name_the_shipped_models_traces_and_licences():
    meta = _shipped_meta()
    shipped, models = ((ROOT / p).read_text() for p in ("forecaster/shipped/README.md", "models/README.md"))
    for doc in (shipped, models):
        for t in meta["trained_on"]:
            if t["file"]:
                assert t["file"] in doc and t["span"][0][:10] in doc and t["span"][1][:10] in doc
        assert "CC-BY 4.0" in doc and "NASA-HTTP" in doc and meta["version"] in doc
    assert "forecaster/shipped" in models and "state dir" in models
    assert "python -m forecaster.default_model" in shipped


def test_the_shipped_model_forecasts_series_of_both_sizes():
    model = Registry(SHIPPED_DIR).load("default")
    for frame in (SMALL, LARGE):
        f = model.predict(frame.iloc[:-60])
        assert np.isfinite(f.mean).all()
        assert 0.5 < f.mean.mean() / frame["requests"].iloc[-60:-30].mean() < 2.0
    json.dumps(model.meta)  # its training metadata stays JSON
