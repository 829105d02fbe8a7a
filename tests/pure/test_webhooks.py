"""Webhook signatures (GitHub's X-Hub-Signature-256) and the rate limit."""

from __future__ import annotations

import pytest

from gitops.admin.webhooks import RateLimiter, Verdict, read_secret, sign, verify
from gitops.errors import UserError

SECRET = b"s3cret"
BODY = b'{"ref": "refs/heads/main"}'


def test_signature_matches_githubs_documented_example() -> None:
    # From GitHub's "Validating webhook deliveries" page.
    assert sign(b"It's a Secret to Everybody", b"Hello, World!") == (
        "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
    )


def test_a_correct_signature_is_valid() -> None:
    assert verify(SECRET, BODY, sign(SECRET, BODY)) is Verdict.VALID


@pytest.mark.parametrize("header", [None, ""])
def test_a_missing_signature_is_missing(header: str | None) -> None:
    assert verify(SECRET, BODY, header) is Verdict.MISSING


@pytest.mark.parametrize(
    "header",
    [
        sign(b"other", BODY),
        sign(SECRET, BODY + b" "),
        sign(SECRET, BODY).removeprefix("sha256="),
        "sha1=" + sign(SECRET, BODY).removeprefix("sha256="),
        "sha256=zz",
    ],
)
def test_a_wrong_signature_is_invalid(header: str) -> None:
    assert verify(SECRET, BODY, header) is Verdict.INVALID


def test_rate_limiter_allows_a_burst_then_refuses() -> None:
    limiter = RateLimiter(per_second=1.0, burst=3)
    assert [limiter.allow(now=100.0) for _ in range(4)] == [True, True, True, False]


def test_rate_limiter_refills_over_time() -> None:
    limiter = RateLimiter(per_second=2.0, burst=1)
    assert limiter.allow(now=0.0)
    assert not limiter.allow(now=0.1)
    assert limiter.allow(now=0.6)


def test_secret_file_is_read_without_trailing_newline(tmp_path) -> None:
    path = tmp_path / "secret"
    path.write_text("abc\n")
    assert read_secret(path) == b"abc"


def test_missing_secret_file_is_a_one_line_user_error(tmp_path) -> None:
    with pytest.raises(UserError, match="--webhook-secret-file .*nope"):
        read_secret(tmp_path / "nope")


def test_empty_secret_file_is_refused(tmp_path) -> None:
    path = tmp_path / "secret"
    path.write_text("\n")
    with pytest.raises(UserError, match="empty"):
        read_secret(path)
