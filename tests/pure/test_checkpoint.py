"""The checkpoint envelope: versioned JSON, never pickle."""

from __future__ import annotations

import json
import pickle

import pytest

from controller.persistence.checkpoint import SCHEMA_VERSION, CheckpointError, decode, encode
from controller.testing import MemoryStorage


def test_checkpoint_is_plain_json_with_a_schema_version():
    data = encode({"backends": {"a": 1}})
    envelope = json.loads(data)
    assert envelope["schema"] == SCHEMA_VERSION
    assert decode(data) == {"backends": {"a": 1}}


def test_checkpoint_from_a_newer_schema_is_refused_naming_the_reset():
    data = json.dumps({"schema": 99, "body": {}}).encode()
    newer = rf"schema 99, newer than this controller reads \({SCHEMA_VERSION}\).*gitops reset-controller"
    with pytest.raises(CheckpointError, match=newer):
        decode(data)


def test_pickled_checkpoint_is_refused():
    with pytest.raises(CheckpointError, match="not JSON"):
        decode(pickle.dumps({"backends": {}}))


def test_memory_storage_keeps_the_last_write():
    storage = MemoryStorage()
    storage.put(encode({"n": 1}))
    storage.put(encode({"n": 2}))
    assert decode(storage.get()) == {"n": 2}
    storage.delete()
    assert storage.get() is None
