"""What the capture tests share: counts of what request capture wrote, and the proxy app
capturing an endpoint to a tmp directory (`capture_app`) with its records read back (`records`).

Moved out of tests/component/test_capture.py, whose tests use them too."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from proxy.app import ProxyApp
from proxy.observability.capture import CaptureWriter
from proxy.routes.subscriptions import Subscriptions
from proxy.settings import ProxySettings
from tests.support.proxy_app import FakeCaller, FakeReplica, replica_set
from vocabulary.control.longpoll import RouteEntry, RouteTable
from vocabulary.request_path.wire import WireRequest, WireResponse
from vocabulary.spec.endpoints import CaptureConfig, EndpointConfig

class Counts:
    def __init__(self) -> None:
        self.results: list[str] = []

    def __call__(self, result: str) -> None:
        self.results.append(result)


RULES = ("header:x-api-key", "json:$.password", "json:$.card.number", "json:$.token", "json:$.items.secret")


async def answer_with_a_secret(request: WireRequest) -> WireResponse:
    body = json.dumps({"ok": True, "token": "resp-token-42", "got_bytes": len(request[4])})
    return 200, [(b"content-type", b"application/json"), (b"set-cookie", b"session=abc123")], body.encode()


def capture_app(tmp_path: Path, writer: CaptureWriter, rollout_step: int = 0, **capture: Any) -> ProxyApp:
    """The proxy app with endpoint `login` captured to `tmp_path/sink` (every request, the `RULES`),
    served by one fake replica whose answers carry a secret (a token and a cookie)."""
    rng = random.Random(0)
    app = ProxyApp(FakeCaller(), ProxySettings(), rng, capture=writer)
    config = EndpointConfig(
        name="login", route="/login", traffic={"v1": 1.0},
        capture=CaptureConfig(**{"sample": 1.0, "sink": f"file://{tmp_path}/sink", "redact": RULES, **capture}),
        rollout_step=rollout_step,
    )
    table = RouteTable(entries=(RouteEntry(route="/login", methods=("GET", "POST"), endpoint="login"),))
    replicas = replica_set("v1", [FakeReplica("r1", answer_with_a_secret)]).model_copy(update={"commit": "c0ffee"})
    app.install(Subscriptions(ProxySettings(), rng).apply(
        {"routes": (1, table), "endpoint:login": (2, config), "replicas:v1": (3, replicas)}
    ))
    return app


def records(directory: Path) -> list[dict[str, Any]]:
    """Every record of the sink `directory`, oldest file first."""
    return [json.loads(line) for path in sorted(directory.glob("*.jsonl")) for line in path.read_text().splitlines()]
