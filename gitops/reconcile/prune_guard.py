"""The prune guard: a commit that would delete everything that serves is refused unless it says so.

An empty spec tree (every file deleted, the spec directory moved, a bad
merge) would otherwise stop every endpoint and backend at once. The agent
applies such a commit only when its message carries the trailer
`gitops: prune-all` (a line of its own, case-insensitive, as git trailers
are written at the end of the message); otherwise the commit fails
validation (`ValidationFailed`, history `invalid`), nothing is changed and
the last applied commit keeps serving. A commit that deletes some of
everything, or an empty tree on an empty cluster, is never refused.

Pure: the commit message and two states in, a refusal out.
"""

from __future__ import annotations

import re

from vocabulary.spec.state import ServingState

__all__ = ["PRUNE_ALL_TRAILER", "says_prune_all", "prune_refusal"]

PRUNE_ALL_TRAILER = "gitops: prune-all"
_TRAILER = re.compile(r"^\s*gitops\s*:\s*prune-all\s*$", re.IGNORECASE | re.MULTILINE)


def says_prune_all(message: str) -> bool:
    """Whether a commit message carries the `gitops: prune-all` trailer."""
    return _TRAILER.search(message) is not None


def prune_refusal(desired: ServingState, actual: ServingState, prune_all: bool) -> str | None:
    """Why applying `desired` over `actual` is refused, or None: it would delete
    every endpoint and backend that runs, and the commit does not say `gitops: prune-all`."""
    if prune_all or desired.backends or desired.endpoints:
        return None
    if not actual.backends and not actual.endpoints:
        return None
    return (
        f"the commit deletes every endpoint ({len(actual.endpoints)}) and backend ({len(actual.backends)}) "
        f"that runs; nothing was changed. If that is meant, add the trailer '{PRUNE_ALL_TRAILER}' "
        "to the commit message"
    )
