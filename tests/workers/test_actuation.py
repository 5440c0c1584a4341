"""The live dry-run scaler (``workers.actuation.RedisDryRunScaler``) against the real Redis."""
from __future__ import annotations

from warmcast.config.deployments import Deployment, Profile
from workers.actuation import RedisDryRunScaler, live_scaler


def test_a_dry_run_deployment_gets_one_target_in_redis_that_every_worker_sees(redis_client, key_prefix):
    dep = Deployment(name="chat", min_replicas=2, profiles={"day": Profile(capacity_rpm=100)})
    one, other = (live_scaler(dep, redis_client, key_prefix) for _ in range(2))
    assert isinstance(one, RedisDryRunScaler) and one.current() == 2          # min_replicas until a target is set
    one.scale_to(5, "forecast peak")
    assert other.current() == 5 and redis_client.get(f"{key_prefix}:dryrun-replicas:chat") == b"5"
