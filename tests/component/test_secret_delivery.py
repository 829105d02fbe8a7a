"""Secret values from the agent to a replica: sealed to the controller's key,
held in its memory, sealed again to each replica's key; sent again after a
controller restart; a replica's values as bytes and as private files."""

from __future__ import annotations

import asyncio
import stat
from pathlib import Path

import pyrage
import pytest

from controller.state.secrets import SecretKeeper, SecretsNotHeld
from gitops.loop.secrets import SecretDelivery, SecretsLoader, keyed_hash
from gitops.sources.trees import MemoryTree
from gitops.specs.loading import Loader
from ray_gitops.serving import Secret
from replica.secrets import SecretBox, SecretMissing
from vocabulary.spec.backends import BackendConfig
from vocabulary.spec.state import ServingState

SPEC = '[secrets.db]\nfile = "s/db.age"\n[backends.vault]\nimport_path = "apps.vault:Vault"\nsecrets = ["db"]\n'
APP = "class Vault:\n    def reconfigure_secrets(self):\n        pass\n    def __call__(self, r):\n        return 1\n"


class FakeController:
    """The controller's secret calls and the two goal API calls delivery wraps."""

    def __init__(self) -> None:
        self.keeper = SecretKeeper()
        self.configs: dict[str, BackendConfig] = {}
        self.sent = 0

    async def secrets_recipient(self) -> str:
        return self.keeper.recipient()

    async def put_secrets(self, sealed: bytes) -> list[str]:
        self.sent += 1
        return self.keeper.put(sealed)

    async def secrets_missing(self) -> list[str]:
        return self.keeper.missing(self.configs)

    async def apply_backend(self, config: BackendConfig) -> str:
        assert self.keeper.holds(config), "values must arrive before the backend"
        self.configs[config.name] = config
        return "goal"

    async def get_state(self) -> ServingState:
        return ServingState(backends=self.configs)


def _loaded(value: bytes) -> tuple[SecretsLoader, BackendConfig]:
    identity = pyrage.x25519.Identity.generate()
    tree = MemoryTree({
        "deployments/v.toml": SPEC, "apps/vault.py": APP, "s/db.age": pyrage.encrypt(value, [identity.to_public()]),
    })
    load = SecretsLoader(Loader().load_tree, [identity], b"k" * 32)
    state = load(tree, "deployments").state
    assert state is not None
    return load, state.backends["vault"]


def test_values_reach_a_replica_sealed_twice_and_come_back_after_a_controller_restart(tmp_path: Path) -> None:
    load, config = _loaded(b"s3cret")
    controller = FakeController()
    delivery = SecretDelivery(controller, load)
    asyncio.run(delivery.apply_backend(config))
    replica = SecretBox("vault")
    replica.open(controller.keeper.seal_for(config, replica.recipient()))
    assert replica.value("db") == b"s3cret"
    # A restarted controller holds nothing: the agent's next look at the state sends the values again.
    controller.keeper = SecretKeeper()
    assert asyncio.run(controller.secrets_missing()) == ["vault"]
    asyncio.run(delivery.get_state())
    assert (controller.sent, asyncio.run(controller.secrets_missing())) == (2, [])
    asyncio.run(delivery.get_state())
    assert controller.sent == 2  # nothing missing: nothing sent


def test_a_replica_started_for_an_older_config_gets_the_newest_values() -> None:
    load, config = _loaded(b"s3cret")
    controller = FakeController()
    asyncio.run(SecretDelivery(controller, load).apply_backend(config))
    newer_load, newer = _loaded(b"rotated")
    asyncio.run(SecretDelivery(controller, newer_load).apply_backend(newer))
    replica = SecretBox("vault")
    replica.open(controller.keeper.seal_for(config, replica.recipient()))
    assert replica.value("db") == b"rotated"


def test_a_controller_without_the_values_names_the_backend_and_no_value() -> None:
    _, config = _loaded(b"s3cret")
    with pytest.raises(SecretsNotHeld) as raised:
        SecretKeeper().seal_for(config, SecretBox("vault").recipient())
    assert str(raised.value) == (
        "backend vault: the controller does not hold its secrets (db) yet; the agent sends them at its next tick"
    )
    assert config.secret_digests == {"db": keyed_hash(b"k" * 32, "db", b"s3cret")}


def test_a_replica_cannot_open_values_sealed_to_another() -> None:
    load, config = _loaded(b"s3cret")
    controller = FakeController()
    asyncio.run(SecretDelivery(controller, load).apply_backend(config))
    sealed = controller.keeper.seal_for(config, SecretBox("vault").recipient())
    with pytest.raises(pyrage.DecryptError):
        SecretBox("vault").open(sealed)


def test_a_replica_file_is_private_rewritten_on_rotation_and_removed_at_stop() -> None:
    box = SecretBox("vault")
    def sealed(serial: int, values: str) -> bytes:
        bundle = f'{{"serial": {serial}, "values": {values}}}'.encode()
        return pyrage.encrypt(bundle, [pyrage.x25519.Recipient.from_str(box.recipient())])

    assert box.open(sealed(1, '{"db": "b2xk"}'))
    path = Path(box.path("db"))
    assert path.read_bytes() == b"old"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert box.open(sealed(3, '{"db": "bmV3"}'))
    assert path.read_bytes() == b"new" and box.value("db") == b"new"
    assert not box.open(sealed(2, '{"db": "b2xk"}'))  # older values arriving late change nothing
    assert box.value("db") == b"new"
    with pytest.raises(SecretMissing, match=r"backend vault has no secret 'api' \(it lists: db\)"):
        box.value("api")
    box.close()
    assert not path.parent.exists()


def test_a_secret_value_prints_as_its_size_only() -> None:
    value = Secret(b"s3cret")
    assert value == b"s3cret" and value.text() == "s3cret"
    assert repr(value) == str(value) == f"{value!s}" == "<secret, 6 bytes>"
