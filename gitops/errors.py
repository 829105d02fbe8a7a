"""Errors meant for the user: one clear line, never a traceback.

Raise `UserError` (or a subclass) for anything the user can fix; the CLI
prints its message and exits 1.
"""

from __future__ import annotations

__all__ = ["UserError"]


class UserError(Exception):
    """A failure the user can act on; its message is shown as is."""
