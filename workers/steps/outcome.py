"""The base of every step's typed outcome."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

# Fields marked with this metadata stay out of the task result (Celery logs results; a full
# signals or forecast document there is noise).
DOC_ONLY = {"in_result": False}


@dataclass(frozen=True)
class Outcome:
    """What one step did for one deployment."""

    deployment: str

    def as_dict(self) -> dict[str, Any]:
        """The JSON-able task result: every field but the documents kept for in-process callers."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                if f.metadata.get("in_result", True)}
