"""Text shortened for one-line output: status lines, progress descriptions, stored reasons, values
echoed in errors."""
from __future__ import annotations

ELLIPSIS = "…"


def clip(text: str, width: int) -> str:
    """``text`` if it fits in ``width`` characters, else cut at the last word boundary that leaves
    room for an ellipsis, and the ellipsis added: a reader sees whole words and that some are missing
    (a plain ``text[:width]`` ended reasons mid-word, issue 32).  A first word longer than the width
    is cut where it must be.  The result is never longer than ``width``."""
    if width < 1:
        raise ValueError(f"width {width}: give at least 1 character")
    if len(text) <= width:
        return text
    room = text[:width - len(ELLIPSIS)]
    # a space right after the cut means the cut already falls between words
    words = room if text[len(room)].isspace() else room.rpartition(" ")[0] or room
    return words.rstrip(" ,;:-(") + ELLIPSIS


SHOWN_CHARS = 60  # of a value echoed back in an error message


def shown(value: object, width: int = SHOWN_CHARS) -> str:
    """``repr(value)`` for an error message, cut to ``width`` characters with the full length said:
    an error echoes what it refuses, but never a 10,000-character name whole (issue 41)."""
    text = repr(value)
    if len(text) <= width:
        return text
    size = f" ({len(value):,} characters)" if isinstance(value, (str, bytes)) else ""
    return text[:max(1, width - 1)] + ELLIPSIS + size
