"""Read-only file trees for the spec loader: a commit, a directory, or memory.

Every tree answers the same few questions with repository-relative,
'/'-separated paths: which files lie under a path, a file's bytes, whether a
path exists, and the git object hash of a path (blob or tree). Hashes are
what make loading cacheable and versions reproducible.

- `CommitTree` reads blobs from a commit with gitpython, never from the
  working directory, and reports git's own hashes.
- `DirectoryTree` reads a plain directory and computes git-compatible
  hashes in Python (`gitops.sources.hashing`). They equal the commit's
  hashes for a clean checkout; `.git` and `__pycache__` directories are
  skipped, but `.gitignore` is not consulted, so ignored files in the
  directory do change them.
- `MemoryTree` (defined in `gitops.sources.hashing`, which needs no git)
  holds files and symbolic links in dicts, for tests and tools.

Symbolic links are followed inside the tree only (`resolve_inside`, in
`gitops.sources.hashing`): a link leading outside reads as missing.

This module never imports user code and never writes.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Hashable, Iterator

import git
import gitdb.exc

from gitops.errors import UserError
from gitops.sources.hashing import (
    MODE_DIR,
    MODE_EXEC,
    MODE_FILE,
    MODE_LINK,
    HashingTree,
    MemoryTree,
    Tree,
    clean,
    read_inside,
    resolve_inside,
)

__all__ = [
    "Tree",
    "CommitTree",
    "DirectoryTree",
    "MemoryTree",
    "resolve_revision",
    "tree_sha",
    "find_toplevel",
]

_SKIPPED_DIRS = frozenset({".git", "__pycache__"})
_GIT_LINK_MODE = 0o120000


# --- a commit ------------------------------------------------------------------


class CommitTree:
    """The tree of one commit, read through gitpython."""

    def __init__(self, repo: str | Path | git.Repo, rev: str = "HEAD") -> None:
        self.repo = repo if isinstance(repo, git.Repo) else _open_repo(repo)
        self._commit = _commit(self.repo, rev)
        self.sha = self._commit.hexsha
        self._root: git.Tree | None = None  # read on first use: a cached load never needs it
        self._objects: dict[str, git.Tree | git.Blob | None] = {}
        # Directory path -> its entries by name: gitpython finds a name in a
        # tree by a linear scan, which over a directory of n files is n^2.
        self._entries: dict[str, dict[str, git.Tree | git.Blob]] = {}

    @property
    def identity(self) -> Hashable:
        return (self.repo.git_dir, self.sha)

    def _object(self, path: str) -> git.Tree | git.Blob | None:
        if path in self._objects:  # the common case: a clean path asked before
            return self._objects[path]
        path = clean(path)
        if not path:
            if self._root is None:
                self._root = self._commit.tree
            return self._root
        if path not in self._objects:
            # Walk from the memoised parent: gitpython re-parses a tree object
            # on every lookup through it, and a commit never changes.
            parent, _, name = path.rpartition("/")
            self._objects[path] = self._entries_of(parent).get(name)
        return self._objects[path]

    def _entries_of(self, path: str) -> dict[str, git.Tree | git.Blob]:
        """The trees and blobs directly in directory `path` ({} if it is none)."""
        if path not in self._entries:
            container = self._object(path)
            items = container if isinstance(container, git.Tree) else ()
            self._entries[path] = {item.name: item for item in items if isinstance(item, (git.Tree, git.Blob))}
        return self._entries[path]

    def files(self, path: str) -> list[str]:
        found = self._object(path)
        if isinstance(found, git.Blob):
            return [str(found.path)]
        if found is None:
            return []
        return sorted(self._walk(clean(path)))

    def _walk(self, path: str) -> Iterator[str]:
        """Every blob under the directory `path`, through the entry index."""
        for name, item in self._entries_of(path).items():
            child = f"{path}/{name}" if path else name
            if isinstance(item, git.Tree):
                yield from self._walk(child)
            else:
                yield child

    def read(self, path: str) -> bytes:
        return read_inside(self, path, self._blob_data)

    def _blob_data(self, path: str) -> bytes:
        found = self._object(path)
        if not isinstance(found, git.Blob):
            raise KeyError(path)
        return found.data_stream.read()

    def size(self, path: str) -> int:
        found = self._followed(path)
        if not isinstance(found, git.Blob):
            raise KeyError(path)
        return int(found.size)

    def sizes(self, paths: list[str]) -> dict[str, int]:
        blobs = self._blobs(paths)
        found = _cat_file(self.repo, "--batch-check", {blob.hexsha for blob in blobs.values()})
        return {path: found[blob.hexsha][0] for path, blob in blobs.items()}

    def read_files(self, paths: list[str]) -> dict[str, bytes]:
        blobs = self._blobs(paths)
        found = _cat_file(self.repo, "--batch", {blob.hexsha for blob in blobs.values()})
        return {path: found[blob.hexsha][1] for path, blob in blobs.items()}

    def _blobs(self, paths: list[str]) -> dict[str, git.Blob]:
        """The blob each path leads to (links followed inside the tree); KeyError for a non-file."""
        blobs: dict[str, git.Blob] = {}
        for path in paths:
            found = self._followed(path)
            if not isinstance(found, git.Blob):
                raise KeyError(path)
            blobs[path] = found
        return blobs

    def link_target(self, path: str) -> str | None:
        found = self._object(path)
        if not isinstance(found, git.Blob) or found.mode != _GIT_LINK_MODE:
            return None
        return found.data_stream.read().decode("utf-8", "surrogateescape")

    def exists(self, path: str) -> bool:
        return self._followed(path) is not None

    def is_dir(self, path: str) -> bool:
        return isinstance(self._followed(path), git.Tree)

    def children(self, path: str) -> list[str]:
        found = self._followed(path)
        return sorted(item.name for item in found) if isinstance(found, git.Tree) else []

    def _followed(self, path: str) -> git.Tree | git.Blob | None:
        resolved = resolve_inside(self, path)
        return None if resolved is None else self._object(resolved)

    def hash(self, path: str) -> str | None:
        found = self._object(path)
        return None if found is None else found.hexsha


def _cat_file(repo: git.Repo, mode: str, shas: set[str]) -> dict[str, tuple[int, bytes]]:
    """sha -> (size, content) of blobs, from one `git cat-file --batch[-check]`
    (content is b"" with --batch-check): one process, not a round trip each."""
    if not shas:
        return {}
    done = subprocess.run(
        ["git", "--git-dir", str(repo.git_dir), "cat-file", mode],
        input="".join(f"{sha}\n" for sha in shas).encode(), capture_output=True, check=False,
    )
    if done.returncode != 0:
        raise OSError(f"git cat-file: {done.stderr.decode(errors='replace').strip()}")
    found: dict[str, tuple[int, bytes]] = {}
    out, at = done.stdout, 0
    while at < len(out):
        end = out.index(b"\n", at)
        sha, kind, size = (out[at:end].decode().split(" ") + ["", ""])[:3]
        if kind != "blob":
            raise KeyError(sha)
        at = end + 1
        if mode == "--batch":
            found[sha] = (int(size), out[at : at + int(size)])
            at += int(size) + 1
        else:
            found[sha] = (int(size), b"")
    return found


def _open_repo(path: str | Path) -> git.Repo:
    try:
        return git.Repo(path, search_parent_directories=True)
    except git.NoSuchPathError:
        raise UserError(f"repository {path} does not exist") from None
    except git.InvalidGitRepositoryError:
        raise UserError(f"{path} is not inside a git repository") from None


def resolve_revision(repo: str | Path | git.Repo, rev: str) -> str:
    """The full commit sha `rev` names in `repo`; UserError if it names none."""
    return _commit(repo if isinstance(repo, git.Repo) else _open_repo(repo), rev).hexsha


def _commit(opened: git.Repo, rev: str) -> git.Commit:
    """The one resolver of a revision a user typed (`plan --from/--to`, `validate --rev`).

    As `git checkout` does, a branch name with no local branch is the
    remote-tracking branch of that name when exactly one remote has one
    (`env/dev` -> `origin/env/dev`, the ordinary clone's case); when several
    do, the error names them (`did you mean origin/env/dev?`)."""
    try:
        return opened.commit(rev)
    except (gitdb.exc.ODBError, ValueError, git.GitError):
        pass
    tracking = _remote_branches(opened, rev)
    if len(tracking) == 1:
        return opened.commit(tracking[0])
    hint = f"; did you mean {' or '.join(tracking)}?" if tracking else ""
    raise UserError(f"revision '{rev}' not found in {opened.working_dir or opened.git_dir}{hint}") from None


def _remote_branches(opened: git.Repo, name: str) -> list[str]:
    """`REMOTE/name` for each remote with a remote-tracking branch `name`."""
    if not name or name.startswith(("-", "/")) or name == "HEAD":
        return []
    found = []
    for remote in sorted(remote.name for remote in opened.remotes):
        ref = f"refs/remotes/{remote}/{name}"
        sha = opened.git.rev_parse("--verify", "--quiet", f"{ref}^{{commit}}", with_exceptions=False)
        if sha:
            found.append(f"{remote}/{name}")
    return found


def tree_sha(repo: str | Path | git.Repo, rev: str, path: str) -> str | None:
    """The git hash of `path` at `rev` (None if absent): equal hashes, equal contents."""
    return CommitTree(repo, rev).hash(path)


def find_toplevel(path: str | Path) -> Path | None:
    """The working-tree top level of the git repository containing `path`, if any."""
    try:
        found = git.Repo(path, search_parent_directories=True).working_tree_dir
    except (git.NoSuchPathError, git.InvalidGitRepositoryError):
        return None
    return None if found is None else Path(found)


# --- a directory -------------------------------------------------------------------


class DirectoryTree(HashingTree):
    """A plain directory on disk (the working tree for `gitops validate PATH`)."""

    def __init__(self, root: str | Path) -> None:
        super().__init__()
        self.root = Path(root)

    def _path(self, path: str) -> Path:
        return self.root / clean(path) if clean(path) else self.root

    def entries(self, path: str) -> Iterator[tuple[str, str]]:
        for child in self._path(path).iterdir():
            if child.is_symlink():
                yield child.name, MODE_LINK
            elif child.is_dir():
                if child.name not in _SKIPPED_DIRS:
                    yield child.name, MODE_DIR
            elif child.is_file():
                yield child.name, MODE_EXEC if os.access(child, os.X_OK) else MODE_FILE

    def blob_bytes(self, path: str, mode: str) -> bytes:
        # git stores a symlink as a blob holding its target.
        target = self._path(path)
        if target.is_symlink():
            return os.readlink(target).encode("utf-8", "surrogateescape")
        return target.read_bytes()

    def read(self, path: str) -> bytes:
        return read_inside(self, path, lambda inside: self._file(inside).read_bytes())

    def size(self, path: str) -> int:
        resolved = resolve_inside(self, path)
        if resolved is None:
            raise KeyError(path)
        return self._file(resolved).stat().st_size

    def _file(self, path: str) -> Path:
        """A regular file of the tree, never through a link (links are resolved before)."""
        target = self._path(path)
        if target.is_symlink() or not target.is_file():
            raise KeyError(path)
        return target

    def link_target(self, path: str) -> str | None:
        target = self._path(path)
        return os.readlink(target) if clean(path) and target.is_symlink() else None

    def here(self, path: str) -> bool:
        parts = clean(path).split("/")
        return os.path.lexists(self._path(path)) and not _SKIPPED_DIRS.intersection(parts)

    def dir_here(self, path: str) -> bool:
        return self._path(path).is_dir() and not self._path(path).is_symlink()
