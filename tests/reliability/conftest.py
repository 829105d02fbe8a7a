"""Fixtures of the reliability scenarios.

- `serving`: one controller of the reliability tests' own (namespace, proxy
  port) on the session's Ray, shared by the scenarios that kill its parts
  (each waits for it to recover); shut down at the end, leaving no actor.
- `backend`: a backend name of the test's own, retired after it.
- `window_s`: how long the steady load runs before a fault and after
  recovery (short in `make test`, long in `make reliability`).

Every scenario here is marked `real` (or `slow`) by the tiers hook of
tests/conftest.py, from the folder.
"""

from __future__ import annotations

import uuid
from typing import Iterator

import pytest

from tests.support.results import load_window_s
from tests.support.serving import Serving
from tests.support.stack import run


@pytest.fixture(scope="session")
def serving(ray_session: str) -> Iterator[Serving]:
    built = Serving(f"{ray_session}-rel-{uuid.uuid4().hex[:6]}")
    yield built
    assert built.shutdown() == [], "actors left behind after shutdown"


@pytest.fixture
def backend(serving: Serving) -> Iterator[str]:
    name = f"b{uuid.uuid4().hex[:6]}"
    yield name
    if name in run(serving.client.get_state()).backends:
        serving.retire(name)


@pytest.fixture
def window_s() -> float:
    return load_window_s()
