"""One tenant, one bucket (issue 50 row 4): the limiter reads the tenant's key as the
app behind it does (Starlette's query parameters, cookies and headers), or refuses
the request (400) when the key is sent more than once; `Authorization` schemes are
read case-insensitively with their whitespace collapsed. A property test drives
header, query and cookie variants through both readers."""

from __future__ import annotations

import string
from typing import Any
from urllib.parse import quote

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from starlette.requests import Request

from proxy.routes.rate_limits import AmbiguousTenant, TenantLimit, tenant_key
from tests.support.proxy_app import FakeReplica, Proxy, replica_set, run
from vocabulary.control.longpoll import RouteEntry, RouteTable
from vocabulary.spec.endpoints import EndpointConfig, LimitsConfig
from vocabulary.spec.keys import KeyKind


def _proxy(key: str) -> Proxy:
    proxy = Proxy()
    config = EndpointConfig(name="chat", route="/chat", traffic={"b": 1.0},
                            limits=LimitsConfig(requests_per_s=0.001, burst=2, key=key))
    table = RouteTable(entries=(RouteEntry(route="/chat", methods=("GET", "POST"), endpoint="chat"),))
    proxy.publish(routes=table, endpoint__chat=config)
    proxy.publish(replicas__b=replica_set("b", [FakeReplica("r1")]))
    return proxy


def _statuses(proxy: Proxy, requests: list[dict[str, Any]]) -> list[tuple[int, str]]:
    async def scenario() -> list[tuple[int, str]]:
        async with proxy.client() as client:
            answers = [await client.get("/chat", **request) for request in requests]
            return [(answer.status_code, answer.text) for answer in answers]

    return run(scenario())


def test_a_duplicated_query_key_is_refused_not_served_past_the_limit() -> None:
    proxy = _proxy("query:api_key")
    answers = _statuses(proxy, [{"params": [("api_key", "junk"), ("api_key", "REAL")]}] * 6)
    assert {status for status, _ in answers} == {400}
    assert "the query parameter api_key appears 2 times" in answers[0][1]
    assert [status for status, _ in _statuses(proxy, [{"params": {"api_key": "REAL"}}] * 3)] == [200, 200, 429]


def test_a_duplicated_cookie_key_is_refused_in_one_header_or_across_two() -> None:
    proxy = _proxy("cookie:tenant")
    twice = [{"headers": {"cookie": "tenant=junk; tenant=REAL"}}] * 3
    across = [{"headers": [("cookie", "tenant=junk"), ("cookie", "tenant=REAL")]}] * 3
    answers = _statuses(proxy, twice + across)
    assert {status for status, _ in answers} == {400} and "the cookie tenant appears 2 times" in answers[0][1]


def test_authorization_schemes_and_whitespace_do_not_make_new_tenants() -> None:
    proxy = _proxy("header:Authorization")
    variants = ["Bearer X", "bearer X", "BEARER X", "Bearer  X", " Bearer\tX "]
    statuses = [status for status, _ in _statuses(proxy, [{"headers": {"authorization": v}} for v in variants])]
    assert statuses == [200, 200, 429, 429, 429]  # burst 2: one bucket for all five
    assert [s for s, _ in _statuses(proxy, [{"headers": {"authorization": "Bearer Y"}}])] == [200]


# --- the property: whatever the spelling, the limiter's key is the app's -----------------------------

_TEXT = st.text(alphabet=string.ascii_letters + string.digits + "-._~!$'()*+,/:@ ", min_size=1, max_size=12)
_WS = st.sampled_from(["", " ", "  ", "\t", " \t "])


def _starlette(query: bytes, headers: list[tuple[bytes, bytes]]) -> Request:
    return Request({"type": "http", "method": "GET", "path": "/", "query_string": query, "headers": headers})


@settings(max_examples=100, deadline=None)
@given(value=_TEXT, noise=st.lists(st.tuples(_TEXT, _TEXT), max_size=3), plus=st.booleans())
def test_a_query_key_is_read_as_starlette_reads_it_or_refused(value: str, noise: list[tuple[str, str]], plus: bool) -> None:
    pairs = [(k, v) for k, v in noise if k.strip() != "api_key"] + [("api_key", value)]
    encode = (lambda text: quote(text, safe="").replace("%20", "+")) if plus else (lambda text: quote(text, safe=""))
    query = "&".join(f"{encode(k)}={encode(v)}" for k, v in pairs).encode()
    assert tenant_key(KeyKind.QUERY, "api_key", query, []) == _starlette(query, []).query_params["api_key"].encode()
    with pytest.raises(AmbiguousTenant):
        tenant_key(KeyKind.QUERY, "api_key", query + b"&api_key=" + encode("other").encode(), [])


_COOKIE_VALUE = st.text(alphabet=string.ascii_letters + string.digits + "-._~!$'()*+/:@", min_size=1, max_size=12)


@settings(max_examples=100, deadline=None)
@given(value=_COOKIE_VALUE, before=_WS, after=_WS, quoted=st.booleans(),
       others=st.lists(st.tuples(st.sampled_from(["a", "b", "sid"]), _COOKIE_VALUE), max_size=3))
def test_a_cookie_key_is_read_as_starlette_reads_it_or_refused(
    value: str, before: str, after: str, quoted: bool, others: list[tuple[str, str]]
) -> None:
    shown = f'"{value}"' if quoted else value
    pairs = [f"{k}={v}" for k, v in others] + [f"{before}tenant{after}={before}{shown}{after}"]
    header = "; ".join(pairs).encode()
    read = tenant_key(KeyKind.COOKIE, "tenant", b"", [(b"cookie", header)])
    assert read == _starlette(b"", [(b"cookie", header)]).cookies["tenant"].encode()
    with pytest.raises(AmbiguousTenant):
        tenant_key(KeyKind.COOKIE, "tenant", b"", [(b"cookie", header + b"; tenant=x")])


_TOKEN = st.text(alphabet=string.ascii_letters + string.digits + "-._~+/=", min_size=1, max_size=20)


@settings(max_examples=100, deadline=None)
@given(token=_TOKEN, scheme=st.sampled_from(["Bearer", "Basic", "Token"]), flips=st.lists(st.booleans(), min_size=6),
       lead=_WS, middle=st.sampled_from([" ", "  ", "\t", " \t"]), trail=_WS, name=st.sampled_from(["x-tenant", "authorization"]))
def test_header_keys_ignore_surrounding_whitespace_and_authorization_the_scheme_s_case(
    token: str, scheme: str, flips: list[bool], lead: str, middle: str, trail: str, name: str
) -> None:
    limit = TenantLimit.from_config("chat", LimitsConfig(requests_per_s=1, key=f"header:{name}"))
    assert limit is not None
    cased = "".join(c.upper() if flip else c.lower() for c, flip in zip(scheme, flips * 2))
    canonical = f"{scheme} {token}".encode()
    spelled = f"{lead}{cased if name == 'authorization' else scheme}{middle if name == 'authorization' else ' '}{token}{trail}"
    assert limit.slot(b"", [(name.encode(), spelled.encode())]) == limit.slot(b"", [(name.encode(), canonical)])
    assert limit.slot(b"", [(name.encode(), canonical + b"z")]) != limit.slot(b"", [(name.encode(), canonical)])
    with pytest.raises(AmbiguousTenant):
        limit.slot(b"", [(name.encode(), canonical), (name.encode(), canonical)])
