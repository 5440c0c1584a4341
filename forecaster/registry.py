"""Versioned model artifacts with champion/challenger promotion.

Layout (under ``Settings.models_dir``, by default ``<state dir>/models``)::

    <root>/<deployment>/registry.json      {"champion": "v0003", "history": [...], "versions": {...}}
    <root>/<deployment>/v0003/weights.pt   tensors only (torch.save of a name -> tensor dict)
    <root>/<deployment>/v0003/meta.json    training range, features, config, metrics,
                                           library versions, sha256 of weights.pt

* Weights are plain tensors loaded with ``torch.load(weights_only=True)``; the
  metadata is JSON.  Nothing is pickled.
* Every write goes to a temporary name in the same folder and is moved into place
  with ``os.replace`` (a version folder, then ``registry.json``): a crash leaves
  the old state or the new one, never half of either.
* :meth:`Registry.load` checks the checksum, the metadata and every tensor shape;
  anything wrong raises :class:`ArtifactError` naming the file and the problem.
* :meth:`Registry.consider` promotes a challenger only if it beats the current
  champion *and* the best baseline on the same recent validation window; a
  challenger that does not load is refused and the champion stays.
* :meth:`Registry.champion_model` loads the champion; if its artifact is corrupt it
  walks back through earlier champions and says so.  Which model then serves a
  deployment (its champion, the shipped default, a baseline) is
  :func:`forecaster.resolver.resolve`'s answer.
* The root is the user's state directory (``Settings.models_dir``); the shipped default
  model is read-only package data under :data:`SHIPPED_DIR`.
"""
from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import platform
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from warmcast.config.deployments import NAME_RE
from warmcast.errors import InputError, NotFoundError, WarmcastError

WEIGHTS = "weights.pt"
META = "meta.json"
INDEX = "registry.json"
DEFAULT_DEPLOYMENT = "default"
_VERSION_RE = re.compile(r"\Av(\d{4,})\Z")
# Names no deployment may train into: the shipped fallback model lives under "default".
RESERVED_NAMES = frozenset({DEFAULT_DEPLOYMENT})
# The shipped default model: read-only package data, never written by train or retrain
# (those write under the user's state directory, Settings.models_dir).
SHIPPED_DIR = Path(__file__).resolve().parent / "shipped"


class ArtifactError(WarmcastError):
    """A model artifact is missing, corrupted or incompatible with this code."""


def _lstm_class() -> type:
    from forecaster.lstm import LSTMForecaster

    return LSTMForecaster


# The model classes an artifact may be loaded as, by the "kind" its metadata records; each has
# ``from_artifact(tensors, meta)``. Looked up lazily: the LSTM's module imports torch.
def _global_class() -> type:
    from forecaster.global_lstm import GlobalLSTM

    return GlobalLSTM


_KINDS: dict[str, Callable[[], type]] = {"lstm": _lstm_class, "lstm_global": _global_class}


def register_artifact_kind(kind: str, cls: type) -> None:
    """Let the registry load artifacts of ``kind`` as ``cls`` (a model on forecaster.base's
    protocol with ``to_artifact()`` and a ``from_artifact`` classmethod)."""
    _KINDS[kind] = lambda: cls


