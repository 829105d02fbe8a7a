"""A backend's code in a tree: what its version hashes, and nothing else.

A code path (the imported module's folder by default, or a `code_paths`
entry) counts whole, except under the spec path: there only Python files
are code. The spec files (and notes, data or anything else under the spec
path) beside a module are never code, so editing a spec, in the layout
`gitops init` makes (`deployments/hello.toml` beside `deployments/hello.py`),
never changes a version and never restarts replicas.

`CodeIndex.identity(path)` is a path's identity for
`gitops.specs.versions.derive_version`: git's own hash when the path does
not overlap the spec path (so those versions are what they always were), a
hash of its code files' hashes otherwise. `CodeIndex.files(path)` maps the
files it covers to their hashes, for `gitops plan` to say which file changed
a version. Reads only through `gitops.sources.hashing.Tree`; never imports.
"""

from __future__ import annotations

import hashlib

from gitops.sources.hashing import Tree

__all__ = ["CODE_SUFFIXES", "CodeIndex", "is_code", "changed_files"]

# What counts as code under the spec path: Python modules a replica imports.
CODE_SUFFIXES = (".py",)


def _within(path: str, folder: str) -> bool:
    """Whether `path` is `folder` or lies under it ("" is the root)."""
    return folder == "" or path == folder or path.startswith(folder + "/")


def is_code(file: str, spec_path: str) -> bool:
    """Whether `file` can be code: anything outside the spec path, Python files inside it."""
    return not _within(file, spec_path) or file.endswith(CODE_SUFFIXES)


def changed_files(before: dict[str, str | None], after: dict[str, str | None]) -> list[str]:
    """The files added, removed or changed between two `CodeIndex.files` maps, sorted."""
    return sorted(path for path in before.keys() | after.keys() if before.get(path) != after.get(path))


class CodeIndex:
    """The code identities of one tree, remembered per path: many backends
    share a folder, and a tree never changes while it is loaded."""

    def __init__(self, tree: Tree, spec_path: str) -> None:
        self._tree = tree
        self._spec_path = spec_path.strip("/")
        self._identities: dict[str, str | None] = {}

    def identity(self, path: str) -> str | None:
        """Git's hash of `path` when no spec file can lie under it, else a
        hash of its code files; None when it does not exist."""
        if path not in self._identities:
            self._identities[path] = self._identity(path)
        return self._identities[path]

    def files(self, path: str) -> dict[str, str | None]:
        """The code files under `path` (or `path` itself, a file) with their hashes."""
        return {file: self._tree.hash(file) for file in self._tree.files(path) if is_code(file, self._spec_path)}

    def _identity(self, path: str) -> str | None:
        tree, spec_path = self._tree, self._spec_path
        whole = tree.hash(path)
        if whole is None or not (_within(path, spec_path) or _within(spec_path, path)) or not tree.is_dir(path):
            return whole
        if _within(path, spec_path):
            parts = sorted(self.files(path).items(), key=lambda item: item[0])
        else:
            # An ancestor of the spec path: its other children count whole.
            parts = []
            for name in tree.children(path):
                child = f"{path}/{name}" if path else name
                parts.append((child, self.identity(child) if _within(spec_path, child) else tree.hash(child)))
        text = "\n".join(f"{file} {digest}" for file, digest in parts)
        return "code:" + hashlib.sha1(text.encode()).hexdigest()
