"""The ensemble's members, each trained start to finish (early-stopping run, then the refit on
every origin) in a process of its own where that is safe, one after another otherwise.

Why processes: the net is small (hidden 32), so a second torch thread inside one member buys
little, while members on cores of their own train side by side.  On this project's 2-core
machine (2026-12-05, a slow host) the default week trained in 84.3 s with two members in turn on
two threads each and in 69.5 s with the two side by side on one thread each; on a quieter one
(2026-12-05 07:05, `bench/forecast_speed.py`) 32.6 s against 26.2 s.  So the default is one thread
per member (``LSTMConfig.threads``).  Members go side by side only where ``members x threads`` fits
the cores (four spinning OpenMP threads on two cores took 245 s).  The weights do not depend on
where a member runs: each runs on ``LSTMConfig.threads`` torch threads with its own seed whatever
the layout, so side by side and in turn give the same weights bit for bit
(tests/forecaster/test_lstm.py), on any number of cores.

Forking is safe only from a process with no other Python thread (a thread of the parent could
hold a lock the child needs: the worker's thread pool, a Redis client); the CLI and the
benchmarks qualify, a Celery worker's thread does not, and there members train in turn.
"""
from __future__ import annotations

import multiprocessing as mp
import os
import queue as queue_mod
import threading
import traceback
from dataclasses import dataclass
from typing import Optional

import numpy as np

from forecaster.lstm.config import LSTMConfig
from forecaster.lstm.network import make_net, torch_module
from forecaster.lstm.training import MemberRun, reproducible, train_member


@dataclass
class MemberResult:
    run: MemberRun              # the early-stopping run (its net predicts validation for calibration)
    refit: Optional[MemberRun]  # retrained on every origin for the run's best epoch count (None: no refit)


def _one(m: int, tensors, tr: np.ndarray, va: np.ndarray, cfg: LSTMConfig, budget: Optional[float],
         bar) -> MemberResult:
    run = train_member(cfg.seed + m, tensors, tr, va, cfg, budget, bar=bar)
    refit = None
    if cfg.refit_full:  # the calibration factors stay those measured out of sample on the run's net
        refit = train_member(cfg.seed + m, tensors, np.arange(len(tensors[2])), None, cfg, budget,
                             fixed_epochs=run.best_epoch)
    return MemberResult(run, refit)


def can_fork() -> bool:
    """Whether members may train in forked processes here (see the module's docstring)."""
    others = [t for t in threading.enumerate()  # tqdm's monitor only wakes to check its bars
              if t is not threading.current_thread() and type(t).__name__ != "TMonitor"]
    return "fork" in mp.get_all_start_methods() and threading.current_thread() is threading.main_thread() \
        and not others


def train_members(tensors, tr: np.ndarray, va: np.ndarray, cfg: LSTMConfig, budget: Optional[float],
                  bar, parallel: Optional[bool] = None) -> list[MemberResult]:
    """Every member's result, in member order.  ``parallel`` None: in processes where
    :func:`can_fork` and there is more than one member."""
    if parallel is None:  # never more torch threads than cores: spinning OpenMP threads on a shared core crawl
        parallel = 1 < cfg.members and cfg.members * max(1, cfg.threads) <= (os.cpu_count() or 1) and can_fork()
    if not parallel:
        return [_one(m, tensors, tr, va, cfg, budget, bar) for m in range(cfg.members)]
    return _forked(tensors, tr, va, cfg, budget, bar)


class _QueueBar:
    """What train_member calls on a progress bar, sent to the parent's bar."""

    def __init__(self, queue) -> None:
        self.queue = queue

    def update(self, n: int) -> None:
        self.queue.put(("update", n))

    def set_postfix(self, **kw) -> None:
        self.queue.put(("postfix", kw))


def _child(m: int, queue, tensors, tr, va, cfg: LSTMConfig, budget: Optional[float]) -> None:
    try:
        with reproducible(cfg.threads):  # the settings fit() trains under, in this process too
            res = _one(m, tensors, tr, va, cfg, budget, _QueueBar(queue))
        queue.put(("done", m, _pack(res)))
    except BaseException:  # noqa: BLE001 - the parent raises it with the child's traceback
        queue.put(("error", m, traceback.format_exc()))


def _forked(tensors, tr, va, cfg: LSTMConfig, budget: Optional[float], bar) -> list[MemberResult]:
    ctx = mp.get_context("fork")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_child, args=(m, queue, tensors, tr, va, cfg, budget), daemon=True)
             for m in range(cfg.members)]
    for p in procs:
        p.start()
    results: dict[int, MemberResult] = {}
    try:
        while len(results) < cfg.members:
            msg = _next(queue, procs)
            if msg is None:
                continue
            if msg[0] == "update" and bar is not None:
                bar.update(msg[1])
            elif msg[0] == "postfix" and bar is not None:
                bar.set_postfix(**msg[1])
            elif msg[0] == "error":
                raise RuntimeError(f"training LSTM member {msg[1]} failed:\n{msg[2]}")
            elif msg[0] == "done":
                results[msg[1]] = _unpack(msg[2], cfg)
    finally:
        for p in procs:
            p.join(timeout=5)
            if p.is_alive():
                p.terminate()
    return [results[m] for m in range(cfg.members)]


def _next(queue, procs) -> Optional[tuple]:
    """The next message (None: none within a second).  A child that died without a word (killed
    for memory) must not leave the parent waiting for ever."""
    try:
        return queue.get(timeout=1.0)
    except queue_mod.Empty:
        dead = [p for p in procs if not p.is_alive() and p.exitcode not in (0, None)]
        if dead:
            raise RuntimeError(f"an LSTM training process ended with exit code {dead[0].exitcode} "
                               "(killed for memory? train fewer members or lower max_origins)") from None
        return None


def _pack(res: MemberResult) -> tuple:
    def one(r: Optional[MemberRun]):
        if r is None:
            return None  # numpy, not tensors: torch would pass tensors as shared memory the exiting child owns
        state = {k: v.detach().numpy().copy() for k, v in r.net.state_dict().items()}
        return state, r.best_val, r.epochs, r.best_epoch, r.budget_fired
    return one(res.run), one(res.refit)


def _unpack(packed: tuple, cfg: LSTMConfig) -> MemberResult:
    def one(p) -> Optional[MemberRun]:
        if p is None:
            return None
        net = make_net(cfg)
        net.load_state_dict({k: torch_module().from_numpy(v) for k, v in p[0].items()})
        net.eval()
        return MemberRun(net, *p[1:])
    return MemberResult(one(packed[0]), one(packed[1]))

