"""A request's deadline as it travels (`vocabulary.request_path.deadlines`): the client's X-Request-Timeout
read (or refused with a reason), capped by the endpoint's timeout, carried as seconds left behind the route
prefix, and re-anchored on the receiver's own clock."""

from __future__ import annotations

import pytest

from vocabulary.request_path.deadlines import (
    DEADLINE_HEADER, BadTimeout, Deadline, capped, client_timeout, parse_timeout, split_deadline, with_deadline,
)
from vocabulary.request_path.wire import make_request, split_root_path, with_root_path

pytestmark = pytest.mark.pure


@pytest.mark.parametrize(("value", "seconds"), [(b"0.2", 0.2), (b"5", 5.0), (b" 1.5 ", 1.5), (b"0", 0.0), (b"1e-1", 0.1)])
def test_a_number_of_seconds_is_read(value: bytes, seconds: float) -> None:
    assert parse_timeout(value) == pytest.approx(seconds)


@pytest.mark.parametrize("value", [b"", b"soon", b"-1", b"nan", b"inf", b"200ms", b"1_0", b"0x10"])
def test_anything_else_is_refused_with_what_was_sent_and_what_is_wanted(value: bytes) -> None:
    with pytest.raises(BadTimeout) as refused:
        parse_timeout(value)
    text = str(refused.value)
    assert "X-Request-Timeout must be a number of seconds >= 0" in text and repr(value.decode().strip()) in text


def test_a_long_bad_value_is_shortened_in_the_reason() -> None:
    with pytest.raises(BadTimeout) as refused:
        parse_timeout(b"x" * 500)
    assert len(str(refused.value)) < 200


def test_the_client_s_header_is_found_among_others_and_absent_is_none() -> None:
    assert client_timeout([(b"host", b"h"), (b"x-request-timeout", b"0.25")]) == 0.25
    assert client_timeout([(b"host", b"h")]) is None
    assert client_timeout([]) is None


def test_the_endpoint_s_timeout_caps_the_client_s() -> None:
    assert capped(0.2, 10.0) == 0.2
    assert capped(60.0, 10.0) == 10.0
    assert capped(None, 10.0) == 10.0


def test_seconds_left_travel_behind_the_route_prefix_and_come_off_first() -> None:
    request = make_request("GET", "/x", b"", with_root_path([(b"host", b"h")], "/app"))
    carried = with_deadline(request, 0.1234567)
    assert carried[3][-1] == (DEADLINE_HEADER, b"0.123457")
    assert request[3][-1][0] != DEADLINE_HEADER  # the request itself is left as it was (retries reuse it)
    plain, left = split_deadline(carried)
    assert left == pytest.approx(0.123457) and plain == request
    assert split_root_path(plain[3]) == ([(b"host", b"h")], "/app")


def test_a_request_without_a_deadline_is_itself_and_none() -> None:
    request = make_request("GET", "/x", b"", [(b"host", b"h")])
    assert split_deadline(request) == (request, None)
    assert split_deadline(make_request("GET", "/x")) == (make_request("GET", "/x"), None)


@pytest.mark.parametrize("value", [b"soon", b"nan", b"inf"])
def test_a_malformed_carried_deadline_is_no_time_left_never_none(value: bytes) -> None:
    request = make_request("GET", "/x", b"", [(DEADLINE_HEADER, value)])
    assert split_deadline(request)[1] == 0.0


def test_no_time_left_is_sent_as_zero_never_negative() -> None:
    assert split_deadline(with_deadline(make_request("GET", "/x"), -3.0))[1] == 0.0


def test_a_received_deadline_is_anchored_on_the_receiver_s_clock() -> None:
    # The sender's clock reads 1000.0 with 0.2 s left; the receiver's clock reads 5.0 when it arrives.
    sender = Deadline(1000.2)
    left = sender.left(1000.0)
    receiver = Deadline.after(left, 5.0)
    assert receiver.at == pytest.approx(5.2)
    assert receiver.left(5.15) == pytest.approx(0.05)
    assert not receiver.passed(5.19) and receiver.passed(5.21)
    assert receiver.left(9.0) == 0.0  # never below zero
    assert Deadline.after(-1.0, 5.0).passed(5.0)
