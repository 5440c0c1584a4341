"""Which model answers for a deployment: one resolver for the CLI, the API and the workers.

In order:

0. the fleet model (one model over every deployment and its clients, issue 43) where its
   training judged it better than this deployment's champion and baselines, the champion it
   beat still the champion (``forecaster.global_lstm.answer``);
1. the deployment's champion (the registry walks back through earlier champions when an
   artifact is corrupt);
2. else, when the deployment was trained, the best baseline of its newest training's validation
   table (the score the promotion used: MAE on the validation window), and the note says which
   version was not promoted and why;
3. else the shipped default model (read-only package data), but only where it beats the
   baselines on the deployment's own recent data: it is a pretrained model, judged by how
   it forecasts this deployment, not by the calendar distance to its training data;
4. else the baselines.

The answer (:class:`Resolution`) says which and why; every forecast made through it
carries that reason in its note, so the three callers answer the same with the same note.
"""
from __future__ import annotations

import functools
import zlib
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from forecaster.base import DAY, minute_series, resolution
from forecaster.fallback import FallbackForecaster, baseline_named
from forecaster.registry import DEFAULT_DEPLOYMENT, SHIPPED_DIR, ArtifactError, Registry
from warmcast.errors import NotFoundError

JUDGE_HOURS = 6  # the shipped model is scored on the deployment's last hours...
JUDGE_STEP_MIN = 30  # ...at origins this far apart, leads 1..30...
JUDGE_EVERY_H = 6  # ...judged again once its window has moved on by that many hours (judge_window)
CHAMPION_MAX_AGE = pd.Timedelta(days=14)  # a deployment's own model older than this is stale


@dataclass(frozen=True)
class Resolution:
    model: object | None  # the champion or the shipped model; None: baselines answer
    source: str  # "fleet", "champion", "validation", "shipped" or "baselines"
    why: str  # said in the note of every forecast made through it
    baselines: tuple[str, ...] = ()  # "validation": the table's baselines, best first


class AsFitted:
    """A trained model in a backtest: ``fit`` does nothing, the window only scores it."""

    def __init__(self, model, name: str) -> None:
        self.model, self.name = model, name

    def fit(self, history) -> "AsFitted":
        return self

    def predict_origins(self, history, origins, horizon: int = 30, quantiles=(0.1, 0.5, 0.9)):
        return self.model.predict_origins(history, origins, horizon=horizon, quantiles=quantiles)


def judge_baselines() -> list:
    """The baselines a pretrained model must beat, and that answer when none does: the cheap
    ones (the workers forecast every minute and must not refit state-space models each time)."""
    from forecaster.baselines import Persistence, SeasonalNaive

    return [SeasonalNaive(DAY), Persistence()]


@functools.lru_cache(maxsize=1)
def shipped_model():
    """(the shipped default model or None, why not)."""
    try:
        return Registry(SHIPPED_DIR).load(DEFAULT_DEPLOYMENT), ""
    except (ArtifactError, NotFoundError) as err:
        return None, f"the shipped default model does not load ({err})"


