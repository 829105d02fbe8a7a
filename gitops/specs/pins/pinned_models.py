"""Models in a desired state: each `[models.NAME]` bound to the backends that name it.

Owns the rule that a model's digest is part of a backend's version
(docs/guides/models.md): a backend that lists models gets each one's source,
digest and load timeout in `model_sources`, and `+m` and a short hash of
their digests appended to its version, so a new digest in git restarts
exactly the replicas that use that model (a rolling update), and a new
source with the same digest restarts nothing. A model's `token_secret`
(an hf:// source's Hub token) is added to the backend's `secrets`, so the
agent delivers it to the replicas that fetch the model. Likewise a multiplexed
backend's `max_models_per_replica` (`[backends.X.multiplex]`), which its
replicas are started with: `+x` and the number are appended, so changing
it restarts the replicas (its header is the proxy's, changed in place). Pure.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping

from vocabulary.spec.backends import BackendConfig, ModelConfig

__all__ = ["bind_models", "models_version"]


def models_version(version: str, models: Mapping[str, ModelConfig]) -> str:
    """`version`, with `+m` and 8 hex digits of the models' digests when there are any."""
    if not models:
        return version
    digests = json.dumps({name: model.sha256 for name, model in sorted(models.items())}, separators=(",", ":"))
    return f"{version}+m{hashlib.sha256(digests.encode()).hexdigest()[:8]}"


def bind_models(backend: BackendConfig, models: Mapping[str, ModelConfig]) -> BackendConfig:
    """`backend` with the models it names (all declared: validation checked) and its version."""
    version = backend.version
    if backend.multiplex is not None:
        version = f"{version}+x{backend.multiplex.max_models_per_replica}"
    if not backend.models:
        return backend if version == backend.version else backend.model_copy(update={"version": version})
    mine = {name: models[name] for name in backend.models}
    tokens = [model.token_secret for _, model in sorted(mine.items()) if model.token_secret is not None]
    secrets = (*backend.secrets, *(name for name in dict.fromkeys(tokens) if name not in backend.secrets))
    return backend.model_copy(
        update={"model_sources": mine, "version": models_version(version, mine), "secrets": secrets}
    )
