"""The proxy's progressive-delivery behaviour in-process: header match, sticky split,
shadow comparison and the per-backend counts its load reports carry."""

from __future__ import annotations

import asyncio
from collections import Counter

from tests.support.delivery import answering, get_all, proxy, settle
from tests.support.proxy_app import FakeReplica
from vocabulary.request_path.wire import WireRequest, WireResponse

SPLIT = {"traffic": {"v1": 0.5, "v2": 0.5}}


def test_a_matching_header_pins_the_request_to_its_backend_whatever_the_weights() -> None:
    app, _ = proxy({"v1": FakeReplica("v1"), "v2": FakeReplica("v2")}, traffic={"v1": 1.0},
                   match=[{"header": "x-canary", "value": "always", "backend": "v2"}])
    replies = asyncio.run(get_all(app, [{"x-canary": "always"}] * 20 + [{}] * 20))
    assert [r.text for r in replies] == ["v2"] * 20 + ["v1"] * 20


def test_one_sticky_user_always_reaches_the_same_backend() -> None:
    app, _ = proxy({"v1": FakeReplica("v1"), "v2": FakeReplica("v2")}, sticky="header:x-user", **SPLIT)
    for user in ("ada", "bob", "cy"):
        replies = asyncio.run(get_all(app, [{"x-user": user}] * 10))
        assert len({r.text for r in replies}) == 1


def test_sticky_users_as_a_whole_follow_the_split() -> None:
    app, _ = proxy({"v1": FakeReplica("v1"), "v2": FakeReplica("v2")}, sticky="cookie:uid",
                   traffic={"v1": 0.8, "v2": 0.2})
    replies = asyncio.run(get_all(app, [{"cookie": f"uid=user-{n}"} for n in range(2000)]))
    seen = Counter(r.text for r in replies)
    # Chi-square with 1 degree of freedom under 10.83 (p = 0.001).
    assert sum((seen[b] - 2000 * w) ** 2 / (2000 * w) for b, w in {"v1": 0.8, "v2": 0.2}.items()) < 10.83


def test_shadow_replies_are_compared_with_the_primary_s_and_mismatches_sampled() -> None:
    primary = FakeReplica("v1", answering({"n": 1, "at": 1}))
    candidate = FakeReplica("v2", answering({"n": 2, "at": 2}))
    app, recorded = proxy({"v1": primary, "v2": candidate}, traffic={"v1": 1.0}, shadow={"v2": 1.0},
                          shadow_compare="json", shadow_ignore=["at"])

    async def scenario() -> None:
        await get_all(app, [{}] * 3)
        await settle(app)

    asyncio.run(scenario())
    assert recorded.compared == [("e", "v2", False)] * 3
    # Counted too for the load reports (what the controller adds up for promotions' evidence).
    stats = app.endpoint_request_stats()["e"]
    assert (stats.requests, stats.compared, stats.mismatched) == (3, 3, 3)
    sample = app.mismatches.recent()[0]
    assert (sample.path, sample.primary_status, sample.shadow_status, sample.diff) == (
        "/e", 200, 200, "$.n: number values differ")


def test_an_endpoint_that_opts_in_shows_the_values_in_its_mismatches() -> None:
    app, _ = proxy({"v1": FakeReplica("v1", answering({"n": 1})), "v2": FakeReplica("v2", answering({"n": 2}))},
                   traffic={"v1": 1.0}, shadow={"v2": 1.0}, shadow_compare="json", shadow_values=True)

    async def scenario() -> None:
        await get_all(app, [{}])
        await settle(app)

    asyncio.run(scenario())
    assert app.mismatches.recent()[0].diff == "$.n: 1 != 2"


def test_ignored_keys_make_replies_that_differ_only_there_a_match() -> None:
    app, recorded = proxy({"v1": FakeReplica("v1", answering({"n": 1, "at": 1})),
                           "v2": FakeReplica("v2", answering({"n": 1, "at": 2}))},
                          traffic={"v1": 1.0}, shadow={"v2": 1.0}, shadow_compare="json", shadow_ignore=["at"])

    async def scenario() -> None:
        await get_all(app, [{}] * 2)
        await settle(app)

    asyncio.run(scenario())
    assert recorded.compared == [("e", "v2", True)] * 2 and app.mismatches.recent() == []


def test_a_slow_shadow_is_compared_without_delaying_the_primary() -> None:
    gate = asyncio.Event()

    async def slow(request: WireRequest) -> WireResponse:
        await gate.wait()
        return 500, [], b"late"

    app, recorded = proxy({"v1": FakeReplica("v1"), "v2": FakeReplica("v2", slow)},
                          traffic={"v1": 1.0}, shadow={"v2": 1.0}, shadow_compare="status")

    async def scenario() -> str:
        reply = (await asyncio.wait_for(get_all(app, [{}]), timeout=5))[0]
        gate.set()
        await settle(app)
        return reply.text

    assert asyncio.run(scenario()) == "v1"
    assert recorded.compared == [("e", "v2", False)]


def test_the_proxy_counts_answers_and_5xx_per_backend_for_its_load_reports() -> None:
    app, _ = proxy({"v1": FakeReplica("v1"), "v2": FakeReplica("v2", answering({}, 500))},
                   traffic={"v1": 1.0}, match=[{"header": "x-canary", "value": "1", "backend": "v2"}])
    asyncio.run(get_all(app, [{}] * 4 + [{"x-canary": "1"}] * 3))
    stats = app.request_stats()
    assert (stats["v1"].requests, stats["v1"].errors) == (4, 0)
    assert (stats["v2"].requests, stats["v2"].errors) == (3, 3)
