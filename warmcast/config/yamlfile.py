"""Reading a user's YAML file: a missing file, bad YAML or a key given twice is an error naming the
file (and line), not a traceback or a silent choice."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from warmcast.errors import InputError, WarmcastError
from warmcast.text import shown


class DuplicateKey(yaml.YAMLError):
    """A mapping holds one key twice (PyYAML keeps the last value without a word: issue 41)."""


class _UniqueKeyLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses a key repeated in one mapping, naming both lines: the
    operator who wrote ``max_replicas`` twice meant one of them, and only they know which."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        first: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            try:
                line = first.setdefault(key, key_node.start_mark.line + 1)
            except TypeError:  # an unhashable key: SafeLoader's own error says so below
                continue
            if line != key_node.start_mark.line + 1:
                raise DuplicateKey(f"{key_node.start_mark.line + 1}: key {shown(key)} appears twice in one "
                                   f"mapping (first on line {line}); keep one of them")
        return super().construct_mapping(node, deep=deep)


def read_yaml(path: str | Path, missing: str, error: type[WarmcastError] = InputError) -> Any:
    """The document in ``path``. ``missing`` is the message when the file does not exist
    (say which setting names it); YAML syntax errors and repeated keys are raised as ``error``
    with the file."""
    p = Path(path)
    if not p.is_file():
        raise error(missing)
    try:
        return yaml.load(p.read_text(encoding="utf-8-sig"), Loader=_UniqueKeyLoader)  # noqa: S506 (a SafeLoader)
    except UnicodeDecodeError as err:  # a binary file, or text in another encoding
        raise error(f"{p}: not a UTF-8 text file (byte {err.start}: {err.reason}); save the YAML as UTF-8") from None
    except DuplicateKey as err:
        raise error(f"{p}:{err}") from None
    except yaml.YAMLError as err:
        raise error(f"{p}: not valid YAML: {err}") from None
