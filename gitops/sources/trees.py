"""Read-only file trees for the spec loader: a commit, a directory, or memory.

Every tree answers the same few questions with repository-relative,
'/'-separated paths: which files lie under a path, a file's bytes, whether a
path exists, and the git object hash of a path (blob or tree). Hashes are
what make loading cacheable and versions reproducible.

- `CommitTree` reads blobs from a commit with gitpython, never from the
  working directory, and reports git's own hashes.
- `DirectoryTree` reads a plain directory and computes git-compatible
  hashes in Python (blob: sha1 of "blob LEN\\0" + bytes; tree: git's tree
  object format and entry order). They equal the commit's hashes for a clean
  checkout; `.git` and `__pycache__` directories are skipped, but
  `.gitignore` is not consulted, so ignored files in the directory do change
  them.
- `MemoryTree` holds files in a dict, for tests and tools.

This module never imports user code and never writes.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Hashable, Iterator, Mapping, Protocol

import git
import gitdb.exc

from gitops.errors import UserError

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
_EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"
_MODE_FILE, _MODE_EXEC, _MODE_LINK, _MODE_DIR = "100644", "100755", "120000", "40000"


class Tree(Protocol):
    def files(self, path: str) -> list[str]:
        """Every file under `path` (recursive), sorted; `[path]` for a file; [] if missing."""
        ...

    def read(self, path: str) -> bytes:
        """A file's bytes; raises KeyError if it is not a file of this tree."""
        ...

    def exists(self, path: str) -> bool: ...

    def is_dir(self, path: str) -> bool: ...

    def hash(self, path: str) -> str | None:
        """The git object hash of the blob or tree at `path` ("" = root), None if missing."""
        ...

    @property
    def identity(self) -> Hashable | None:
        """Names content that can never change (a commit), or None (a directory)."""
        ...


def _clean(path: str) -> str:
    return "/".join(part for part in path.split("/") if part not in ("", "."))


# --- a commit ------------------------------------------------------------------


class CommitTree:
    """The tree of one commit, read through gitpython."""

    def __init__(self, repo: str | Path | git.Repo, rev: str = "HEAD") -> None:
        self.repo = repo if isinstance(repo, git.Repo) else _open_repo(repo)
        self.sha = resolve_revision(self.repo, rev)
        self._root = self.repo.commit(self.sha).tree
        self._objects: dict[str, git.Tree | git.Blob | None] = {}

    @property
    def identity(self) -> Hashable:
        return (self.repo.git_dir, self.sha)

    def _object(self, path: str) -> git.Tree | git.Blob | None:
        path = _clean(path)
        if not path:
            return self._root
        if path not in self._objects:
            # Walk from the memoised parent: gitpython re-parses a tree object
            # on every lookup through it, and a commit never changes.
            parent, _, name = path.rpartition("/")
            container = self._object(parent)
            found = None
            if isinstance(container, git.Tree):
                try:
                    found = container[name]
                except KeyError:
                    found = None
            self._objects[path] = found if isinstance(found, (git.Tree, git.Blob)) else None
        return self._objects[path]

    def files(self, path: str) -> list[str]:
        found = self._object(path)
        if isinstance(found, git.Blob):
            return [found.path]
        if found is None:
            return []
        return sorted(item.path for item in found.traverse() if isinstance(item, git.Blob))

    def read(self, path: str) -> bytes:
        found = self._object(path)
        if not isinstance(found, git.Blob):
            raise KeyError(path)
        return found.data_stream.read()

    def exists(self, path: str) -> bool:
        return self._object(path) is not None

    def is_dir(self, path: str) -> bool:
        return isinstance(self._object(path), git.Tree)

    def hash(self, path: str) -> str | None:
        found = self._object(path)
        return None if found is None else found.hexsha


def _open_repo(path: str | Path) -> git.Repo:
    try:
        return git.Repo(path, search_parent_directories=True)
    except git.NoSuchPathError:
        raise UserError(f"repository {path} does not exist") from None
    except git.InvalidGitRepositoryError:
        raise UserError(f"{path} is not inside a git repository") from None


def resolve_revision(repo: str | Path | git.Repo, rev: str) -> str:
    """The full commit sha `rev` names in `repo`; UserError if it names none."""
    opened = repo if isinstance(repo, git.Repo) else _open_repo(repo)
    try:
        return opened.commit(rev).hexsha
    except (gitdb.exc.ODBError, ValueError, git.GitError):
        raise UserError(f"revision '{rev}' not found in {opened.working_dir or opened.git_dir}") from None


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


# --- git-compatible hashing for trees that are not commits -----------------------


