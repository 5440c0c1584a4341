"""Error types shared by every package.

Each names what to fix; the CLI prints them without a traceback and the API maps
them to HTTP errors (only the API layer knows about HTTP).
"""


class WarmcastError(Exception):
    """Base of every error warmcast raises on purpose."""


class InputError(WarmcastError):
    """Bad user input: a file, a row, a parameter. The message names it."""


class NotFoundError(WarmcastError):
    """A named thing (deployment, model, job) does not exist."""
