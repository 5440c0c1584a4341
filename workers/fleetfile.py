"""The deployments file as a running worker sees it (issue 44): reloaded when it changes.

A process used to read the file once for its whole life, so a deployment added, removed or retuned
in the file waited for a restart of every worker.  :class:`FleetFile` looks at the file's size and
modification time at most every ``check_every_s`` seconds (a ``stat``, nothing more, on the hot
path of every task) and, when they moved, at its SHA-256 (a touch is no change).  A changed file is
validated first, with the loader `warmcast deployments check` uses
(:func:`warmup.planning.deployment_check.checked_deployments`); an invalid change keeps the running
deployments and says so: one warning per refused content (not one per check), the gauge
``warmcast_deployments_file_ok`` at 0 and the state document ``<prefix>:deployments-file:status``,
which names the error for an operator or the API.  The next valid content is taken and clears it.

The first load is the process's start-up load (:func:`warmcast.runtime.load_fleet`), as before: a
file invalid at start-up still stops the process with its error.
"""
from __future__ import annotations

import hashlib
import logging
import threading
import time
from pathlib import Path
from typing import Any, Callable

from warmcast.config.deployments import Deployment
from warmcast.state import StateStore
from workers import metrics

log = logging.getLogger("warmcast.workers.fleetfile")

CHECK_EVERY_S = 5.0
STATUS = ("deployments-file", "status")   # the state document's kind and name


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class FleetFile:
    """The running deployments, by name, and the file they came from (see the module's doc)."""

    def __init__(self, settings: Any, state: StateStore | None = None, check_every_s: float = CHECK_EVERY_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        from warmcast.runtime import load_fleet

        self.path = Path(settings.deployments_file) if settings.deployments_file else None
        self.state, self.check_every_s, self._clock = state, check_every_s, clock
        self._lock = threading.Lock()
        # stat and bytes before the load: a write racing the load is seen as a change at the next check
        self._sig: tuple[int, int] | None = self._stat()
        try:
            data = self.path.read_bytes() if self.path is not None else b""
        except OSError:
            data = b""   # load_fleet says what is missing
        self.file: Any = load_fleet(settings)   # the whole DeploymentsFile (node pools too)
        self._deps: dict[str, Deployment] = {d.name: d for d in self.file.deployments}
        self.sha, self.refused_sha, self.ok = _sha(data), "", True
        self._checked_at = clock()
        metrics.DEPLOYMENTS_FILE_OK.set(1)

    def current(self) -> dict[str, Deployment]:
        """The deployments to run now: the file's, re-read first if it is due a check and changed.
        The dict is replaced, never changed in place, so a caller may compare it by identity."""
        self.maybe_reload()
        return self._deps

    def maybe_reload(self) -> bool:
        """Check the file if ``check_every_s`` passed since the last check; True when a change was taken.
        One thread checks at a time; the others go on with the running deployments meanwhile."""
        if self.path is None or self._clock() - self._checked_at < self.check_every_s:
            return False
        if not self._lock.acquire(blocking=False):
            return False
        try:
            self._checked_at = self._clock()
            return self._check()
        finally:
            self._lock.release()

    def _stat(self) -> tuple[int, int] | None:
        try:
            st = self.path.stat() if self.path is not None else None
        except OSError:
            return None
        return (st.st_mtime_ns, st.st_size) if st is not None else None

    def _check(self) -> bool:
        sig = self._stat()
        if sig == self._sig:
            return False
        if sig is None:
            self._refuse("", f"{self.path} cannot be read (removed or moved?)")
            self._sig = None
            return False
        data = self.path.read_bytes()
        sha = _sha(data)
        if sha in (self.sha, self.refused_sha):   # touched, or the content already refused
            self._sig = sig
            if sha == self.sha and not self.ok:       # put back as it runs: nothing is refused any more
                self._take(self.file, sha)
            return False
        try:
            from warmup.planning.deployment_check import checked_deployments

            dfile = checked_deployments(self.path)
        except Exception as err:  # noqa: BLE001 - any refusal keeps the loop running on what it has
            self._sig = sig
            self._refuse(sha, str(err) or type(err).__name__)
            return False
        if self._stat() != sig:   # written again while it was read: look at it once more next check
            return False
        self._sig = sig
        self._take(dfile, sha)
        return True

    def _take(self, dfile: Any, sha: str) -> None:
        old, new = self._deps, {d.name: d for d in dfile.deployments}
        added, removed = sorted(set(new) - set(old)), sorted(set(old) - set(new))
        changed = sorted(n for n in set(new) & set(old) if new[n] != old[n])
        self.file, self._deps, self.sha, self.refused_sha, self.ok = dfile, new, sha, "", True
        metrics.DEPLOYMENTS_FILE_OK.set(1)
        metrics.DEPLOYMENTS_FILE_RELOADS.labels("applied").inc()
        log.warning("deployments file %s changed: %d deployments now (added %s, removed %s, changed %s)",
                    self.path, len(new), added or "none", removed or "none", changed or "none")
        self._status({"status": "ok", "deployments": len(new), "added": added, "removed": removed,
                      "changed": changed})

    def _refuse(self, sha: str, error: str) -> None:
        if sha and sha == self.refused_sha:
            return
        self.refused_sha, self.ok = sha, False
        metrics.DEPLOYMENTS_FILE_OK.set(0)
        metrics.DEPLOYMENTS_FILE_RELOADS.labels("refused").inc()
        log.warning("deployments file %s changed but is refused, the %d running deployments stay: %s "
                    "(check it with: warmcast deployments check %s)", self.path, len(self._deps), error, self.path)
        self._status({"status": "refused", "deployments": len(self._deps), "error": error,
                      "refused_sha256": sha})

    def _status(self, doc: dict[str, Any]) -> None:
        """The state document an operator or the API reads: what runs, and what was refused and why."""
        if self.state is None:
            return
        full = {"path": str(self.path), "sha256": self.sha, "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                **doc}
        try:
            self.state.put(*STATUS, full)
        except Exception as err:  # noqa: BLE001 - Redis away: the log line above already said it
            log.warning("could not store the deployments file's status: %r", err)
