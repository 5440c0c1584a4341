"""Fixtures for the forecaster tests."""
from __future__ import annotations

import pandas as pd
import pytest

from fc_synth import synth_frame


@pytest.fixture(scope="session")
def frame3() -> pd.DataFrame:
    return synth_frame(3)


@pytest.fixture(scope="session")
def frame8() -> pd.DataFrame:
    return synth_frame(8, seed=1)


@pytest.fixture(scope="session")
def tiny_lstm_cfg():
    from forecaster.lstm import LSTMConfig

    return LSTMConfig.tiny()