def judge(model, frame: pd.DataFrame, who: str = "the shipped default model") -> tuple[bool, str]:
    """Does ``model`` (``who``, in the answer) beat the baselines on the last JUDGE_HOURS of ``frame``?
    (verdict, why)"""
    from forecaster.backtest import run_backtest

    s = minute_series(frame)
    r = resolution(s) if len(s) > 1 else 1   # minutes per step: a coarse series is judged in its own bins
    observed = int(np.isfinite(s.to_numpy(dtype=float)).sum()) * r
    need = DAY + JUDGE_HOURS * 60
    if observed < need:
        return False, f"too little history to judge {who} ({observed} observed minutes, needs {need})"
    start = s.index[-(JUDGE_HOURS * 60 // r)]
    res = run_backtest(frame, start, [AsFitted(model, "shipped"), *judge_baselines()], horizon=max(1, 30 // r),
                       step=JUDGE_STEP_MIN if JUDGE_STEP_MIN % r == 0 else r, progress=False)
    maes = {k: v["mae"] for k, v in res.metrics["models"].items() if v["mae"] is not None}
    if "shipped" not in maes:
        return False, f"{who} cannot answer here ({res.skipped.get('shipped', 'no forecast')})"
    others = ", ".join(f"{k} {v:.2f}" for k, v in sorted(maes.items()) if k != "shipped")
    wins = all(maes["shipped"] < v for k, v in maes.items() if k != "shipped")
    verdict = "beats" if wins else "does not beat"
    return wins, (f"{who}'s MAE on the last {JUDGE_HOURS} h ({maes['shipped']:.2f}) "
                  f"{verdict} the baselines ({others})")


def fit_window(frame: pd.DataFrame, deployment: str = "") -> pd.DataFrame:
    """The part of a serving history that models are fitted on: the bins before the newest start of
    the deployment's hour.  A server that keeps a fit for the hour and a command that fits now then
    fit on the same bins, and answer alike (issue 46).  Each deployment's hour starts at a minute of
    its own (a hash of its name; "" on the hour): all of them refitting at the top of the hour held
    the loop's ticks back at thousands of deployments (issue 44)."""
    return _before_period(frame, deployment, 1)


def judge_window(frame: pd.DataFrame, deployment: str) -> pd.DataFrame:
    """The part of a serving history a pretrained model is judged on: the bins before the newest
    start of this deployment's JUDGE_EVERY_H-hour period.  A judgement costs about a quarter of a
    CPU-second; at thousands of deployments, once an hour was most of a core (issue 44)."""
    return _before_period(frame, deployment, JUDGE_EVERY_H)


def _before_period(frame: pd.DataFrame, deployment: str, hours: int) -> pd.DataFrame:
    """The bins before the newest start of ``deployment``'s ``hours``-hour period, which starts at a
    minute of its own (CRC-32 of its name, a whole number of the series' bins) so that thousands of
    deployments do not all refit or judge in the same minute."""
    if not len(frame):
        return frame
    res = resolution(frame)
    offset = pd.Timedelta(minutes=zlib.crc32(deployment.encode()) % (hours * 60) // res * res)
    origin = frame.index[-1] + pd.Timedelta(minutes=res)
    return frame.loc[frame.index < (origin - offset).floor(f"{hours}h") + offset]


_verdicts: dict[tuple, tuple[Any, tuple[bool, str]]] = {}   # key -> (the model judged, its verdict)


def _judged(deployment: str, model, frame: pd.DataFrame, who: str = "the shipped default model",
            shared=None) -> tuple[bool, str]:
    """judge() on the judge window, once per deployment and period (the API resolves every minute);
    with ``shared`` (a :class:`forecaster.verdicts.SharedVerdicts`), once per deployment and period for
    every process that shares it: a versioned model's verdict is read there before judging, written after."""
    window = judge_window(frame, deployment)
    end = window.index[-1] if len(window) else None
    version = str(getattr(model, "version", ""))
    key = (deployment, id(model), version, end)
    cached = _verdicts.get(key)
    # the entry holds the model itself: an id is reused once its object is gone, and a new model at
    # an old one's address took the old one's verdict (a suite run served a model judged worse)
    if cached is None or cached[0] is not model:
        if len(_verdicts) > 20_000:   # a worker's deployments, each with a model or two
            _verdicts.clear()
        named = f"{who}|{version}|{end}" if shared is not None and version else None
        verdict = shared.get(deployment, named) if named else None
        if verdict is None:
            verdict = judge(model, window, who)
            if named:
                shared.put(deployment, named, verdict)
        _verdicts[key] = cached = (model, verdict)
    return cached[1]


def resolve(registry: Registry, deployment: str, frame: pd.DataFrame, shipped=None, clients=None,
            shared=None) -> Resolution:
    """Which model answers for ``deployment`` given its recent load ``frame``, and why.
    ``shipped``: the pretrained model to judge (default: the shipped default model); ``clients``:
    reads the deployment's client series when the fleet model forecasts (``live.serving_clients``);
    ``shared``: verdicts other processes judged (:func:`_judged`)."""
    from forecaster.global_lstm.answer import fleet_resolution

    champ, problems = registry.champion_model(deployment)
    fleet, why_fleet = fleet_resolution(registry, deployment, clients, champ.version.split("/")[-1] if champ else None)
    if fleet is not None:
        return Resolution(fleet, "fleet", why_fleet)
    skipped = f" (skipped: {'; '.join(problems)})" if problems else ""
    skipped += f"; {why_fleet}" if why_fleet else ""
    if champ is not None:
        return Resolution(champ, "champion", f"champion {champ.version}{skipped}")
    trained = by_validation(registry, deployment, skipped)
    if trained is not None:
        return trained
    unseen = _fleet_unseen(registry, deployment, frame, clients, shared)
    if unseen is not None and unseen.source == "fleet":
        return unseen
    skipped += f"; {unseen.why}" if unseen is not None else ""
    why_not = ""
    if shipped is None:
        shipped, why_not = shipped_model()
    if shipped is None:
        return Resolution(None, "baselines", f"no trained model for {deployment!r}{skipped}; {why_not}")
    step = getattr(getattr(shipped, "cfg", None), "step_min", 1)
    if len(frame) > 1 and resolution(frame) != step:
        return Resolution(None, "baselines", f"no trained model for {deployment!r}{skipped}; the shipped default "
                                             f"model forecasts {step}-minute steps and this deployment is stored in "
                                             f"{resolution(frame)}-minute bins")
    wins, why = _judged(deployment, shipped, frame, shared=shared)
    prefix = f"no trained model for {deployment!r}{skipped}; "
    if wins:
        return Resolution(shipped, "shipped", prefix + why)
    return Resolution(None, "baselines", prefix + why)


def _fleet_unseen(registry: Registry, deployment: str, frame: pd.DataFrame, clients,
                  shared=None) -> Resolution | None:
    """For a deployment the fleet model was never trained on (nor the deployment itself): the fleet
    model on its own total, judged on the deployment's recent data as the shipped model is (a new
    deployment gets a forecast from the fleet's model on its first day, issue 43); None without one."""
    from forecaster.global_lstm.answer import unseen_answer

    answer = unseen_answer(registry, deployment, clients)
    if answer is None:
        return None
    step = answer.model.cfg.step_min
    if len(frame) > 1 and resolution(frame) != step:
        return Resolution(None, "baselines", f"the fleet model forecasts {step}-minute steps and {deployment!r} is "
                                             f"stored in {resolution(frame)}-minute bins")
    wins, why = _judged(deployment, answer.model, frame, f"fleet model {answer.version}", shared)
    text = f"{answer.how}, never trained on {deployment!r}: {why}"
    return Resolution(answer, "fleet", text) if wins else Resolution(None, "baselines", text)


def by_validation(registry: Registry, deployment: str, skipped: str = "") -> Resolution | None:
    """With no champion serving: the best baseline of the newest training's validation table (by
    its MAE, the score the promotion used), and why no trained model serves; None when the
    deployment was never trained or its table names no baseline."""
    try:
        trained = registry.last_trained(deployment)
    except ArtifactError:
        return None  # an unreadable index: the champion's problems already say so
    if trained is None:
        return None
    maes = {k: v.get("mae") for k, v in trained["validation"].items() if isinstance(v, dict)}
    scored = sorted((mae, name) for name, mae in maes.items() if mae is not None and baseline_named(name))
    if not scored:
        return None
    decision = trained["decision"] or {}
    version = f"{deployment}/{trained['version']}"
    if decision.get("promoted"):
        why_not = f"{version} was promoted but no champion loads{skipped}"
    else:
        why_not = f"{version} was not promoted ({decision.get('reason') or 'no promotion decision recorded'}){skipped}"
    table = ", ".join(f"{k} {v:.2f}" for k, v in sorted(maes.items(), key=lambda kv: (kv[1] is None, kv[1] or 0))
                      if v is not None)
    best = scored[0][1]
    return Resolution(None, "validation", f"{why_not}; {best} answers, the best baseline of its validation "
                                          f"(MAE {table})", tuple(name for _, name in scored))


def _serving_baselines(r: Resolution) -> tuple[list, int | None]:
    """(the baselines to fit, the hours to rank them on; None: keep their order): a training's table
    ranks them (its best first, then the cheap ones for when it cannot answer), else the last 2 h."""
    if not r.baselines:
        return judge_baselines(), 2
    chosen = [baseline_named(r.baselines[0])]
    return chosen + [b for b in judge_baselines() if b.name != chosen[0].name], None


def resolve_forecaster(registry: Registry, deployment: str, frame: pd.DataFrame, shipped=None, clients=None,
                       shared=None) -> tuple[FallbackForecaster, Resolution]:
    """The resolved model wrapped in the fallback rules, its baselines fitted where they will
    answer: what the CLI, the API and the workers forecast with (``shared``: :func:`resolve`'s)."""
    r = resolve(registry, deployment, frame, shipped, clients, shared)
    baselines, rank_hours = _serving_baselines(r)
    fb = FallbackForecaster(r.model, baselines=baselines, primary_note=r.why,
                            max_age=CHAMPION_MAX_AGE if r.source in ("champion", "fleet") else None,
                            primary_missing_reason=r.why)
    if fb.why_not_primary(frame) is not None:
        fb.fit(fit_window(frame, deployment), rank_hours=rank_hours)
    return fb, r


def serving_key(registry: Registry, deployment: str, frame: pd.DataFrame) -> tuple:
    """What a kept :func:`resolve_forecaster` answer depends on: the champion, the newest trained
    version and the fit window's end; a server fits again when any of them changes."""
    from forecaster.global_lstm.artifacts import FLEET, fleet_registry

    try:
        champion = registry.champion(deployment)
        trained = (registry.last_trained(deployment) or {}).get("version")
        fleet = fleet_registry(registry).champion(FLEET)
    except ArtifactError:
        champion = trained = fleet = None  # an unreadable index: resolved (and said) by the resolver
    window = fit_window(frame, deployment)
    return champion, trained, fleet, window.index[-1] if len(window) else None
