"""Secrets redacted wherever text leaves (issue 50, row 3), without Ray.

A backend doing `int(serving.secret("db").text())` raised a ValueError whose
message holds the value's repr; that message went to the controller (the
latest exception), the proxy (the traceback) and stderr (`gitops logs`).
Here: the replica's box masks every form of every value it holds (text,
repr, base64, percent-encoding, JSON), in the latest exception, the
traceback sent back, the exception raised over Ray and its own output;
the agent masks every value it decrypts; the process holding values writes
no core dump; `validate` refuses a URL with a password in `env_vars`.
"""

from __future__ import annotations

import base64
import json
import resource
import subprocess
import sys
from urllib.parse import quote

import pyrage

from gitops.loop.secrets import decrypt
from gitops.redaction import redact
from gitops.sources.trees import MemoryTree
from gitops.specs.documents import combine, parse_file
from gitops.specs.loading import Loader
from replica.secrets import SecretBox
from vocabulary.control.status import HandlerError
from vocabulary.replicas.secret_forms import secret_forms

VALUE = b"PLAINTEXT-7f3e9a1c'quoted\\"


def _box_holding(value: bytes) -> SecretBox:
    box = SecretBox("vault")
    sealed = pyrage.encrypt(
        json.dumps({"serial": 1, "values": {"db": base64.b64encode(value).decode()}}).encode(),
        [pyrage.x25519.Recipient.from_str(box.recipient())],
    )
    assert box.open(sealed)
    return box


def _raised_by_user_code(value: bytes) -> ValueError:
    try:
        int(value.decode())
    except ValueError as error:
        return error
    raise AssertionError("int() took it")


def test_row3_every_form_of_a_held_value_is_masked_in_what_the_replica_sends() -> None:
    box = _box_holding(VALUE)
    text = VALUE.decode()
    error = _raised_by_user_code(VALUE)
    assert repr(text)[1:-1] in str(error)  # the leak: the value's repr in the message
    latest = HandlerError.of(error, "r1", 0.0, "/")
    shown = box.redact(latest.describe())
    assert "PLAINTEXT" not in shown and "***" in shown and shown.startswith("ValueError: invalid literal")
    for form in (text, repr(text), repr(VALUE), base64.b64encode(VALUE).decode(), quote(text, safe=""),
                 json.dumps(text), base64.urlsafe_b64encode(VALUE).decode().rstrip("=")):
        assert "PLAINTEXT" not in box.redact(f"log line: {form} end"), form
    # The exception raised in its place over Ray: same type of failure (an error), no value in its text.
    hidden = box.hiding(error)
    assert hidden is not None and "PLAINTEXT" not in str(hidden) and "ValueError: invalid literal" in str(hidden)
    assert box.hiding(ValueError("nothing secret here")) is None  # other errors go as they are
    box.close()


def test_row3_a_process_holding_values_writes_no_core_dump() -> None:
    script = (
        "import base64, json, resource, pyrage\n"
        "from replica.secrets import SecretBox\n"
        "box = SecretBox('vault')\n"
        "sealed = pyrage.encrypt(json.dumps({'serial': 1, 'values': {'db': base64.b64encode(b'value-1234').decode()}})"
        ".encode(), [pyrage.x25519.Recipient.from_str(box.recipient())])\n"
        "box.open(sealed)\n"
        "import ctypes\n"
        "print(resource.getrlimit(resource.RLIMIT_CORE), ctypes.CDLL(None).prctl(3, 0, 0, 0, 0))\n"
    )
    _, hard = resource.getrlimit(resource.RLIMIT_CORE)
    done = subprocess.run(
        [sys.executable, "-c", f"import resource; resource.setrlimit(resource.RLIMIT_CORE, ({hard}, {hard}))\n{script}"],
        capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 0, done.stderr
    last = done.stdout.strip().splitlines()[-1]
    assert last == "(0, 0) 0", last  # core limit 0, PR_GET_DUMPABLE answers 0


def test_row3_the_agent_masks_every_value_it_decrypts() -> None:
    identity = pyrage.x25519.Identity.generate()
    spec = '[secrets.db]\nfile = "s/db.age"\n[backends.vault]\nimport_path = "apps.vault:Vault"\nsecrets = ["db"]\n'
    tree = MemoryTree({
        "deployments/vault.toml": spec,
        "apps/vault.py": "class Vault:\n    def __call__(self, r):\n        return 1\n",
        "s/db.age": pyrage.encrypt(VALUE, [identity.to_public()]),
    })
    loaded = Loader().load_tree(tree, "deployments")
    assert loaded.state is not None, loaded.errors
    values, errors = decrypt(tree, loaded.state, [identity])
    assert errors == [] and values == {"db": VALUE}
    error = _raised_by_user_code(VALUE)
    for text in (str(error), f"status: {base64.b64encode(VALUE).decode()}", quote(VALUE.decode(), safe="")):
        assert "PLAINTEXT" not in redact(text), text
    assert all(len(form) >= 4 for form in secret_forms(VALUE))


def test_row3_validate_refuses_a_url_with_a_password_in_env_vars() -> None:
    spec = (
        b'[backends.orders]\nimport_path = "apps.orders:Orders"\n'
        b'runtime_env = { env_vars = { DB_URL = "postgres://app:pw-s3cret@db.internal/orders", '
        b'HOME_URL = "https://example.com/x", USER_ONLY = "ssh://git@host/x" } }\n'
    )
    documents = combine({"deployments/orders.toml": parse_file("deployments/orders.toml", spec)})
    errors = [str(error) for error in documents.errors]
    assert len(errors) == 1, errors
    assert "env_vars.DB_URL: 'DB_URL' holds a URL with a password in it" in errors[0]
    assert "pw-s3cret" not in errors[0]
