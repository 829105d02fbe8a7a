"""Every bound on what a spec tree may hold, in one place (docs/guides/security.md).

A spec tree comes from whoever can push to the watched branch, so the loader
must stay fast and small on any input: sizes are checked before a byte is
parsed, nesting before `tomllib` sees a key (its dotted keys cost quadratic
time in their length), and the rest on the parsed values. A `SpecLimits`
value carries them; the defaults are the documented limits, and only
`max_replicas` has a flag (`gitops run|validate --max-replicas`).

Pure constants and one value type; the checks live where the input is read
(`gitops.specs.loading` for sizes, `gitops.specs.documents` for values).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "MAX_FILE_BYTES",
    "MAX_TREE_BYTES",
    "MAX_STRING_BYTES",
    "MAX_DEPTH",
    "DEFAULT_MAX_REPLICAS",
    "MAX_TABLES",
    "SpecLimits",
    "size_text",
]

MAX_FILE_BYTES = 1 << 20  # one spec file: 1 MiB
MAX_TREE_BYTES = 16 << 20  # every spec file of a tree together: 16 MiB
MAX_STRING_BYTES = 64 << 10  # one string value or key, UTF-8: 64 KiB
# Configs travel as JSON to the controller and replicas; deeper values are a mistake.
MAX_DEPTH = 32  # key path length: tables, dotted keys, arrays and inline tables
DEFAULT_MAX_REPLICAS = 1000  # num_replicas and autoscaling.max_replicas
# Backends, and endpoints, one tree may declare: each is a goal, an actor or more and
# a long-poll key; a generated tree of 10,000 would swamp the controller and the cluster.
MAX_TABLES = 1000


@dataclass(frozen=True)
class SpecLimits:
    max_file_bytes: int = MAX_FILE_BYTES
    max_tree_bytes: int = MAX_TREE_BYTES
    max_string_bytes: int = MAX_STRING_BYTES
    max_depth: int = MAX_DEPTH
    max_replicas: int = DEFAULT_MAX_REPLICAS
    max_tables: int = MAX_TABLES  # backends, and endpoints, per tree


def size_text(size: int) -> str:
    """1048576 -> "1 MiB", 65536 -> "64 KiB", 1000 -> "1000 bytes"."""
    for unit, shift in (("MiB", 20), ("KiB", 10)):
        if size >= 1 << shift and size % (1 << shift) == 0:
            return f"{size >> shift} {unit}"
    return f"{size} bytes"