def _blob_hash(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def _tree_hash(entries: list[tuple[str, str, str]]) -> str:
    """Hash (mode, name, sha) entries the way `git write-tree` would."""
    # git orders a directory as if its name ended with '/'.
    ordered = sorted(entries, key=lambda e: e[1] + "/" if e[0] == _MODE_DIR else e[1])
    body = b"".join(
        f"{mode} {name}".encode() + b"\0" + bytes.fromhex(sha) for mode, name, sha in ordered
    )
    return hashlib.sha1(b"tree %d\0" % len(body) + body).hexdigest()


class _HashingTree:
    """Shared hashing for trees that list entries themselves; hashes are memoised."""

    identity: Hashable | None = None

    def __init__(self) -> None:
        self._hashes: dict[str, str | None] = {}

    def entries(self, path: str) -> Iterator[tuple[str, str]]:
        """(name, mode) of each direct child of the directory at `path`."""
        raise NotImplementedError

    def blob_bytes(self, path: str, mode: str) -> bytes:
        raise NotImplementedError

    def is_dir(self, path: str) -> bool:
        raise NotImplementedError

    def exists(self, path: str) -> bool:
        raise NotImplementedError

    def hash(self, path: str) -> str | None:
        path = _clean(path)
        if path not in self._hashes:
            self._hashes[path] = self._compute_hash(path)
        return self._hashes[path]

    def _compute_hash(self, path: str) -> str | None:
        if not self.exists(path):
            return None
        if not self.is_dir(path):
            return _blob_hash(self.blob_bytes(path, _MODE_FILE))
        rows = []
        for name, mode in self.entries(path):
            child = f"{path}/{name}" if path else name
            sha = self.hash(child) if mode == _MODE_DIR else _blob_hash(self.blob_bytes(child, mode))
            # git does not record directories without files.
            if sha is not None and sha != _EMPTY_TREE:
                rows.append((mode, name, sha))
        return _tree_hash(rows)

    def files(self, path: str) -> list[str]:
        path = _clean(path)
        if not self.exists(path):
            return []
        if not self.is_dir(path):
            return [path]
        found: list[str] = []
        for name, mode in self.entries(path):
            child = f"{path}/{name}" if path else name
            found.extend(self.files(child) if mode == _MODE_DIR else [child])
        return sorted(found)


class DirectoryTree(_HashingTree):
    """A plain directory on disk (the working tree for `gitops validate PATH`)."""

    def __init__(self, root: str | Path) -> None:
        super().__init__()
        self.root = Path(root)

    def _path(self, path: str) -> Path:
        return self.root / _clean(path) if _clean(path) else self.root

    def entries(self, path: str) -> Iterator[tuple[str, str]]:
        for child in self._path(path).iterdir():
            if child.is_symlink():
                yield child.name, _MODE_LINK
            elif child.is_dir():
                if child.name not in _SKIPPED_DIRS:
                    yield child.name, _MODE_DIR
            elif child.is_file():
                yield child.name, _MODE_EXEC if os.access(child, os.X_OK) else _MODE_FILE

    def blob_bytes(self, path: str, mode: str) -> bytes:
        # git stores a symlink as a blob holding its target.
        target = self._path(path)
        return os.readlink(target).encode() if target.is_symlink() else target.read_bytes()

    def read(self, path: str) -> bytes:
        target = self._path(path)
        if not target.is_file():
            raise KeyError(path)
        return target.read_bytes()

    def exists(self, path: str) -> bool:
        parts = _clean(path).split("/")
        return self._path(path).exists() and not _SKIPPED_DIRS.intersection(parts)

    def is_dir(self, path: str) -> bool:
        return self._path(path).is_dir() and not self._path(path).is_symlink()


class MemoryTree(_HashingTree):
    """Files held in memory: {"deployments/echo.toml": b"..."}."""

    def __init__(self, files: Mapping[str, bytes | str]) -> None:
        super().__init__()
        self._files = {
            _clean(path): data.encode() if isinstance(data, str) else data
            for path, data in files.items()
        }
        self._dirs = {"/".join(p.split("/")[:i]) for p in self._files for i in range(len(p.split("/")))}

    def entries(self, path: str) -> Iterator[tuple[str, str]]:
        prefix = f"{path}/" if path else ""
        children: dict[str, str] = {}
        for name in list(self._files) + list(self._dirs):
            if name.startswith(prefix) and name != path:
                head = name[len(prefix) :].split("/")[0]
                children[head] = _MODE_DIR if f"{prefix}{head}" in self._dirs else _MODE_FILE
        return iter(sorted(children.items()))

    def blob_bytes(self, path: str, mode: str) -> bytes:
        return self._files[path]

    def read(self, path: str) -> bytes:
        return self._files[_clean(path)]

    def exists(self, path: str) -> bool:
        path = _clean(path)
        return path in self._files or path in self._dirs

    def is_dir(self, path: str) -> bool:
        return _clean(path) in self._dirs
