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
- `MemoryTree` holds files (and symbolic links) in dicts, for tests and tools.

Symbolic links are data, never followed blindly: `link_target` says where a
link points, `resolve_inside` follows links component by component as the
operating system would but inside the tree only, and gives None for a path
that leaves it (an absolute target, or '..' above the root). Reading a link
reads what it leads to inside the tree; a link leading outside cannot be
read (KeyError). File names that are not UTF-8 are carried as Python does
(lone surrogates) and hashed as their original bytes.

This module never imports user code and never writes.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Callable, Hashable, Iterator, Mapping, Protocol

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
    "resolve_inside",
    "MAX_LINK_HOPS",
]

_SKIPPED_DIRS = frozenset({".git", "__pycache__"})
_EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"
_MODE_FILE, _MODE_EXEC, _MODE_LINK, _MODE_DIR = "100644", "100755", "120000", "40000"
_GIT_LINK_MODE = 0o120000
# As Linux's limit on links followed in one path (ELOOP).
MAX_LINK_HOPS = 40


class Tree(Protocol):
    def files(self, path: str) -> list[str]:
        """Every file under `path` (recursive), sorted; `[path]` for a file; [] if missing."""
        ...

    def read(self, path: str) -> bytes:
        """A file's bytes; raises KeyError if it is not a file of this tree."""
        ...

    def exists(self, path: str) -> bool:
        """Whether `path` leads to a file or directory, following links inside the tree."""
        ...

    def is_dir(self, path: str) -> bool:
        """Whether `path` leads to a directory, following links inside the tree."""
        ...

    def size(self, path: str) -> int:
        """A file's size in bytes, without reading it; raises KeyError if it is not a file."""
        ...

    def children(self, path: str) -> list[str]:
        """The names directly under the directory `path` leads to, sorted; [] if it is none."""
        ...

    def link_target(self, path: str) -> str | None:
        """What the symbolic link at `path` points to, as written; None if it is no link."""
        ...

    def hash(self, path: str) -> str | None:
        """The git object hash of the blob or tree at `path` ("" = root), None if missing."""
        ...

    @property
    def identity(self) -> Hashable | None:
        """Names content that can never change (a commit), or None (a directory)."""
        ...


def _clean(path: str) -> str:
    return "/".join(part for part in path.split("/") if part not in ("", "."))


def resolve_inside(tree: Tree, path: str) -> str | None:
    """The path `path` leads to with every link in it followed, or None if it
    leaves the tree (absolute target, '..' above the root, too many links)."""
    pending = list(reversed(path.split("/")))
    resolved: list[str] = []
    hops = 0
    while pending:
        part = pending.pop()
        if part in ("", "."):
            continue
        if part == "..":
            if not resolved:
                return None
            resolved.pop()
            continue
        target = tree.link_target("/".join([*resolved, part]))
        if target is None:
            resolved.append(part)
            continue
        hops += 1
        if hops > MAX_LINK_HOPS or target.startswith("/"):
            return None
        pending.extend(reversed(target.split("/")))
    return "/".join(resolved)


