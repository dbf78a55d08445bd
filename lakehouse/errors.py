"""The one exception type the CLI turns into a clear one-line message (exit code 2)."""


class LakehouseError(Exception):
    """A user-facing error: bad input, a missing prerequisite, an impossible request."""
