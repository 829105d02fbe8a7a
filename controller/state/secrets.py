"""The controller's part in secret delivery: it holds, seals and forwards.

Owns the controller's own age key (made at start, in memory, never
checkpointed), the backends' secret values the agent sealed to it (`put`,
kept in memory with each value's keyed hash), which backends' configs name
values it does not hold (`missing`: after a controller restart the agent
sends them again at its next tick), and sealing a backend's values to one
replica's public key (`seal_for`) so that what crosses Ray to the replica is
ciphertext only that replica can open. Nothing here is written to the
checkpoint, a log line, a status or an error text: errors name backends and
secrets, never values. Pure apart from the age calls; docs/guides/secrets.md has
the design.
"""

from __future__ import annotations

import base64
import json
import time
from typing import Callable

import pyrage

from vocabulary.spec.backends import BackendConfig

__all__ = ["SecretKeeper", "SecretsNotHeld"]


class SecretsNotHeld(LookupError):
    """A replica needs values this controller has not been sent (yet)."""


class SecretKeeper:
    def __init__(self) -> None:
        self._identity = pyrage.x25519.Identity.generate()
        # backend -> secret name -> (keyed hash, value)
        self._held: dict[str, dict[str, tuple[str, bytes]]] = {}
        # Each put numbers its values (a clock, so a restarted controller counts on
        # from where the last one was), and a replica keeps the newest that reaches it.
        self._serial = 0
        self._listeners: list[Callable[[list[str]], None]] = []

    def recipient(self) -> str:
        """The public key the agent seals the backends' values to."""
        return str(self._identity.to_public())

    def put(self, sealed: bytes) -> list[str]:
        """Take a bundle the agent sealed to `recipient()`: {backend: {name:
        [keyed hash, base64 value]}}; returns the backends it held."""
        bundle = json.loads(pyrage.decrypt(sealed, [self._identity]))
        self._serial = max(self._serial + 1, time.time_ns())
        for backend, values in bundle.items():
            self._held[backend] = {name: (digest, base64.b64decode(text)) for name, (digest, text) in values.items()}
        for listener in self._listeners:
            listener(sorted(bundle))
        return sorted(bundle)

    def when_put(self, listener: Callable[[list[str]], None]) -> None:
        """Call `listener` with the backends of every bundle put from now on."""
        self._listeners.append(listener)

    def forget(self, backend: str) -> None:
        self._held.pop(backend, None)

    def holds(self, config: BackendConfig) -> bool:
        held = self._held.get(config.name, {})
        return {name: digest for name, (digest, _) in held.items()} == dict(config.secret_digests)

    def missing(self, configs: dict[str, BackendConfig]) -> list[str]:
        """Backends whose configs name secret values not held here."""
        return sorted(name for name, config in configs.items() if config.secret_digests and not self.holds(config))

    def can_seal(self, config: BackendConfig) -> bool:
        """Values are held for each secret the backend names (perhaps newer ones)."""
        held = self._held.get(config.name, {})
        return bool(config.secret_digests) and set(held) == set(config.secret_digests)

    def seal_for(self, config: BackendConfig, recipient: str) -> bytes:
        """The backend's newest values sealed to one replica's public key, with
        their serial. A replica started for an older config of the backend gets
        the newest values too: a rotation reaches it either way."""
        held = self._held.get(config.name, {})
        if not self.can_seal(config):
            raise SecretsNotHeld(
                f"backend {config.name}: the controller does not hold its secrets "
                f"({', '.join(sorted(config.secret_digests))}) yet; the agent sends them at its next tick"
            )
        values = {name: base64.b64encode(value).decode() for name, (_, value) in held.items()}
        bundle = {"serial": self._serial, "values": values}
        return pyrage.encrypt(json.dumps(bundle).encode(), [pyrage.x25519.Recipient.from_str(recipient)])
