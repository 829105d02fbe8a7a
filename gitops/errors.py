"""Errors meant for the user: one clear line, never a traceback.

Raise `UserError` (or a subclass) for anything the user can fix; the CLI
prints its message and exits with its `exit_code`: 1, or 2 for a
`UsageError` (flags that contradict each other or are unsafe together).
"""

from __future__ import annotations

__all__ = ["UserError", "UsageError"]


class UserError(Exception):
    """A failure the user can act on; its message is shown as is."""

    exit_code = 1


class UsageError(UserError):
    """Flags that cannot be used as given; exits 2 like argparse's own usage errors."""

    exit_code = 2
