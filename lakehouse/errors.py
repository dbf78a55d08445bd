"""The one exception type the CLI turns into a clear one-line message, and the CLI's exit codes."""

from enum import IntEnum


class LakehouseError(Exception):
    """A user-facing error: bad input, a missing prerequisite, an impossible request."""


class ExitCode(IntEnum):
    """What a ``lakehouse`` command's exit code tells its caller (docs/operations.md, "Exit codes")."""

    DONE = 0
    # What the command checks failed (an audit's unexplained difference, a stale stream, a service
    # down): a verdict on the data, the same when run again, so a scheduler does not retry it.
    CHECK_FAILED = 1
    # An argument refused or a fault met, with one `lakehouse: error: ...` line: a retry may pass.
    REFUSED = 2
    # Something unforeseen raised, its traceback printed (sysexits' EX_SOFTWARE): not Python's own 1,
    # which would read as a check's verdict and not be retried.
    CRASHED = 70
    INTERRUPTED = 130
