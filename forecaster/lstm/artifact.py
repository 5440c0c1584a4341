"""Artifact I/O: plain tensors plus JSON metadata for the registry (no pickles)."""
from __future__ import annotations

from dataclasses import asdict
from typing import Mapping

from forecaster.lstm.config import LSTMConfig
from forecaster.lstm.network import make_net

# 2: a quantile head and a calibration factor per level (P10..P99), band_scale keyed by level
#    (one number, or since issue 14 one per lead; both load)
ARTIFACT_FORMAT = 2
FEATURE_SET = "lstm-v3"  # bump when the inputs change: older artifacts are refused


def to_artifact(model) -> tuple[dict, dict]:
    """(tensors, metadata) of a fitted LSTMForecaster: flat name -> tensor dict and JSON-able metadata."""
    tensors = {}
    for i, net in enumerate(model.nets):
        for k, v in net.state_dict().items():
            tensors[f"m{i}.{k}"] = v.detach().clone().contiguous()
    meta = {
        "format": ARTIFACT_FORMAT, "feature_set": FEATURE_SET, "kind": "lstm",
        "config": {**asdict(model.cfg), "levels": list(model.cfg.levels)},
        "band_scale": dict(model.scale), "anchor": model.anchor, "members": len(model.nets), "training": model.meta,
    }
    return tensors, meta


def config_from_meta(meta: Mapping) -> LSTMConfig:
    """The configuration an artifact was trained with; refuses artifacts of another format."""
    if meta.get("kind") != "lstm":
        raise ValueError(f"artifact kind {meta.get('kind')!r} is not 'lstm'")
    if meta.get("format") != ARTIFACT_FORMAT or meta.get("feature_set") != FEATURE_SET:
        raise ValueError(f"artifact format {meta.get('format')}/{meta.get('feature_set')} is incompatible "
                         f"with this code ({ARTIFACT_FORMAT}/{FEATURE_SET}); retrain it")
    known = set(LSTMConfig.__dataclass_fields__)
    cfg_d = {k: v for k, v in dict(meta["config"]).items() if k in known}
    cfg_d["levels"] = tuple(float(q) for q in cfg_d["levels"])
    if "cal_lead_edges" in cfg_d:
        cfg_d["cal_lead_edges"] = tuple(int(e) for e in cfg_d["cal_lead_edges"])
    return LSTMConfig(**cfg_d)


def load_nets(cfg: LSTMConfig, tensors: Mapping, members: int) -> list:
    """The members' networks from flat tensors; raises on missing or mis-shaped weights."""
    nets = []
    for i in range(members):
        net = make_net(cfg)
        prefix = f"m{i}."
        net.load_state_dict({k[len(prefix):]: v for k, v in tensors.items() if k.startswith(prefix)}, strict=True)
        net.eval()
        nets.append(net)
    return nets
