"""Errors that say what to do next: one clear line, never a traceback.

Every error of ours has a `kind` the reconcile loop acts on, as Flux does:

- `ErrorKind.STALLED`: retrying the same input cannot help; only new input
  (a new commit, a fixed flag) can. The status shows a `Stalled` condition
  and the loop waits for a new commit.
- `ErrorKind.RETRY`: transient (git server or controller unreachable, an
  apply that failed and was reverted); the loop retries with backoff.

Raise `UserError` for anything the user can fix (kind STALLED), `UsageError`
for flags that contradict each other or are unsafe together, and
`SourceError` for git that could not be read or fetched (kind RETRY). The
CLI prints any `GitopsError`'s message and exits with its `exit_code`: 1, or
2 for a `UsageError` (like argparse's own usage errors).
"""

from __future__ import annotations

import enum

__all__ = ["ErrorKind", "GitopsError", "UserError", "UsageError", "SourceError"]


class ErrorKind(str, enum.Enum):
    STALLED = "stalled"  # only new input can help
    RETRY = "retry"  # transient: retry with backoff


class GitopsError(Exception):
    """A failure with a message fit to show as is, and what to do about it.

    `details` are further lines under the message (one located error each):
    each is printed, escaped, on a line of its own, so a newline inside one
    can never forge another.
    """

    kind: ErrorKind = ErrorKind.STALLED
    exit_code = 1

    def __init__(self, message: str, details: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.details = details


class UserError(GitopsError):
    """A failure the user can act on; its message is shown as is."""

    kind = ErrorKind.STALLED


class UsageError(UserError):
    """Flags that cannot be used as given; exits 2 like argparse's own usage errors."""

    exit_code = 2


class SourceError(GitopsError):
    """Git could not be read or fetched; the message says what and where.

    `reason` is the status condition's reason: the remote could not be
    reached or did not answer (refused, timed out, not git), or it answered
    without the watched branch.
    """

    kind = ErrorKind.RETRY

    def __init__(self, message: str, reason: str = "GitUnreachable") -> None:
        super().__init__(message)
        self.reason = reason
