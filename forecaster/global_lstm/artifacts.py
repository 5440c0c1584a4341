"""Where the fleet model's artifacts live: their own registry under the models directory
(``<models_dir>/.fleet``, one deployment, ``fleet``), so that no deployment name can collide with
the fleet's.  A module of names only: the trainer, the answer and the resolver all read it."""
from __future__ import annotations

from pathlib import Path

from forecaster.registry import Registry

FLEET = "fleet"          # the fleet registry's one deployment
FLEET_DIR = ".fleet"     # under the models directory
NO_CLIENTS = "total"     # the "method" of a deployment without clients: its own row, unreconciled


def fleet_registry(registry: Registry) -> Registry:
    return Registry(Path(registry.root) / FLEET_DIR)
