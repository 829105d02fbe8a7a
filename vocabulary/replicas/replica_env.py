"""What an embedded Ray, and so every replica it runs, inherits of the agent's environment.

An embedded Ray's processes (GCS, raylet, and the workers the raylet starts:
controller, proxies, replicas) inherit the environment of the process that
starts Ray. Replicas run a committer's code, so they get an allow-list of
the agent's environment, not all of it: never the agent's own secrets and
settings (`GITOPS_*`: the repository URL with its credentials, the admin
token of the CLI), nor anything else the allow-list does not name.

Allowed (`inherited`): the basics a process needs (`PATH`, `HOME`, `USER`,
`LANG`, `LC_*`, `TZ`, `TMPDIR`, ...), Python's (`PYTHON*`, `VIRTUAL_ENV`,
`CONDA_*`), Ray's own (`RAY_*`, its token path included), TLS and proxy
settings, accelerators and numeric libraries (`CUDA_*`, `NVIDIA_*`,
`NCCL_*`, `LD_LIBRARY_PATH`, `OMP_*`, ...), model hubs (`HF_*`,
`TRANSFORMERS_*`, `TORCH_*`) and, on purpose, cloud credentials (`AWS_*`,
`GOOGLE_*`, `AZURE_*`, ...): replicas load models and data with them.
`extra` names more (`gitops run --replica-env`: exact names, or prefixes
ending in `*`). `GITOPS_*` is never inherited, whatever `extra` says. Pure:
a function of the environment it is given. Must not: start Ray (that is
`controller.cluster`; the agent checks `--replica-env` with it too).
"""

from __future__ import annotations

from typing import Iterable, Mapping

__all__ = ["ALLOWED_NAMES", "ALLOWED_PREFIXES", "NEVER_PREFIX", "inherited", "check_patterns"]

ALLOWED_NAMES = frozenset({
    # what any process needs
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TZ", "TERM",
    "TMPDIR", "TMP", "TEMP", "HOSTNAME",
    "XDG_CACHE_HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_RUNTIME_DIR",
    # Python installs
    "VIRTUAL_ENV",
    # native libraries and accelerators
    "LD_LIBRARY_PATH",
    # TLS roots and outbound proxies
    "SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE",
    "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "no_proxy", "all_proxy",
    # a pod's view of its cluster
    "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT",
})
ALLOWED_PREFIXES = (
    "LC_", "PYTHON", "CONDA_", "RAY_", "PIP_", "UV_",
    "CUDA_", "NVIDIA_", "NCCL_", "ROCR_", "HIP_", "OMP_", "MKL_", "OPENBLAS_",
    "HF_", "HUGGING_FACE_", "TRANSFORMERS_", "TORCH_",
    "AWS_", "GOOGLE_", "GCLOUD_", "CLOUDSDK_", "AZURE_",
)
NEVER_PREFIX = "GITOPS_"  # the agent's own settings and secrets


def inherited(environ: Mapping[str, str], extra: Iterable[str] = ()) -> dict[str, str]:
    """The part of `environ` an embedded Ray's processes may inherit."""
    names = set(ALLOWED_NAMES)
    prefixes = list(ALLOWED_PREFIXES)
    for pattern in extra:
        if pattern.endswith("*"):
            prefixes.append(pattern[:-1])
        else:
            names.add(pattern)
    return {
        name: value
        for name, value in environ.items()
        if not name.startswith(NEVER_PREFIX) and (name in names or name.startswith(tuple(prefixes)))
    }


def check_patterns(patterns: Iterable[str]) -> list[str]:
    """What is wrong with `--replica-env` patterns, one message each (empty when nothing)."""
    problems = []
    for pattern in patterns:
        name = pattern.removesuffix("*")
        if not name or not (name.replace("_", "a").isalnum() and name.isascii()) or name[0].isdigit():
            problems.append(f"'{pattern}' is not an environment variable name (or a prefix ending in *)")
        elif name.startswith(NEVER_PREFIX):
            problems.append(f"'{pattern}' would pass on the agent's own GITOPS_* settings, which replicas never get")
    return problems
