"""The agent's part in secrets: identities, decryption, keyed hashes, delivery.

Owns reading age identity files (`load_identities`: each must be readable by
its owner only), the per-agent HMAC key in the state dir (`digest_key`, 0600)
that tells a changed value without showing it, decrypting every declared
secret of a commit (`decrypt`: a failure names the secret and its file,
never content; each value is registered with the redactor at once,
`gitops.redaction.register_secret_value`, so no status, history row, log
line or error shows it), `SecretsLoader` (the agent's loader: the spec loader's
desired state with each backend's keyed hashes filled in, and for a backend
that restarts on a secret change, the hash folded into its version), and
`SecretDelivery` (the goal API the agent uses: before a backend is applied,
and whenever the controller says it lacks values, the values are sealed to
the controller's own public key and sent). Values are held in memory only,
for the newest commits loaded. docs/guides/secrets.md has the design.
"""

from __future__ import annotations

import ast
import dataclasses
import base64
import hashlib
import hmac
import json
import os
import secrets as random_bytes
import stat
from pathlib import Path
from typing import Any, Callable, Protocol, Sequence

import pyrage

from gitops.errors import UserError
from gitops.redaction import register_secret_value
from gitops.sources.hashing import Tree
from gitops.specs.documents import SpecError
from gitops.specs.imports import module_files
from gitops.specs.loading import LoadResult
from gitops.loop.statedir import private_file
from vocabulary.control.goals import GoalResult
from vocabulary.spec.backends import BackendConfig, SecretChange
from vocabulary.spec.endpoints import EndpointConfig
from vocabulary.spec.state import ServingState
from vocabulary.control.goal_api import GoalAPI
from vocabulary.control.status import ClusterStatus

__all__ = [
    "Identity", "load_identities", "digest_key", "keyed_hash", "decrypt", "SecretsLoader", "SecretDelivery",
    "defines_hook", "FileDigests", "assume_unchanged",
]

Identity = Any  # pyrage.x25519.Identity: pyrage ships no type information
HOOK = "reconfigure_secrets"
_KEY_FILE = "secrets-hmac.key"


def load_identities(paths: Sequence[str]) -> list[Identity]:
    """The age identities of `paths` (age-keygen files: comments and AGE-SECRET-KEY-1 lines)."""
    identities: list[Identity] = []
    for path in paths:
        try:
            mode = os.stat(path).st_mode
            text = Path(path).read_text()
        except OSError as error:
            raise UserError(f"--age-identity {path}: cannot read it ({error.strerror})") from None
        if mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise UserError(f"--age-identity {path}: others can read it (mode {stat.S_IMODE(mode):04o}); chmod 600 it")
        keys = [line.strip() for line in text.splitlines() if line.strip().startswith("AGE-SECRET-KEY-")]
        if not keys:
            raise UserError(f"--age-identity {path}: holds no AGE-SECRET-KEY line (make one with `gitops secret keygen`)")
        for key in keys:
            try:
                identities.append(pyrage.x25519.Identity.from_str(key))
            except pyrage.IdentityError:
                raise UserError(f"--age-identity {path}: a line is not an age X25519 identity") from None
    return identities


def digest_key(state_root: Path) -> bytes:
    """The agent's own HMAC key (32 random bytes, 0600 in the state dir), made once."""
    path = state_root / _KEY_FILE
    if path.exists() and path.stat().st_size == 32:
        return path.read_bytes()
    private_file(path).write_bytes(random_bytes.token_bytes(32))
    return path.read_bytes()


def keyed_hash(key: bytes, name: str, value: bytes) -> str:
    """What tells a changed value: HMAC-SHA256 under the agent's key, never a plain hash."""
    return hmac.new(key, name.encode() + b"\0" + value, hashlib.sha256).hexdigest()[:16]