def _read_inside(tree: Tree, path: str, read: Callable[[str], bytes]) -> bytes:
    """Read `path` through `read` after following its links inside the tree."""
    resolved = resolve_inside(tree, path)
    if resolved is None:
        raise KeyError(path)
    return read(resolved)


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
        return _read_inside(self, path, self._blob_data)

    def _blob_data(self, path: str) -> bytes:
        found = self._object(path)
        if not isinstance(found, git.Blob):
            raise KeyError(path)
        return found.data_stream.read()

    def size(self, path: str) -> int:
        resolved = resolve_inside(self, path)
        found = None if resolved is None else self._object(resolved)
        if not isinstance(found, git.Blob):
            raise KeyError(path)
        return int(found.size)

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
        f"{mode} {name}".encode("utf-8", "surrogateescape") + b"\0" + bytes.fromhex(sha)
        for mode, name, sha in ordered
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

    def link_target(self, path: str) -> str | None:
        raise NotImplementedError

    def here(self, path: str) -> bool:
        """Whether `path` itself is an entry (a link counts, unfollowed)."""
        raise NotImplementedError

    def dir_here(self, path: str) -> bool:
        """Whether `path` itself is a directory (a link to one is not)."""
        raise NotImplementedError

    def exists(self, path: str) -> bool:
        resolved = resolve_inside(self, path)
        return resolved is not None and self.here(resolved)

    def children(self, path: str) -> list[str]:
        resolved = resolve_inside(self, path)
        if resolved is None or not self.dir_here(resolved):
            return []
        return sorted(name for name, _ in self.entries(resolved))

    def is_dir(self, path: str) -> bool:
        resolved = resolve_inside(self, path)
        return resolved is not None and self.dir_here(resolved)

    def hash(self, path: str) -> str | None:
        path = _clean(path)
        if path not in self._hashes:
            self._hashes[path] = self._compute_hash(path)
        return self._hashes[path]

    def _compute_hash(self, path: str) -> str | None:
        if not self.here(path):
            return None
        if not self.dir_here(path):
            mode = _MODE_FILE if self.link_target(path) is None else _MODE_LINK
            return _blob_hash(self.blob_bytes(path, mode))
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
        if not self.here(path):
            return []
        if not self.dir_here(path):
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
        if target.is_symlink():
            return os.readlink(target).encode("utf-8", "surrogateescape")
        return target.read_bytes()

    def read(self, path: str) -> bytes:
        return _read_inside(self, path, lambda inside: self._file(inside).read_bytes())

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
        return os.readlink(target) if _clean(path) and target.is_symlink() else None

    def here(self, path: str) -> bool:
        parts = _clean(path).split("/")
        return os.path.lexists(self._path(path)) and not _SKIPPED_DIRS.intersection(parts)

    def dir_here(self, path: str) -> bool:
        return self._path(path).is_dir() and not self._path(path).is_symlink()


class MemoryTree(_HashingTree):
    """Files held in memory: {"deployments/echo.toml": b"..."}, and links:
    {"apps/data": "../data"} (link path -> target as written)."""

    def __init__(self, files: Mapping[str, bytes | str], links: Mapping[str, str] | None = None) -> None:
        super().__init__()
        self._files = {
            _clean(path): data.encode() if isinstance(data, str) else data
            for path, data in files.items()
        }
        self._links = {_clean(path): target for path, target in (links or {}).items()}
        entries = [*self._files, *self._links]
        self._dirs = {"/".join(p.split("/")[:i]) for p in entries for i in range(len(p.split("/")))}

    def entries(self, path: str) -> Iterator[tuple[str, str]]:
        prefix = f"{path}/" if path else ""
        children: dict[str, str] = {}
        for name in [*self._files, *self._links, *self._dirs]:
            if name.startswith(prefix) and name != path:
                head = name[len(prefix) :].split("/")[0]
                child = f"{prefix}{head}"
                children[head] = _MODE_DIR if child in self._dirs else _MODE_LINK if child in self._links else _MODE_FILE
        return iter(sorted(children.items()))

    def blob_bytes(self, path: str, mode: str) -> bytes:
        return self._links[path].encode() if mode == _MODE_LINK else self._files[path]

    def read(self, path: str) -> bytes:
        return _read_inside(self, path, lambda inside: self._files[inside])

    def size(self, path: str) -> int:
        return len(_read_inside(self, path, lambda inside: self._files[inside]))

    def link_target(self, path: str) -> str | None:
        return self._links.get(_clean(path))

    def here(self, path: str) -> bool:
        path = _clean(path)
        return path in self._files or path in self._dirs or path in self._links

    def dir_here(self, path: str) -> bool:
        return _clean(path) in self._dirs
