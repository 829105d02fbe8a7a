"""The proxy's stages in their one order (`proxy.app.ProxyApp.stages`), and which of them each
endpoint's requests pass: a feature that is off leaves its stage out of the chain, so a plain
endpoint's requests call steering at the start and counting at the end, nothing else."""

from __future__ import annotations

import random

from opentelemetry.sdk.trace import TracerProvider

from proxy.app import ProxyApp
from proxy.observability.capture import CaptureWriter
from proxy.observability.tracing import RequestTracing
from proxy.pipeline.stage import Chain
from proxy.routes.snapshot import ServedEndpoint
from proxy.settings import ProxySettings
from tests.support.proxy_app import FakeCaller, FakeReplica, Proxy, get, run
from vocabulary.spec.endpoints import CaptureConfig, EndpointConfig, LimitsConfig, MatchRule


def names(app: ProxyApp) -> list[str]:
    return [type(stage).__name__ for stage in app.stages]


def test_the_stages_run_in_one_order_and_those_the_proxy_lacks_are_not_there() -> None:
    assert names(ProxyApp(FakeCaller())) == ["Admission", "TokenBudgeting", "Steering", "Shadowing", "Counting"]
    rng = random.Random(0)
    full = ProxyApp(FakeCaller(), ProxySettings(), rng, tracing=RequestTracing(TracerProvider().get_tracer("t"), rng),
                    capture=CaptureWriter("node1:0", rng))
    assert names(full) == ["Admission", "TokenBudgeting", "Steering", "Tracing", "Capture", "Shadowing", "Counting"]


def test_a_plain_endpoint_s_requests_pass_steering_and_counting_only() -> None:
    proxy = Proxy()
    proxy.serve("plain", "/plain", {"b": [FakeReplica("r1")]})
    chain = proxy.app._chains["plain"]
    assert chain.stages("begin") == ["Steering"]
    assert chain.stages("formed") == chain.stages("streaming") == []
    assert chain.stages("answered") == chain.stages("left") == ["Counting"]
    assert not chain.reads_answers  # counting reads no body: no view of one is made per answer
    assert run(get(proxy, "/plain")).content == b"r1"
    assert proxy.recorded.requests == [("plain", "b", 200)]


def test_each_feature_an_endpoint_turns_on_puts_its_stage_in_its_place() -> None:
    rng = random.Random(0)
    app = ProxyApp(FakeCaller(), ProxySettings(), rng, tracing=RequestTracing(TracerProvider().get_tracer("t"), rng),
                   capture=CaptureWriter("node1:0", rng))
    config = EndpointConfig(
        name="busy", route="/busy", traffic={"a": 0.5, "b": 0.5}, shadow={"c": 1.0},
        limits=LimitsConfig(requests_per_s=5, tokens_per_minute=1000), capture=CaptureConfig(sink="file:///nowhere"),
        match=[MatchRule(json="model", value="m", backend="b")],
    )
    served = ServedEndpoint.from_config(config)
    chain = Chain(app.stages, served)
    assert chain.stages("begin") == ["Admission", "Steering", "Tracing"]
    # The body is read between: its tokens are admitted, JSON rules pick again, then the span names the
    # backend and the copies go.
    assert chain.stages("formed") == ["TokenBudgeting", "Steering", "Tracing", "Capture", "Shadowing"]
    assert chain.stages("streaming") == ["TokenBudgeting", "Capture", "Shadowing"]
    assert chain.stages("answered") == ["TokenBudgeting", "Tracing", "Capture", "Shadowing", "Counting"]
    assert chain.stages("left") == ["Tracing", "Counting"]
    assert chain.reads_answers
