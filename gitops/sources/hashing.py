"""Trees that hash themselves as git does, without git: the `Tree` protocol,
git-compatible blob and tree hashes, and `MemoryTree`.

Every tree answers the same few questions with repository-relative,
'/'-separated paths (see `Tree`). `HashingTree` computes git's object hashes
in Python (blob: sha1 of "blob LEN\\0" + bytes; tree: git's tree object
format and entry order), so a tree read from disk or memory has the hashes
a commit of the same files would have. Imports no git: pure code and tests
use `MemoryTree` freely. Must not: write or import user code.
"""

from __future__ import annotations

import hashlib
from typing import Hashable, Iterator, Mapping, Protocol

__all__ = ["Tree", "HashingTree", "MemoryTree", "clean", "MODE_FILE", "MODE_EXEC", "MODE_LINK", "MODE_DIR"]

_EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"
MODE_FILE, MODE_EXEC, MODE_LINK, MODE_DIR = "100644", "100755", "120000", "40000"


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


def clean(path: str) -> str:
    """`path` without empty and "." parts: "a//./b/" -> "a/b"."""
    return "/".join(part for part in path.split("/") if part not in ("", "."))


def _blob_hash(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def _tree_hash(entries: list[tuple[str, str, str]]) -> str:
    """Hash (mode, name, sha) entries the way `git write-tree` would."""
    # git orders a directory as if its name ended with '/'.
    ordered = sorted(entries, key=lambda e: e[1] + "/" if e[0] == MODE_DIR else e[1])
    body = b"".join(
        f"{mode} {name}".encode() + b"\0" + bytes.fromhex(sha) for mode, name, sha in ordered
    )
    return hashlib.sha1(b"tree %d\0" % len(body) + body).hexdigest()


class HashingTree:
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
        path = clean(path)
        if path not in self._hashes:
            self._hashes[path] = self._compute_hash(path)
        return self._hashes[path]

    def _compute_hash(self, path: str) -> str | None:
        if not self.exists(path):
            return None
        if not self.is_dir(path):
            return _blob_hash(self.blob_bytes(path, MODE_FILE))
        rows = []
        for name, mode in self.entries(path):
            child = f"{path}/{name}" if path else name
            sha = self.hash(child) if mode == MODE_DIR else _blob_hash(self.blob_bytes(child, mode))
            # git does not record directories without files.
            if sha is not None and sha != _EMPTY_TREE:
                rows.append((mode, name, sha))
        return _tree_hash(rows)

    def files(self, path: str) -> list[str]:
        path = clean(path)
        if not self.exists(path):
            return []
        if not self.is_dir(path):
            return [path]
        found: list[str] = []
        for name, mode in self.entries(path):
            child = f"{path}/{name}" if path else name
            found.extend(self.files(child) if mode == MODE_DIR else [child])
        return sorted(found)


class MemoryTree(HashingTree):
    """Files held in memory: {"deployments/echo.toml": b"..."}."""

    def __init__(self, files: Mapping[str, bytes | str]) -> None:
        super().__init__()
        self._files = {
            clean(path): data.encode() if isinstance(data, str) else data
            for path, data in files.items()
        }
        self._dirs = {"/".join(p.split("/")[:i]) for p in self._files for i in range(len(p.split("/")))}

    def entries(self, path: str) -> Iterator[tuple[str, str]]:
        prefix = f"{path}/" if path else ""
        children: dict[str, str] = {}
        for name in list(self._files) + list(self._dirs):
            if name.startswith(prefix) and name != path:
                head = name[len(prefix) :].split("/")[0]
                children[head] = MODE_DIR if f"{prefix}{head}" in self._dirs else MODE_FILE
        return iter(sorted(children.items()))

    def blob_bytes(self, path: str, mode: str) -> bytes:
        return self._files[path]

    def read(self, path: str) -> bytes:
        return self._files[clean(path)]

    def exists(self, path: str) -> bool:
        path = clean(path)
        return path in self._files or path in self._dirs

    def is_dir(self, path: str) -> bool:
        return clean(path) in self._dirs
