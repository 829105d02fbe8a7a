"""The agent's loader with secrets: decrypted per commit, keyed hashes in the
configs, the restart rule, and a value that does not decrypt failing the
load with the secret's name and file (so nothing is applied)."""

from __future__ import annotations

import pyrage

from gitops.loop.secrets import SecretsLoader, keyed_hash
from gitops.sources.trees import MemoryTree
from gitops.specs.loading import Loader

HOOKED = "class Vault:\n    def reconfigure_secrets(self):\n        pass\n    def __call__(self, r):\n        return 1\n"
PLAIN = "class Vault:\n    def __call__(self, r):\n        return 1\n"
SPEC = '[secrets.db]\nfile = "secrets/db.age"\n[backends.vault]\nimport_path = "apps.vault:Vault"\nsecrets = ["db"]\n{extra}'


def _tree(value: bytes, recipient: object, app: str = HOOKED, extra: str = "") -> MemoryTree:
    return MemoryTree({
        "deployments/vault.toml": SPEC.format(extra=extra),
        "apps/vault.py": app,
        "secrets/db.age": pyrage.encrypt(value, [recipient]),
    })


def test_values_become_keyed_hashes_and_only_a_class_without_the_hook_restarts() -> None:
    identity = pyrage.x25519.Identity.generate()
    load = SecretsLoader(Loader().load_tree, [identity], b"k" * 32)
    hooked = load(_tree(b"s3cret", identity.to_public()), "deployments").state
    assert hooked is not None
    config = hooked.backends["vault"]
    assert config.secret_digests == {"db": keyed_hash(b"k" * 32, "db", b"s3cret")}
    assert "+s" not in config.version and "s3cret" not in config.model_dump_json()
    plain = load(_tree(b"s3cret", identity.to_public(), PLAIN), "deployments").state
    assert plain is not None and "+s" in plain.backends["vault"].version
    forced = load(_tree(b"s3cret", identity.to_public(), extra='on_secret_change = "restart"\n'), "deployments").state
    assert forced is not None and "+s" in forced.backends["vault"].version
    assert load.bundle([config]) == {"vault": {"db": [config.secret_digests["db"], "czNjcmV0"]}}


def test_a_secret_that_does_not_decrypt_fails_the_load_naming_it_and_its_file() -> None:
    stranger = pyrage.x25519.Identity.generate()
    load = SecretsLoader(Loader().load_tree, [pyrage.x25519.Identity.generate()], b"k" * 32)
    result = load(_tree(b"s3cret", stranger.to_public()), "deployments")
    assert result.state is None
    assert [str(error) for error in result.errors] == [
        "secrets/db.age:1:1: secret 'db' (secrets/db.age) does not decrypt: no --age-identity given opens it, or it is corrupt"
    ]
    nobody = SecretsLoader(Loader().load_tree, [], b"k" * 32)(_tree(b"s3cret", stranger.to_public()), "deployments")
    assert [str(error) for error in nobody.errors] == [
        "secrets/db.age:1:1: secret 'db' (secrets/db.age) does not decrypt: no --age-identity given"
    ]


def test_an_unchanged_commit_is_decrypted_once_and_its_values_stay_deliverable() -> None:
    identity = pyrage.x25519.Identity.generate()
    load = SecretsLoader(Loader().load_tree, [identity], b"k" * 32)
    tree, changed = _tree(b"s3cret", identity.to_public()), _tree(b"other", identity.to_public())
    first = load(tree, "deployments")
    assert load(tree, "deployments") is first  # the same spec result: no second decryption
    second = load(changed, "deployments")
    assert second is not first and second.state is not None
    assert load.bundle([second.state.backends["vault"]])["vault"]["db"][1] == "b3RoZXI="
    again = load(tree, "deployments")  # back to the first commit (a rollback): its values, not the other's
    assert again.state is not None
    assert load.bundle([again.state.backends["vault"]])["vault"]["db"][1] == "czNjcmV0"
