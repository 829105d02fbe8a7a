"""The progressive-delivery example (deployments/canary.toml) loads and its app fails as told."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from starlette.requests import Request

from deployments.apps.greeter import Greeter
from gitops.specs.loading import Loader
from vocabulary.spec.endpoints import ShadowCompare
from vocabulary.spec.rollout_config import OnFailure

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_the_canary_example_declares_every_progressive_delivery_key() -> None:
    result = Loader().load_directory(REPO_ROOT / "deployments", root=REPO_ROOT)
    assert result.state is not None, [str(error) for error in result.errors]
    greet = result.state.endpoints["greet"]
    assert greet.rollout is not None and greet.rollout.on_failure is OnFailure.ROLLBACK
    assert [rule.backend for rule in greet.match] == ["greeter-v2"] and greet.sticky == "header:x-user-id"
    assert greet.shadow_compare is ShadowCompare.JSON and "served_at" in greet.shadow_ignore
    update = result.state.backends["greeter-v2"].update
    assert update is not None and (update.max_surge, update.max_unavailable) == (0, 1)


def get(greeter: Greeter) -> tuple[int, dict]:
    scope = {"type": "http", "method": "GET", "path": "/greet", "query_string": b"name=ada", "headers": []}
    reply = asyncio.run(greeter(Request(scope)))
    return reply.status_code, json.loads(reply.body)


def test_the_greeter_answers_with_its_version() -> None:
    status, body = get(Greeter("v2"))
    assert (status, body["version"], body["greeting"]) == (200, "v2", "hello, ada")


def test_the_greeter_fails_exactly_its_error_share() -> None:
    greeter = Greeter("v2")
    greeter.reconfigure({"error_share": 0.2})
    statuses = [get(greeter)[0] for _ in range(100)]
    assert statuses.count(500) == 20 and statuses[:5] == [200, 200, 200, 200, 500]
