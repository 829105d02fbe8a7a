"""One grammar for `KIND:NAME` request keys (`vocabulary.spec.keys`), used by a backend's
routing key, an endpoint's sticky key and its limits key alike; one HTTP token, defined once."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from vocabulary.spec.endpoints import EndpointConfig, LimitsConfig
from vocabulary.spec.keys import LIMIT_KINDS, ROUTING_KINDS, STICKY_KINDS, KeyKind, key_forms, request_key, split_key
from vocabulary.spec.routing import RoutingConfig, RoutingPolicy

ROOT = Path(__file__).resolve().parents[2]


def routing(key: str) -> RoutingConfig:
    return RoutingConfig(policy=RoutingPolicy.CONSISTENT_HASH, key=key)


def sticky(key: str) -> EndpointConfig:
    return EndpointConfig(name="e", route="/e", traffic={"b": 1.0}, sticky=key)


def limits(key: str) -> LimitsConfig:
    return LimitsConfig(requests_per_s=1, key=key)


@pytest.mark.parametrize(
    ("kinds", "forms"),
    [
        (ROUTING_KINDS, "'header:NAME', 'cookie:NAME', 'query:NAME' or 'json:FIELD'"),
        (LIMIT_KINDS, "'header:NAME', 'cookie:NAME' or 'query:NAME'"),
        (STICKY_KINDS, "'header:NAME' or 'cookie:NAME'"),
    ],
)
def test_each_use_names_the_forms_it_allows(kinds: tuple[KeyKind, ...], forms: str) -> None:
    assert key_forms(kinds) == forms


@pytest.mark.parametrize("make", [routing, sticky, limits])
def test_every_use_reads_header_and_cookie_keys_alike(make: object) -> None:
    for written, kept in [("header:X-User", "header:x-user"), ("cookie:Session", "cookie:Session")]:
        value = make(written)  # type: ignore[operator]
        key = value.sticky if isinstance(value, EndpointConfig) else value.key
        assert key == kept and split_key(key) == (KeyKind(kept.split(":")[0]), kept.split(":", 1)[1])


@pytest.mark.parametrize("make", [routing, sticky, limits])
@pytest.mark.parametrize("written", ["x-user", "header:", "header:x user", "cookie:a b", "cookie:a;b", "Header:x"])
def test_every_use_refuses_the_same_malformed_keys(make: object, written: str) -> None:
    with pytest.raises(ValueError, match="must be 'header:NAME'"):
        make(written)  # type: ignore[operator]


def test_query_and_json_names_are_any_text_on_one_line() -> None:
    assert request_key("query:user id", ROUTING_KINDS) == "query:user id"
    assert request_key("json:a.b", ROUTING_KINDS) == "json:a.b"
    for written in ["query: ", "json:a\nb", "query:a\0"]:
        with pytest.raises(ValueError):
            request_key(written, ROUTING_KINDS)
    with pytest.raises(ValueError, match=r"\(got 'json:x'\)"):
        limits("json:x")


def _product_sources() -> list[Path]:
    return [path for top in ("vocabulary", "gitops", "controller", "proxy", "replica", "ray_gitops", "datalink",
                             "telemetry") for path in (ROOT / top).rglob("*.py")]


def test_the_http_token_and_the_key_grammar_are_written_once() -> None:
    token = "!#$%&'*+.^_`|~-"
    grammar = re.compile(r"\(header\|cookie")
    tokens = [str(p.relative_to(ROOT)) for p in _product_sources() if token in p.read_text()]
    grammars = [str(p.relative_to(ROOT)) for p in _product_sources() if grammar.search(p.read_text())]
    # httpedge (bytes, and it imports nothing of ours) keeps its own; every spec key and header name uses this one.
    assert tokens == ["vocabulary/spec/keys.py"]
    assert grammars == []
