"""Scale to zero end to end: the shipped lazy backend (deployments/lazy.toml)
at 0 replicas behind the real controller, autoscaler and proxy."""

from __future__ import annotations

import time
from typing import Iterator

import httpx
import pytest

from tests.support.examples import ShippedExamples, serve_shipped_examples

pytestmark = pytest.mark.real


@pytest.fixture(scope="module")
def served(ray_session: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ShippedExamples]:
    yield from serve_shipped_examples(ray_session, tmp_path_factory.mktemp("code"))


def test_the_first_request_to_an_idle_backend_waits_for_its_cold_start_and_succeeds(served: ShippedExamples) -> None:
    served.backend("lazy", "lazy-first")
    served.endpoint("lazy", "first", "lazy-first")
    assert served.running_ids("lazy-first") == set()
    started = time.monotonic()
    response = httpx.get(f"{served.url}/first", timeout=60)
    assert response.status_code == 200, response.text
    # The replica's constructor alone takes load_s = 1 s: the request waited for it.
    assert time.monotonic() - started >= 1.0
    assert len(served.running_ids("lazy-first")) == 1


def test_a_request_still_without_a_replica_after_cold_start_timeout_is_503(served: ShippedExamples) -> None:
    served.backend("lazy", "lazy-slow", init_kwargs={"load_s": 10.0}, cold_start_timeout_s=1.0)
    served.endpoint("lazy", "slow", "lazy-slow")
    started = time.monotonic()
    response = httpx.get(f"{served.url}/slow", timeout=60)
    waited = time.monotonic() - started
    assert response.status_code == 503 and "retry-after" in response.headers
    assert 1.0 <= waited < 5.0
