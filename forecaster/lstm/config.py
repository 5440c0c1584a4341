"""Settings of the LSTM forecaster (one dataclass, stored whole in the artifact metadata)."""
from __future__ import annotations

from dataclasses import dataclass

# Levels the quantile heads are trained for: every level a policy may provision for
# (forecaster.base.DEFAULT_QUANTILES), each trained directly with pinball loss.
TRAINED_LEVELS: tuple[float, ...] = (0.1, 0.5, 0.9, 0.95, 0.99)


@dataclass
class LSTMConfig:
    horizon: int = 30
    window: int = 60
    level_window: int = 30
    hidden: int = 32
    head_hidden: int = 64
    dropout: float = 0.2
    levels: tuple[float, ...] = TRAINED_LEVELS
    members: int = 2
    epochs: int = 24
    epoch_fraction: float = 0.5  # share of the training origins drawn per epoch (neighbours overlap)
    patience: int = 6
    min_epochs: int = 10  # early stopping cannot stop before this
    batch_size: int = 512
    lr: float = 4e-3
    weight_decay: float = 1e-3
    val_fraction: float = 0.2
    max_train_days: int = 28  # origins older than this are not used for training
    max_origins: int = 12_000  # cap on training origins (thinned evenly over max_train_days; several series share it)
    seed: int = 0
    threads: int = 1  # per member, fixed: the weights depend on it (members go side by side: members.py)
    calibrate: bool = True
    anchor: bool = True  # pull P50 toward the recent load per lead where validation says so (anchor.py)
    refit_full: bool = True  # after early stopping, retrain each member on all origins for its best epoch count
    recurrent: bool = True  # False: the LSTM's state is replaced by zeros in training and use (the ablation)
    token_dropout: float = 0.3  # share of training windows shown without their tokens (serve either way)
    cal_margin: float = 0.02  # calibrate the outer levels this much wider on validation (drift allowance)
    cal_lead_edges: tuple[int, ...] = (5, 15)  # calibrated per lead bucket: leads 1-5, 6-15, 16-horizon
    smooth: int = 7  # half-width (minutes) of the moving average on the day/week-before profile
    profile_days: int = 7  # days averaged into the mean daily profile input
    profile_smooth: int = 15  # half-width of its moving average
    dow_min_days: int = 14  # day-of-week inputs only when every training series spans this many days
    use_dow: bool | None = None  # decided by fit (None: not fitted yet)
    step_min: int = 1  # minutes per step of the series it was fitted on (set by fit; it answers only that)
    # Wall-clock stop for adding epochs (all members together). None (the default) keeps
    # training reproducible whatever the machine's load; where a caller sets one (a nightly
    # retrain with a deadline), the model's metadata says when it fired.
    time_budget_s: float | None = None

    @classmethod
    def tiny(cls, **kw) -> "LSTMConfig":
        """For tests: trains in about a second."""
        base = dict(window=30, hidden=8, head_hidden=16, members=1, epochs=3, patience=2, min_epochs=1,
                    batch_size=128, epoch_fraction=1.0, max_origins=2500)
        base.update(kw)
        return cls(**base)
