"""Reading a user's YAML file: a missing file or bad YAML is an error naming the file, not a traceback."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from warmcast.errors import InputError, WarmcastError


def read_yaml(path: str | Path, missing: str, error: type[WarmcastError] = InputError) -> Any:
    """The document in ``path``. ``missing`` is the message when the file does not exist
    (say which setting names it); YAML syntax errors are raised as ``error`` with the file."""
    p = Path(path)
    if not p.is_file():
        raise error(missing)
    try:
        return yaml.safe_load(p.read_text(encoding="utf-8-sig"))
    except UnicodeDecodeError as err:  # a binary file, or text in another encoding
        raise error(f"{p}: not a UTF-8 text file (byte {err.start}: {err.reason}); save the YAML as UTF-8") from None
    except yaml.YAMLError as err:
        raise error(f"{p}: not valid YAML: {err}") from None
