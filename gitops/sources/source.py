"""What the agent needs from where its specs come from: the `Source` protocol.

A source is one branch of one repository: its newest `Revision`, the file
tree of a revision (for the spec loader), and exports of a revision's files
for replicas' runtime_env `working_dir`. `gitops.sources.repos.GitSource`
reads git; `gitops.testing.MemorySource` holds commits in memory so the
agent loop runs without git. Must not: parse specs or talk to the controller.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Protocol

from gitops.sources.hashing import Tree

if TYPE_CHECKING:  # a value it holds; its module runs git, which a Revision never does
    from gitops.sources.verifying import Verification

__all__ = ["Revision", "Source"]


@dataclass(frozen=True)
class Revision:
    """One commit of the watched branch, as the agent reconciles it."""

    sha: str
    tree: str
    branch: str
    commit_time: float
    author_time: float
    author: str
    summary: str
    verification: Verification | None = None  # its signature's verdict, with --verify-commits
    prune_all: bool = False  # its message carries `gitops: prune-all` (gitops.reconcile.prune_guard)

    @property
    def unverified(self) -> bool:
        """Verification is on and this commit did not pass it: it must not be applied."""
        return self.verification is not None and not self.verification.ok

    @property
    def short(self) -> str:
        return self.sha[:7]


class Source(Protocol):
    """One branch of one repository. Its methods may block (run them in a thread)."""

    @property
    def location(self) -> str:
        """The repository as the user named it (path or URL), for status and logs."""
        ...

    @property
    def branch(self) -> str: ...

    @property
    def refs_dir(self) -> Path | None:
        """A directory whose changes mean the branch may have moved (watched), or None."""
        ...

    def newest(self) -> Revision:
        """The branch's newest commit (fetching first if remote); raises `SourceError`."""
        ...

    def revision(self, sha: str) -> Revision:
        """An earlier commit of the branch, by sha (to go back to it); raises `SourceError`."""
        ...

    def tree(self, revision: Revision) -> Tree:
        """The files of `revision`, read-only, for the spec loader."""
        ...

    def export(self, revision: Revision) -> Path:
        """The files of `revision` in a directory of their own, for replicas."""
        ...

    def prune_exports(self, in_use: Iterable[str | Path | None]) -> list[str]:
        """Remove exports not in `in_use`; returns what was removed."""
        ...
