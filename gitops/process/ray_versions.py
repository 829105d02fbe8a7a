"""Whether this agent can drive a Ray cluster: one clear line when the versions differ.

A Ray driver must run the cluster's own Ray release and Python version.
`ray.init` refuses another with a multi-line "Version mismatch" message;
`mismatch_line` turns that message into one line naming both sides and
what to install, and `compare` is the rule itself. Pure: no Ray import.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["Runtime", "compare", "mismatch_line"]

# Ray's wording since 2.0 (ray._private.utils.check_version_info).
_MISMATCH = re.compile(
    r"The cluster was started with:\s*Ray: (?P<cluster_ray>\S+)\s*Python: (?P<cluster_python>\S+)\s*"
    r"This process on .*? was started with:\s*Ray: (?P<here_ray>\S+)\s*Python: (?P<here_python>\S+)",
    re.DOTALL,
)


@dataclass(frozen=True)
class Runtime:
    """The Ray release and Python version (major.minor.patch) one side runs."""

    ray: str
    python: str


def compare(cluster: Runtime, here: Runtime) -> str | None:
    """None when this process can join the cluster, else the one line that says why not."""
    if cluster == here:
        return None
    return (
        f"the cluster runs Ray {cluster.ray} on Python {cluster.python}, this agent Ray {here.ray} "
        f"on Python {here.python}; a Ray driver needs the cluster's versions: "
        f"install ray=={cluster.ray} into a Python {cluster.python} environment"
    )


def mismatch_line(ray_error: str) -> str | None:
    """The one line for a `ray.init` version-mismatch error; None for any other error."""
    found = _MISMATCH.search(ray_error)
    if found is None:
        return None
    return compare(
        Runtime(found["cluster_ray"], found["cluster_python"]), Runtime(found["here_ray"], found["here_python"])
    )