def decrypt(
    tree: Tree, state: ServingState, identities: Sequence[Identity], only: set[str] | None = None
) -> tuple[dict[str, bytes], list[SpecError]]:
    """Every declared secret (or those in `only`) decrypted, or an error naming it and its file."""
    values: dict[str, bytes] = {}
    errors: list[SpecError] = []
    for name, declared in sorted(state.secrets.items()):
        if only is not None and name not in only:
            continue
        data = tree.read_files([declared.file])[declared.file]
        try:
            values[name] = pyrage.decrypt(_binary(data), list(identities))
            register_secret_value(values[name])
        except (pyrage.DecryptError, ValueError):
            why = "no --age-identity given" if not identities else "no --age-identity given opens it, or it is corrupt"
            errors.append(SpecError(declared.file, 1, 1, f"secret '{name}' ({declared.file}) does not decrypt: {why}"))
    return values, errors


def _binary(data: bytes) -> bytes:
    """pyrage reads binary age; an ASCII-armored file is its PEM body."""
    text = data.strip()
    if not text.startswith(b"-----BEGIN AGE ENCRYPTED FILE-----"):
        return data
    body = b"".join(line for line in text.splitlines()[1:] if not line.startswith(b"-----"))
    return base64.b64decode(body)


def defines_hook(tree: Tree, import_path: str) -> bool:
    """The class at `import_path` defines `reconfigure_secrets` in its own body
    (read from the commit, not imported; a hook inherited is not seen, and the
    backend restarts, which is always safe)."""
    module, _, attribute = import_path.partition(":")
    for path in module_files(module):
        if tree.exists(path):
            try:
                body = ast.parse(tree.read_files([path])[path]).body
            except (SyntaxError, ValueError):
                return False
            for node in body:
                if isinstance(node, ast.ClassDef) and node.name == attribute:
                    return any(
                        isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.name == HOOK
                        for item in node.body
                    )
            return False
    return False


class SecretsLoader:
    """The spec loader, with the backends' secrets decrypted and hashed."""

    def __init__(self, load: Callable[[Tree, str], LoadResult], identities: Sequence[Identity], key: bytes) -> None:
        self._load = load
        self._identities = list(identities)
        self._key = key
        self._held: dict[str, bytes] = {}  # keyed hash -> value, of the last load
        # The spec loader returns the same result for the same files (its caches
        # key on the secret files' hashes too): decrypted once, not every tick.
        self._last: tuple[LoadResult, LoadResult, dict[str, bytes]] | None = None

    def __call__(self, tree: Tree, spec_path: str) -> LoadResult:
        result = self._load(tree, spec_path)
        if self._last is not None and self._last[0] is result:
            self._held = self._last[2]
            return self._last[1]
        with_secrets = self._decrypted(tree, result)
        self._last = (result, with_secrets, self._held)
        return with_secrets

    def _decrypted(self, tree: Tree, result: LoadResult) -> LoadResult:
        state = result.state
        if state is None or not state.secrets:
            return result
        named = {name for config in state.backends.values() for name in config.secrets}
        values, errors = decrypt(tree, state, self._identities)
        if errors:
            self._held = {}
            return LoadResult(None, tuple(errors))
        digests = {name: keyed_hash(self._key, name, value) for name, value in values.items()}
        self._held = {digests[name]: values[name] for name in named}
        backends = {name: self._with_digests(tree, config, digests) for name, config in state.backends.items()}
        # The environment's settings and the code paths stay: only the backends gain their digests.
        return dataclasses.replace(result, state=state.model_copy(update={"backends": backends}))

    def _with_digests(self, tree: Tree, config: BackendConfig, digests: dict[str, str]) -> BackendConfig:
        if not config.secrets:
            return config
        mine = {name: digests[name] for name in config.secrets}
        update: dict[str, Any] = {"secret_digests": mine}
        policy = config.on_secret_change
        if policy is SecretChange.RESTART or (policy is None and not defines_hook(tree, config.import_path)):
            together = keyed_hash(self._key, "", json.dumps(mine, sort_keys=True).encode())
            update["version"] = f"{config.version}+s{together[:8]}"
        return config.model_copy(update=update)

    def bundle(self, configs: Sequence[BackendConfig]) -> dict[str, dict[str, list[str]]]:
        """{backend: {name: [keyed hash, base64 value]}} for the backends' current values."""
        found: dict[str, dict[str, list[str]]] = {}
        for config in configs:
            values = {name: self._held.get(digest) for name, digest in config.secret_digests.items()}
            if all(value is not None for value in values.values()):
                found[config.name] = {
                    name: [config.secret_digests[name], base64.b64encode(value).decode()]
                    for name, value in values.items() if value is not None
                }
        return found


