"""Token budgets' arithmetic (`proxy.routes.token_budgets`, `proxy.routes.rate_limits.take_token`):
the estimate a request is admitted on, the usage read from a body or a stream cut anywhere, the
settlement, the refill that repays a debt, Retry-After and the OpenAI error body."""

from __future__ import annotations

import json

import pytest

from proxy.routes.rate_limits import LocalBuckets, TenantLimit, take_token
from proxy.routes.token_budgets import (
    CARRY_BYTES, TokenBudget, UsageWatch, estimate, refusal_body, retry_after_s, settlement, tenant_label,
)
from vocabulary.spec.endpoints import LimitsConfig

CLIENT_LEFT = 499


def body(**fields: object) -> bytes:
    return json.dumps({"model": "sim", "messages": [{"role": "user", "content": "hello there"}], **fields}).encode()


# --- the estimate -----------------------------------------------------------------------------------

def test_the_prompt_is_estimated_at_four_bytes_a_token_rounded_up() -> None:
    assert estimate(b"x" * 400, 10_000) == 100
    assert estimate(b"x" * 401, 10_000) == 101
    assert estimate(b"", 10_000) == 1  # a request costs at least one token


def test_the_reply_asked_for_is_added() -> None:
    plain = body()
    assert estimate(body(max_tokens=300), 10_000) == -(-len(body(max_tokens=300)) // 4) + 300
    assert estimate(body(max_completion_tokens=50), 10_000) == -(-len(body(max_completion_tokens=50)) // 4) + 50
    assert estimate(plain, 10_000) == -(-len(plain) // 4)


@pytest.mark.parametrize("value", [True, -5, 2.5, "100", None])
def test_a_max_tokens_that_is_no_count_adds_nothing(value: object) -> None:
    written = body(max_tokens=value)
    assert estimate(written, 10_000) == -(-len(written) // 4)


def test_only_the_top_level_max_tokens_counts_and_a_body_that_is_not_json_is_its_bytes() -> None:
    nested = json.dumps({"messages": [], "extra": {"max_tokens": 5000}}).encode()
    assert estimate(nested, 10_000) == -(-len(nested) // 4)
    broken = b'{"max_tokens": 5000, '
    assert estimate(broken, 10_000) == -(-len(broken) // 4)


def test_the_estimate_is_capped_at_the_bucket_so_a_full_bucket_admits_any_request() -> None:
    assert estimate(body(max_tokens=1_000_000), 2_000) == 2_000
    assert estimate(b"x" * 1_000_000, 2_000) == 2_000


# --- the usage --------------------------------------------------------------------------------------

COMPLETION = json.dumps({
    "id": "c1", "object": "chat.completion",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}}],
    "usage": {"prompt_tokens": 12, "completion_tokens": 30, "total_tokens": 42,
              "prompt_tokens_details": {"cached_tokens": 0}},
    "note": 'after it, text that says "usage": {"total_tokens": 1} and a value "usage"',
    "tag": "usage",
}).encode()

STREAM = [
    b'data: {"object": "chat.completion.chunk", "choices": [{"delta": {"content": "tok0"}}]}\n\n',
    b'data: {"object": "chat.completion.chunk", "choices": [{"delta": {"content": " tok1"}}]}\n\n',
    b'data: {"object": "chat.completion.chunk", "choices": [], '
    b'"usage": {"prompt_tokens": 7, "completion_tokens": 2, "total_tokens": 9}}\n\n',
    b"data: [DONE]\n\n",
]


def watched(pieces: list[bytes]) -> int | None:
    watch = UsageWatch()
    for piece in pieces:
        watch.feed(piece)
    return watch.total


def test_a_json_answer_s_usage_is_read_and_text_that_looks_like_one_is_not() -> None:
    assert watched([COMPLETION]) == 42


def test_the_usage_is_read_wherever_the_pieces_are_cut() -> None:
    for cut in range(1, len(COMPLETION)):
        assert watched([COMPLETION[:cut], COMPLETION[cut:]]) == 42, cut
    stream = b"".join(STREAM)
    for cut in range(1, len(stream)):
        assert watched([stream[:cut], stream[cut:]]) == 9, cut
    assert watched([bytes([byte]) for byte in stream]) == 9  # one byte a chunk


def test_a_stream_s_last_usage_counts() -> None:
    assert watched(STREAM) == 9
    cumulative = [b'data: {"usage": {"total_tokens": %d}}\n\n' % n for n in (3, 4, 5)]
    assert watched(cumulative) == 5  # an engine reporting usage on every chunk: the last is the whole


@pytest.mark.parametrize("usage, total", [
    (b'{"prompt_tokens": 5, "completion_tokens": 6}', 11),
    (b'{"total_tokens": 8, "prompt_tokens": 1}', 8),
    (b"null", None),
    (b'{"total_tokens": -1}', None),
    (b'{"total_tokens": true}', None),
    (b"{}", None),
])
def test_a_usage_is_its_total_else_prompt_plus_completion(usage: bytes, total: int | None) -> None:
    assert watched([b'{"id": 1, "usage": ' + usage + b"}"]) == total


def test_an_answer_without_usage_has_none_and_nothing_is_kept_between_its_pieces() -> None:
    watch = UsageWatch()
    for piece in (b'{"text": "the usage of words"}', b"x" * 100_000):
        watch.feed(piece)
    assert watch.total is None and watch._carry == b""


def test_at_most_carry_bytes_are_kept_between_two_chunks() -> None:
    watch = UsageWatch()
    watch.feed(b'data: {"usage": {"total_tokens": 3, "pad": "' + b"x" * (2 * CARRY_BYTES))
    assert len(watch._carry) <= CARRY_BYTES


# --- the bucket: take, settle, refill ---------------------------------------------------------------

def test_a_bucket_takes_an_estimate_or_says_when_it_will_hold_it() -> None:
    assert take_token(1000.0, 0.0, 0.0, 10.0, 1000, 400) == (600.0, 0.0)
    assert take_token(100.0, 0.0, 0.0, 10.0, 1000, 400) == (100.0, 30.0)  # 300 missing at 10 a second


def test_a_settlement_may_take_the_bucket_below_zero_and_the_refill_repays_it() -> None:
    tokens, _ = take_token(100.0, 0.0, 0.0, 10.0, 1000, 600, force=True)
    assert tokens == -500.0
    tokens, wait_s = take_token(tokens, 0.0, 20.0, 10.0, 1000, 400)  # 20 s later: -300
    assert (tokens, wait_s) == (-300.0, 70.0)
    assert take_token(-300.0, 20.0, 90.0, 10.0, 1000, 400) == (0.0, 0.0)


def test_a_refund_fills_the_bucket_up_to_its_size_only() -> None:
    assert take_token(900.0, 0.0, 0.0, 10.0, 1000, -300, force=True) == (1000.0, 0.0)


@pytest.mark.parametrize("estimated, used, status, amount", [
    (400, 900, 200, 500),  # more than estimated: the rest charged
    (400, 100, 200, -300),  # less: the difference given back
    (400, 100, 500, -300),  # a usage counts whatever the status
    (400, None, 200, None),  # a success without usage: the estimate stands
    (400, None, CLIENT_LEFT, None),  # the client left: the engine may have spent it
    (400, None, 503, -400),  # no replica, a timeout, the engine's error: nothing was spent
    (400, None, 429, -400),
])
def test_the_settlement(estimated: int, used: int | None, status: int, amount: int | None) -> None:
    assert settlement(estimated, used, status, CLIENT_LEFT) == amount


def test_a_settled_debit_leaves_the_bucket_as_if_the_usage_had_been_taken() -> None:
    buckets = LocalBuckets()
    assert buckets.take(7, 10.0, 1000, 0.0, 400) == 0.0
    buckets.charge(7, 10.0, 1000, 0.0, 900 - 400)
    assert buckets.take(7, 10.0, 1000, 0.0, 101) == pytest.approx(0.1)  # 100 left: 1 missing
    assert buckets.take(7, 10.0, 1000, 0.0, 100) == 0.0


# --- the budget, its tenants and its refusal --------------------------------------------------------

def test_each_node_enforces_its_share_of_a_budget() -> None:
    config = LimitsConfig(tokens_per_minute=6000, key="header:authorization")
    one = TokenBudget.from_config("chat", config)
    two = TokenBudget.from_config("chat", config, nodes=2)
    assert one is not None and (one.rate, one.capacity) == (100.0, 6000)
    assert two is not None and (two.rate, two.capacity) == (50.0, 3000)
    assert TokenBudget.from_config("chat", LimitsConfig(requests_per_s=1)) is None
    assert TokenBudget.from_config("chat", None) is None
    assert TenantLimit.from_config("chat", config) is None  # a budget alone: no request bucket


def test_a_tenant_s_token_bucket_is_not_its_request_bucket_and_its_label_is_a_hash() -> None:
    config = LimitsConfig(requests_per_s=1, tokens_per_minute=6000, key="header:authorization")
    budget, limit = TokenBudget.from_config("chat", config), TenantLimit.from_config("chat", config)
    assert budget is not None and limit is not None
    ada, bob = [(b"authorization", b"Bearer ada")], [(b"authorization", b"Bearer bob")]
    assert budget.slot(b"", ada) != limit.slot(b"", ada)
    assert budget.slot(b"", ada) == budget.slot(b"", [(b"authorization", b"bearer  ada")])
    labels = {tenant_label(budget.slot(b"", ada)), tenant_label(budget.slot(b"", bob))}
    assert len(labels) == 2 and all(len(label) == 8 and int(label, 16) >= 0 for label in labels)
    assert not any("ada" in label or "bob" in label for label in labels)


def test_retry_after_is_whole_seconds_and_at_least_one() -> None:
    assert [retry_after_s(wait) for wait in (0.01, 1.0, 1.2, 30.0)] == [1, 1, 2, 30]


def test_the_refusal_is_openai_s_error_shape() -> None:
    budget = TokenBudget.from_config("chat", LimitsConfig(tokens_per_minute=6000))
    assert budget is not None
    error = json.loads(refusal_body(budget, 425, 20))["error"]
    assert (error["type"], error["code"], error["param"]) == ("rate_limit_exceeded", "rate_limit_exceeded", None)
    assert "tokens per minute" in error["message"] and "6000" in error["message"] and "20s" in error["message"]