def library_versions() -> dict[str, str]:
    import numpy
    import pandas
    import torch

    return {"torch": torch.__version__, "numpy": numpy.__version__, "pandas": pandas.__version__,
            "python": platform.python_version()}


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def atomic_write_json(path: Path, data) -> None:
    """Write JSON to a temporary file beside ``path``, fsync it, then os.replace."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, 0o644)
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, indent=2, sort_keys=True)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


@dataclass
class Decision:
    promoted: bool
    reason: str
    challenger: str
    champion_before: str | None


class Registry:
    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    # ----------------------------------------------------------- paths/index
    def _dir(self, deployment: str) -> Path:
        if not NAME_RE.fullmatch(deployment):
            raise ArtifactError(f"bad deployment name {deployment!r} for the model registry")
        return self.root / deployment

    def _writable_dir(self, deployment: str, shipped: bool) -> Path:
        if deployment in RESERVED_NAMES and not shipped:
            raise InputError(f"deployment name {deployment!r} is reserved for the shipped fallback model "
                             f"(forecaster/shipped/{deployment}); rename the deployment to train a model for it")
        return self._dir(deployment)

    def index(self, deployment: str) -> dict:
        p = self._dir(deployment) / INDEX
        if not p.exists():
            return {"champion": None, "history": [], "versions": {}}
        try:
            data = json.loads(p.read_text())
        except (OSError, json.JSONDecodeError) as err:
            raise ArtifactError(f"{p}: unreadable registry index ({err})") from None
        data.setdefault("history", [])
        data.setdefault("versions", {})
        return data

    def versions(self, deployment: str) -> list[str]:
        d = self._dir(deployment)
        if not d.is_dir():
            return []
        return sorted(p.name for p in d.iterdir() if p.is_dir() and _VERSION_RE.match(p.name))

    def champion(self, deployment: str) -> str | None:
        return self.index(deployment).get("champion")

    def _next_version(self, deployment: str) -> str:
        nums = [int(_VERSION_RE.match(v).group(1)) for v in self.versions(deployment)]
        return f"v{(max(nums) + 1 if nums else 1):04d}"

    # ----------------------------------------------------------------- save
    def save(self, deployment: str, model, metrics: dict | None = None, extra: dict | None = None,
             shipped: bool = False) -> str:
        """Write a new version (not promoted) and return its name; ``shipped`` only for the
        fallback model that ships with warmcast (its name is reserved)."""
        import torch

        d = self._writable_dir(deployment, shipped)
        tensors, meta = model.to_artifact()
        d.mkdir(parents=True, exist_ok=True)
        version = self._next_version(deployment)
        tmp = Path(tempfile.mkdtemp(prefix=f".{version}.", dir=d))
        try:
            torch.save(tensors, tmp / WEIGHTS)
            meta = {
                **meta,
                "deployment": deployment,
                "version": version,
                "created": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S"),
                "libraries": library_versions(),
                "metrics": metrics or {},
                "weights_sha256": _sha256(tmp / WEIGHTS),
                **(extra or {}),
            }
            (tmp / META).write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
            for f in (WEIGHTS, META):
                with open(tmp / f, "rb") as fh:
                    os.fsync(fh.fileno())
            os.chmod(tmp, 0o755)  # mkdtemp makes it private
            os.replace(tmp, d / version)  # atomic: the version folder appears whole
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        idx = self.index(deployment)
        idx["versions"][version] = {"created": meta["created"], "metrics": metrics or {}}
        atomic_write_json(d / INDEX, idx)
        model.version = f"{deployment}/{version}"
        return version

    # ----------------------------------------------------------------- load
    def read_meta(self, deployment: str, version: str) -> dict:
        p = self._dir(deployment) / version / META
        if not p.is_file():
            raise ArtifactError(f"{p} is missing: no model {deployment}/{version}")
        try:
            meta = json.loads(p.read_text())
        except (OSError, json.JSONDecodeError, UnicodeDecodeError) as err:
            raise ArtifactError(f"{p}: corrupted metadata ({err})") from None
        if not isinstance(meta, dict):
            raise ArtifactError(f"{p}: metadata is not a JSON object")
        return meta

    def load(self, deployment: str, version: str | None = None):
        """Load one version (default: the champion); ArtifactError if anything is wrong."""
        import torch

        version = version or self.champion(deployment)
        if version is None:
            raise NotFoundError(f"no champion model for deployment {deployment!r} in {self.root}")
        d = self._dir(deployment) / version
        meta = self.read_meta(deployment, version)
        w = d / WEIGHTS
        if not w.is_file():
            raise ArtifactError(f"{w} is missing")
        want = meta.get("weights_sha256")
        if want and _sha256(w) != want:
            raise ArtifactError(f"{w}: checksum mismatch (file corrupted or replaced); refusing to load it")
        try:
            tensors = torch.load(w, map_location="cpu", weights_only=True)
        except Exception as err:  # noqa: BLE001 - any unpickling problem is a corrupt artifact
            raise ArtifactError(f"{w}: cannot be read as plain tensors ({type(err).__name__}: {err})") from None
        if not isinstance(tensors, dict) or not all(isinstance(v, torch.Tensor) for v in tensors.values()):
            raise ArtifactError(f"{w}: expected a mapping of names to tensors")
        kind = meta.get("kind", "lstm")
        if kind not in _KINDS:
            raise ArtifactError(f"{d}: unknown model kind {kind!r} (known: {sorted(_KINDS)})")
        try:
            model = _KINDS[kind]().from_artifact(tensors, meta)
        except (ValueError, KeyError, RuntimeError, TypeError) as err:
            raise ArtifactError(f"{d}: incompatible artifact ({err})") from None
        model.version = f"{deployment}/{version}"
        return model

    # -------------------------------------------------------------- promote
    def set_champion(self, deployment: str, version: str, reason: str = "", shipped: bool = False) -> None:
        self._writable_dir(deployment, shipped)
        self.load(deployment, version)  # refuse what does not load
        idx = self.index(deployment)
        old = idx.get("champion")
        if old and old != version:
            idx["history"] = ([old] + [v for v in idx["history"] if v != old])[:20]
        idx["champion"] = version
        idx.setdefault("versions", {}).setdefault(version, {})["promoted"] = (
            _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S"))
        if reason:
            idx["versions"][version]["promotion_reason"] = reason
        atomic_write_json(self._dir(deployment) / INDEX, idx)

    def consider(self, deployment: str, challenger: str, challenger_mae: float,
                 champion_mae: float | None, best_baseline_mae: float | None,
                 best_baseline: str = "best baseline") -> Decision:
        """Promote ``challenger`` iff it beats the champion and the best baseline on the
        same recent validation window (MAE of P50) and its artifact loads."""
        before = self.champion(deployment)
        if best_baseline_mae is not None and not challenger_mae < best_baseline_mae:
            return Decision(False, f"challenger MAE {challenger_mae:.2f} does not beat {best_baseline} "
                                   f"({best_baseline_mae:.2f})", challenger, before)
        if before is not None and champion_mae is not None and not challenger_mae < champion_mae:
            return Decision(False, f"challenger MAE {challenger_mae:.2f} does not beat champion {before} "
                                   f"({champion_mae:.2f})", challenger, before)
        try:
            parts = [f"champion {before} {champion_mae:.2f}" if before and champion_mae is not None
                     else "no champion yet"]
            if best_baseline_mae is not None:
                parts.append(f"{best_baseline} {best_baseline_mae:.2f}")
            reason = f"MAE {challenger_mae:.2f} beats " + " and ".join(parts)
            self.set_champion(deployment, challenger, reason)
        except ArtifactError as err:
            return Decision(False, f"challenger refused: {err}", challenger, before)
        return Decision(True, reason, challenger, before)

    def record_decision(self, deployment: str, version: str, promoted: bool, reason: str) -> None:
        """Keep a training's promotion decision beside its validation table, so that whatever
        serves the deployment afterwards can say why (see :meth:`last_trained`)."""
        idx = self.index(deployment)
        idx["versions"].setdefault(version, {})["decision"] = {"promoted": bool(promoted), "reason": reason}
        atomic_write_json(self._dir(deployment) / INDEX, idx)

    def last_trained(self, deployment: str) -> dict | None:
        """The newest trained version's record: ``{"version", "validation": {model: {"mae", ...}},
        "decision": {"promoted", "reason"} or None}``; None when nothing was trained."""
        versions = self.index(deployment).get("versions") or {}
        trained = sorted((v for v in versions if _VERSION_RE.match(v)), key=lambda v: int(v[1:]))
        if not trained:
            return None
        rec = versions[trained[-1]] or {}
        return {"version": trained[-1], "validation": (rec.get("metrics") or {}).get("validation") or {},
                "decision": rec.get("decision")}

    # -------------------------------------------------------------- serving
    def champion_model(self, deployment: str):
        """(model or None, problems): the champion, else the last earlier champion that loads;
        ``problems`` says what was skipped and why (see forecaster.resolver for the rest)."""
        problems: list[str] = []
        try:
            idx = self.index(deployment)
        except ArtifactError as err:
            return None, [str(err)]
        for v in [idx.get("champion")] + list(idx.get("history", [])):
            if not v:
                continue
            try:
                return self.load(deployment, v), problems
            except ArtifactError as err:
                problems.append(str(err))
        return None, problems
