"""A backend's version: what its replicas are bound to (docs/guides/specs.md).

An explicit `version` wins. Otherwise the version is a short, stable hash of
the git object hashes of the backend's code paths plus the code-affecting
fields, and of nothing else: changing traffic, replicas, `user_config` or
health checks must never restart replicas, while any change to a file under
a code path must. Pure: the caller supplies the hashes.
"""

from __future__ import annotations

import hashlib
import json
import posixpath
from typing import Mapping

from gitops.specs.models import BackendSpec

__all__ = ["CODE_FIELDS", "VERSION_LENGTH", "default_code_path", "code_paths", "derive_version"]

CODE_FIELDS = frozenset({
    "import_path", "init_args", "init_kwargs", "ray_actor_options", "runtime_env", "placement", "max_replicas_per_node",
    "protocol", "v2",  # a v2 model's replicas are built around its metadata
    "llm",  # an [llm] backend's replicas are built around its engine and its arguments
    "grpc_servicer",  # its replicas call the class as that servicer
})
VERSION_LENGTH = 12


def default_code_path(module_file: str) -> str:
    """The imported module's folder ("" is the repository root)."""
    return posixpath.dirname(module_file)


def code_paths(spec: BackendSpec, module_file: str | None, *more_files: str | None) -> tuple[str, ...]:
    """The paths whose contents make up a backend's code: its `code_paths`, else the folders of the
    imported module and of `more_files` (its `grpc_servicer`'s module)."""
    if spec.code_paths is not None:
        return tuple(spec.code_paths)
    files = (file for file in (module_file, *more_files) if file is not None)
    return tuple(dict.fromkeys(default_code_path(file) for file in files))


def derive_version(spec: BackendSpec, code_hashes: Mapping[str, str | None]) -> str:
    """`spec.version`, or a hash of `code_hashes` (path -> git hash) and code fields."""
    if spec.version is not None:
        return spec.version
    identity = {
        "code": sorted(code_hashes.items()),
        "fields": spec.model_dump(mode="json", include=set(CODE_FIELDS), exclude_none=True),
    }
    text = json.dumps(identity, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:VERSION_LENGTH]