class FileDigests(SecretsLoader):
    """For `gitops plan` without a key: a secret's "hash" is its file's git blob
    hash (the ciphertext is in git already), so a commit that re-encrypts a
    file shows as `~ secret NAME (changed)` and the restart rule is predicted."""

    def __init__(self, load: Callable[[Tree, str], LoadResult]) -> None:
        super().__init__(load, [], b"gitops plan")

    def __call__(self, tree: Tree, spec_path: str) -> LoadResult:
        result = self._load(tree, spec_path)
        state = result.state
        if state is None or not state.secrets:
            return result
        digests = {
            name: keyed_hash(self._key, name, (tree.hash(declared.file) or "").encode())
            for name, declared in state.secrets.items()
        }
        backends = {name: self._with_digests(tree, config, digests) for name, config in state.backends.items()}
        # The environment's settings and the code paths stay: only the backends gain their digests.
        return dataclasses.replace(result, state=state.model_copy(update={"backends": backends}))


def assume_unchanged(desired: ServingState, actual: ServingState) -> ServingState:
    """`desired` with the secret hashes (and the version suffix they make) of
    `actual`: without the agent's key, values in git cannot be compared with
    those the controller holds (`gitops plan --live`)."""
    backends = dict(desired.backends)
    for name, config in desired.backends.items():
        live = actual.backends.get(name)
        if live is None or set(live.secret_digests) != set(config.secrets):
            continue
        update: dict[str, Any] = {"secret_digests": live.secret_digests}
        if live.version.startswith(f"{config.version}+s"):
            update["version"] = live.version
        backends[name] = config.model_copy(update=update)
    return desired.model_copy(update={"backends": backends})


class SecretController(Protocol):
    """What delivery needs of the controller besides the goal API (`controller.client`)."""

    async def secrets_recipient(self) -> str: ...

    async def put_secrets(self, sealed: bytes) -> list[str]: ...

    async def secrets_missing(self) -> list[str]: ...


class SecretGoalAPI(GoalAPI, SecretController, Protocol):
    """The goal API and the controller's secret calls (`controller.client.ControllerClient`)."""


class SecretDelivery:
    """The goal API, sending the controller a backend's secret values (sealed
    to its key) before the backend is applied and whenever it lacks them."""

    def __init__(self, inner: SecretGoalAPI, loader: SecretsLoader) -> None:
        self._inner = inner
        self._loader = loader

    async def _send(self, configs: Sequence[BackendConfig]) -> None:
        bundle = self._loader.bundle(configs)
        if not bundle:
            return
        recipient = pyrage.x25519.Recipient.from_str(await self._inner.secrets_recipient())
        await self._inner.put_secrets(pyrage.encrypt(json.dumps(bundle).encode(), [recipient]))

    async def apply_backend(self, config: BackendConfig) -> str:
        if config.secret_digests:
            await self._send([config])
        return await self._inner.apply_backend(config)

    async def get_state(self) -> ServingState:
        state = await self._inner.get_state()
        missing = await self._inner.secrets_missing()
        if missing:  # a restarted controller holds none: send them again
            await self._send([state.backends[name] for name in missing if name in state.backends])
        return state

    async def delete_backend(self, name: str) -> str:
        return await self._inner.delete_backend(name)

    async def apply_endpoint(self, config: EndpointConfig) -> str:
        return await self._inner.apply_endpoint(config)

    async def delete_endpoint(self, name: str) -> str:
        return await self._inner.delete_endpoint(name)

    async def wait_for_goal(self, goal_id: str, timeout_s: float) -> GoalResult:
        return await self._inner.wait_for_goal(goal_id, timeout_s)

    async def get_status(self) -> ClusterStatus:
        return await self._inner.get_status()
