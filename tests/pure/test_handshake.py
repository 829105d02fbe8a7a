"""The TCP data path's handshake: both ends prove they know the replica's
secret before a frame is decoded, however the bytes are split, and anything
else — a wrong secret, garbage, a pickle, a replayed or reflected proof — is
refused at the first byte that gives it away."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from datalink.frames import Kind, encode
from datalink.handshake import (
    HELLO_BYTES,
    MAGIC,
    PROOF_BYTES,
    Handshake,
    HandshakeError,
    Role,
    new_secret,
)
from vocabulary.request_path.wire import DataAddress

SECRET = b"s" * 32


def exchange(proxy: Handshake, replica: Handshake, after: bytes = b"") -> tuple[bytes | None, bytes | None]:
    """Run both sides to the end, in whole messages; what each saw after the other's proof."""
    to_replica, proxy_rest = proxy.feed(replica.greeting())
    to_proxy, replica_rest = replica.feed(proxy.greeting())
    more, proxy_rest = proxy.feed(to_proxy)
    assert more == b""
    more, replica_rest = replica.feed(to_replica + after)
    assert more == b""
    return proxy_rest, replica_rest


def split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({0, len(data), *(cut % (len(data) + 1) for cut in cuts)})
    return [data[a:b] for a, b in zip(points, points[1:])]


def test_two_ends_with_the_same_secret_prove_themselves_and_frames_after_the_proof_come_out() -> None:
    proxy, replica = Handshake(Role.PROXY, SECRET), Handshake(Role.REPLICA, SECRET)
    frame = encode(Kind.REQUEST, 1, "hello")
    assert exchange(proxy, replica, after=frame) == (b"", frame)
    assert proxy.done and replica.done
    with pytest.raises(HandshakeError):
        replica.feed(b"more")  # over: frames go to the decoder now


@given(st.lists(st.integers(min_value=0, max_value=200), max_size=8))
def test_the_bytes_may_arrive_in_any_pieces(cuts: list[int]) -> None:
    proxy, replica = Handshake(Role.PROXY, SECRET), Handshake(Role.REPLICA, SECRET)
    to_proxy = replica.greeting()
    answer, _ = proxy.feed(b"")  # nothing yet
    assert answer == b""
    # The replica answers the proxy's hello with its proof.
    proof, rest = replica.feed(proxy.greeting())
    assert len(proof) == PROOF_BYTES and rest is None
    written, seen = b"", None
    for piece in split(to_proxy + proof + b"frames", cuts):
        if seen is not None:
            seen += piece  # the decoder's from here on
            continue
        out, seen = proxy.feed(piece)
        written += out
    assert proxy.done and len(written) == PROOF_BYTES and seen == b"frames"
    out, rest = replica.feed(written)
    assert (out, rest) == (b"", b"") and replica.done


def test_a_wrong_secret_is_refused_on_both_sides() -> None:
    proxy, replica = Handshake(Role.PROXY, b"x" * 32), Handshake(Role.REPLICA, SECRET)
    to_replica, _ = proxy.feed(replica.greeting())
    to_proxy, _ = replica.feed(proxy.greeting())
    with pytest.raises(HandshakeError, match="does not know"):
        proxy.feed(to_proxy)
    with pytest.raises(HandshakeError, match="does not know"):
        replica.feed(to_replica + encode(Kind.REQUEST, 1, "never decoded"))
    assert not replica.done


@pytest.mark.parametrize(
    "first",
    [
        encode(Kind.REQUEST, 1, "a pickle, sent without a handshake"),
        b"GET / HTTP/1.1\r\n\r\n",
        b"\x00",
        MAGIC[:-1] + b"?",
    ],
)
def test_a_peer_that_does_not_open_with_the_magic_is_refused_at_once(first: bytes) -> None:
    with pytest.raises(HandshakeError, match="did not open"):
        Handshake(Role.REPLICA, SECRET).feed(first)


def test_a_partial_hello_waits_and_an_oversized_one_is_judged_at_its_fixed_length() -> None:
    replica = Handshake(Role.REPLICA, SECRET)
    assert replica.feed(MAGIC[:3]) == (b"", None)
    proxy = Handshake(Role.PROXY, SECRET)
    # A correct hello followed by a megabyte of junk: the junk's first bytes are the "proof".
    with pytest.raises(HandshakeError, match="does not know"):
        replica.feed(proxy.greeting()[3:] + b"j" * 1_000_000)


def test_a_proof_from_an_earlier_exchange_is_no_proof_now() -> None:
    proxy, replica = Handshake(Role.PROXY, SECRET), Handshake(Role.REPLICA, SECRET)
    to_replica, _ = proxy.feed(replica.greeting())
    replica.feed(proxy.greeting())
    # A recording replayed to a new replica (a new nonce): refused.
    again = Handshake(Role.REPLICA, SECRET)
    again.feed(proxy.greeting())
    with pytest.raises(HandshakeError):
        again.feed(to_replica)


def test_a_replicas_own_proof_reflected_back_is_refused() -> None:
    replica = Handshake(Role.REPLICA, SECRET)
    attacker = Handshake(Role.PROXY, b"y" * 32)
    proof, _ = replica.feed(attacker.greeting())
    with pytest.raises(HandshakeError):
        replica.feed(proof)  # its own role's proof, not a proxy's
    with pytest.raises(HandshakeError, match="own nonce"):
        Handshake(Role.REPLICA, SECRET, nonce=b"n" * 32).feed(MAGIC + b"n" * 32)


def test_the_secret_is_never_shown() -> None:
    secret = new_secret()
    assert len(secret) == 32 and secret != new_secret()
    address = DataAddress("node", "/tmp/x/data.sock", ("10.0.0.1", 4321), secret)
    assert secret.hex() not in repr(address) and repr(secret) not in repr(address)
    assert "secret" not in repr(address)
    assert repr(secret) not in repr(Handshake(Role.PROXY, secret))


def test_bounds_on_what_a_handshake_accepts() -> None:
    with pytest.raises(ValueError):
        Handshake(Role.PROXY, b"short")
    with pytest.raises(ValueError):
        Handshake(Role.PROXY, SECRET, nonce=b"n")
    assert HELLO_BYTES == len(MAGIC) + 32 and PROOF_BYTES == 32
