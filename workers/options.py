"""Loop settings of the workers (intervals, locks, fault injection), from ``WARMCAST_WORKERS_*``.

They live beside :mod:`warmcast.config.settings` (which the lead owns and which forbids
unknown keys) so the loop can be tuned without touching the shared settings.
Every interval is in seconds; tests shrink them to run a minute's loop in seconds.
"""
from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict



class WorkerOptions(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="WARMCAST_WORKERS_", extra="ignore")

    scrape_every_s: float = Field(10.0, gt=0, description="scrape signals (issue: 5-15 s)")
    ingest_every_s: float = Field(60.0, gt=0)
    forecast_every_s: float = Field(60.0, gt=0)
    plan_every_s: float = Field(60.0, gt=0, description="the one tick: scale, sleep tier, profile switch and "
                                "warmups decided together (a scrape starts an urgent warmup between ticks)")
    expire_every_s: float = Field(3600.0, gt=0)
    alert_check_every_s: float = Field(30.0, gt=0, description="re-decide open alert episodes whose tier window "
                                       "passed (escalation without Alertmanager's repeats)")
    retrain_hour_utc: int = Field(3, ge=0, le=23, description="nightly retrain + promote at this hour")
    beat_loop_s: float = Field(1.0, gt=0, description="most seconds beat sleeps between checks")
    lease_s: float = Field(10.0, gt=0, description="a lock is a lease renewed every third of this while its "
                           "holder works: a dead holder's lapses after this (keep it under plan_every_s)")
    visibility_timeout_s: float = Field(300.0, gt=0,
                                        description="an unacknowledged task is redelivered after this")
    signals_max_age_s: float = Field(30.0, gt=0, description="older signals are scraped again before deciding")
    max_retries: int = Field(3, ge=0)
    metrics_port: int = Field(0, ge=0, le=65535, description="worker's Prometheus port (0: none)")
    queue: str = Field("warmcast", min_length=1)
    shards: int = Field(0, ge=0, le=4096, description="0: the fan-out sends one task per deployment and kind (the "
                        "default until bench/scale.py shows otherwise); N: one task per shard and kind, each "
                        "running its deployments' steps one after another (workers/shards.py)")
    history_cache_deployments: int = Field(2000, ge=0, description="deployments whose history a worker process "
                                           "keeps in memory for the forecast step (warmcast/history.py: about 0.1 "
                                           "MB each per stored signal; the least recently read go first)")
    simulate: bool = Field(False, description="drive a simulated fleet (SimFleet) instead of real instances")
    replayed_fleet: bool = Field(False, description="read the fleet a replay driver publishes in Redis each "
                                 "minute (StoredFleet; the shadow replay through Celery, forecast-only)")
    # Fault injection, for the crash tests only: sleep at these points of a planning run.
    fault_pause_after_decide_s: float = Field(0.0, ge=0)
    fault_pause_after_apply_s: float = Field(0.0, ge=0)
    fault_beat_stall: bool = Field(False, description="bench/chaos.py only: beat stalls a tick for the seconds "
                                   "left in Redis under <prefix>:fault:beat-stall")


def load_options(**overrides) -> WorkerOptions:
    return WorkerOptions(**overrides)


def replay_options() -> WorkerOptions:
    """The options of an offline replay (``replay``, the shadow comparison): a simulated fleet, the
    signals it is handed taken as fresh, and a 600 s lease.  A replay runs the live tick, leases
    included, under a key prefix no other run shares, so its lease only has to outlast a stall: with
    the live 10 s, a README replay on one core shared with the rest of the test suite (load 17) lost
    its lease between two renewals and ended with an error."""
    return WorkerOptions(simulate=True, signals_max_age_s=1e9, lease_s=600.0)
