"""Error types shared by every package.

Each names what to fix; the CLI prints them without a traceback and the API maps
them to HTTP errors (only the API layer knows about HTTP).
"""


class WarmcastError(Exception):
    """Base of every error warmcast raises on purpose."""


class InputError(WarmcastError):
    """Bad user input: a file, a row, a parameter. The message names it."""


class StateError(InputError):
    """A well-formed request the stored state cannot answer yet (no records in the window, a mode not
    on): the message says what state is missing and how to get it.  The CLI reports it as any bad
    input; the API answers 409, not a validation error (issue 46)."""


class NotFoundError(WarmcastError):
    """A named thing (deployment, model, job) does not exist."""
