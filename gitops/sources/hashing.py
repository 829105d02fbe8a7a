"""Trees that hash themselves as git does, without git: the `Tree` protocol,
symbolic links followed inside a tree only, git-compatible blob and tree
hashes, and `MemoryTree`.

Every tree answers the same few questions with repository-relative,
'/'-separated paths (see `Tree`). `HashingTree` computes git's object hashes
in Python (blob: sha1 of "blob LEN\\0" + bytes; tree: git's tree object
format and entry order), so a tree read from disk or memory has the hashes
a commit of the same files would have. File names that are not UTF-8 are
carried as Python does (lone surrogates) and hashed as their original bytes.

Symbolic links are data, never followed blindly: `Tree.link_target` says
where a link points, `resolve_inside` follows links component by component
as the operating system would but inside the tree only, and gives None for
a path that leaves it (an absolute target, or '..' above the root). Reading
a link reads what it leads to inside the tree; a link leading outside
cannot be read (KeyError).

Imports no git: pure code and tests use `MemoryTree` freely. Must not:
write or import user code.
"""

from __future__ import annotations

import hashlib
from typing import Callable, Hashable, Iterable, Iterator, Mapping, Protocol

__all__ = [
    "Tree",
    "HashingTree",
    "MemoryTree",
    "clean",
    "resolve_inside",
    "read_inside",
    "escaping_links",
    "MAX_LINK_HOPS",
    "MODE_FILE",
    "MODE_EXEC",
    "MODE_LINK",
    "MODE_DIR",
]

_EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"
MODE_FILE, MODE_EXEC, MODE_LINK, MODE_DIR = "100644", "100755", "120000", "40000"
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

    def sizes(self, paths: list[str]) -> dict[str, int]:
        """`size` of each path, at once (a commit asks git once for them all)."""
        ...

    def read_files(self, paths: list[str]) -> dict[str, bytes]:
        """`read` of each path, at once (a commit asks git once for them all)."""
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


def clean(path: str) -> str:
    """`path` without empty and "." parts: "a//./b/" -> "a/b"."""
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


def read_inside(tree: Tree, path: str, read: Callable[[str], bytes]) -> bytes:
    """Read `path` through `read` after following its links inside the tree."""
    resolved = resolve_inside(tree, path)
    if resolved is None:
        raise KeyError(path)
    return read(resolved)


def escaping_links(tree: Tree, files: Iterable[str]) -> Iterator[tuple[str, str]]:
    """(path, target as written) of each symbolic link among `files` that leads outside the tree."""
    for path in files:
        target = tree.link_target(path)
        if target is not None and resolve_inside(tree, path) is None:
            yield path, target


def _blob_hash(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def _tree_hash(entries: list[tuple[str, str, str]]) -> str:
    """Hash (mode, name, sha) entries the way `git write-tree` would."""
    # git orders a directory as if its name ended with '/'.
    ordered = sorted(entries, key=lambda e: e[1] + "/" if e[0] == MODE_DIR else e[1])
    body = b"".join(
        f"{mode} {name}".encode("utf-8", "surrogateescape") + b"\0" + bytes.fromhex(sha)
        for mode, name, sha in ordered
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

    def read(self, path: str) -> bytes:
        raise NotImplementedError

    def size(self, path: str) -> int:
        raise NotImplementedError

    def sizes(self, paths: list[str]) -> dict[str, int]:
        return {path: self.size(path) for path in paths}

    def read_files(self, paths: list[str]) -> dict[str, bytes]:
        return {path: self.read(path) for path in paths}

    def hash(self, path: str) -> str | None:
        path = clean(path)
        if path not in self._hashes:
            self._hashes[path] = self._compute_hash(path)
        return self._hashes[path]

    def _compute_hash(self, path: str) -> str | None:
        if not self.here(path):
            return None
        if not self.dir_here(path):
            mode = MODE_FILE if self.link_target(path) is None else MODE_LINK
            return _blob_hash(self.blob_bytes(path, mode))
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
        if not self.here(path):
            return []
        if not self.dir_here(path):
            return [path]
        found: list[str] = []
        for name, mode in self.entries(path):
            child = f"{path}/{name}" if path else name
            found.extend(self.files(child) if mode == MODE_DIR else [child])
        return sorted(found)


class MemoryTree(HashingTree):
    """Files held in memory: {"deployments/echo.toml": b"..."}, and links:
    {"apps/data": "../data"} (link path -> target as written)."""

    def __init__(self, files: Mapping[str, bytes | str], links: Mapping[str, str] | None = None) -> None:
        super().__init__()
        self._files = {
            clean(path): data.encode() if isinstance(data, str) else data
            for path, data in files.items()
        }
        self._links = {clean(path): target for path, target in (links or {}).items()}
        entries = [*self._files, *self._links]
        self._dirs = {"/".join(p.split("/")[:i]) for p in entries for i in range(len(p.split("/")))}

    def entries(self, path: str) -> Iterator[tuple[str, str]]:
        prefix = f"{path}/" if path else ""
        children: dict[str, str] = {}
        for name in [*self._files, *self._links, *self._dirs]:
            if name.startswith(prefix) and name != path:
                head = name[len(prefix) :].split("/")[0]
                child = f"{prefix}{head}"
                children[head] = MODE_DIR if child in self._dirs else MODE_LINK if child in self._links else MODE_FILE
        return iter(sorted(children.items()))

    def blob_bytes(self, path: str, mode: str) -> bytes:
        return self._links[path].encode() if mode == MODE_LINK else self._files[path]

    def read(self, path: str) -> bytes:
        return read_inside(self, path, lambda inside: self._files[inside])

    def size(self, path: str) -> int:
        return len(read_inside(self, path, lambda inside: self._files[inside]))

    def link_target(self, path: str) -> str | None:
        return self._links.get(clean(path))

    def here(self, path: str) -> bool:
        path = clean(path)
        return path in self._files or path in self._dirs or path in self._links

    def dir_here(self, path: str) -> bool:
        return clean(path) in self._dirs
