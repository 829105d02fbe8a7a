"""The same-node data path's frames: what goes in comes out, however the bytes are split."""

from __future__ import annotations

import pickle
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from datalink.frames import (
    HEADER_BYTES,
    MAX_FRAME_BYTES,
    PIECES_ABOVE,
    Frame,
    FrameDecoder,
    FrameError,
    Kind,
    Pieces,
    Sink,
    encode,
    encode_piece,
    piece_head,
)
from datalink.peers import peer_allowed
from vocabulary.request_path.wire import CallOutcome, StreamStart, make_request


class Decoder:
    """A `FrameDecoder` whose `feed` answers the frames that bytes completed."""

    def __init__(self, max_frame: int = MAX_FRAME_BYTES, sink: Sink | None = None) -> None:
        self.frames: list[Frame] = []
        self.decoder = FrameDecoder(self.frames.append, max_frame, sink)

    def feed(self, data: bytes | memoryview) -> list[Frame]:
        before = len(self.frames)
        self.decoder.feed(data)
        return self.frames[before:]

    def __len__(self) -> int:
        return len(self.decoder)


REQUEST = make_request("POST", "/echo", b"a=1", [(b"content-type", b"text/plain")], b"hello")
RESPONSE = (200, [(b"content-length", b"5")], b"hello")


def test_every_kind_round_trips_with_its_call_id_and_payload() -> None:
    payloads = {
        Kind.REQUEST: REQUEST,
        Kind.BATCH: [(REQUEST, 2.0)],
        Kind.CANCEL: None,
        Kind.RESULT: StreamStart(200, [], b"first", "r1:0"),
        Kind.RESULTS: [(CallOutcome.OK, RESPONSE), (CallOutcome.ERROR, "Traceback ..."), (CallOutcome.TIMEOUT, "")],
        Kind.ERROR: "Traceback (most recent call last): ...",
        Kind.ANSWER: (200, [(b"content-type", b"application/octet-stream")], 3_000_000),
    }
    for call_id, (kind, payload) in enumerate(payloads.items()):
        assert Decoder().feed(encode(kind, call_id, payload)) == [Frame(kind, call_id, payload)]


def test_the_largest_call_id_fits() -> None:
    assert Decoder().feed(encode(Kind.CANCEL, 2**64 - 1)) == [Frame(Kind.CANCEL, 2**64 - 1, None)]
    with pytest.raises(ValueError):
        encode(Kind.CANCEL, 2**64)


def test_many_frames_in_one_read_all_come_out_in_order() -> None:
    data = b"".join(encode(Kind.REQUEST, n, (n, b"x" * n)) for n in range(50))
    assert Decoder().feed(data) == [Frame(Kind.REQUEST, n, (n, b"x" * n)) for n in range(50)]


def test_a_frame_split_byte_by_byte_comes_out_once_complete() -> None:
    frame = encode(Kind.RESULT, 7, RESPONSE)
    decoder = Decoder()
    for byte in frame[:-1]:
        assert decoder.feed(bytes([byte])) == []
    assert len(decoder) == len(frame) - 1
    assert decoder.feed(frame[-1:]) == [Frame(Kind.RESULT, 7, RESPONSE)]
    assert len(decoder) == 0


@given(
    bodies=st.lists(st.binary(max_size=300), min_size=1, max_size=8),
    cuts=st.lists(st.integers(min_value=0, max_value=3000), max_size=10),
)
def test_frames_come_out_whole_and_in_order_however_the_stream_is_cut(bodies: list[bytes], cuts: list[int]) -> None:
    stream = b"".join(encode(Kind.REQUEST, n, make_request("GET", "/", body=body)) for n, body in enumerate(bodies))
    points = sorted({0, len(stream), *(cut % (len(stream) + 1) for cut in cuts)})
    decoder = Decoder()
    frames: list[Frame] = []
    for start, end in zip(points, points[1:]):
        frames += decoder.feed(stream[start:end])
    assert frames == [Frame(Kind.REQUEST, n, make_request("GET", "/", body=body)) for n, body in enumerate(bodies)]
    assert len(decoder) == 0


def test_a_frame_over_the_bound_is_refused_from_its_length_alone() -> None:
    decoder = Decoder(max_frame=1000)
    with pytest.raises(FrameError, match="1001 bytes"):
        # Only the length has arrived: the decoder does not wait for (or buffer) the body.
        decoder.feed(struct.pack(">I", 1001))
    assert len(decoder) == 0


def test_a_frame_at_the_bound_is_accepted() -> None:
    frame = encode(Kind.RESULT, 1, b"")
    bound = len(frame) - 4
    assert Decoder(max_frame=bound).feed(frame) == [Frame(Kind.RESULT, 1, b"")]
    with pytest.raises(FrameError):
        Decoder(max_frame=bound - 1).feed(frame)


def test_a_length_shorter_than_the_header_is_malformed() -> None:
    with pytest.raises(FrameError, match="allowed"):
        Decoder().feed(struct.pack(">I", HEADER_BYTES - 1) + b"\0" * 20)


def test_an_unknown_kind_is_malformed() -> None:
    body = pickle.dumps(None, protocol=5)
    with pytest.raises(FrameError, match="unknown kind 99"):
        Decoder().feed(struct.pack(">IBQ", HEADER_BYTES + len(body), 99, 1) + body)


def test_an_undecodable_payload_is_malformed() -> None:
    junk = b"\x80\x05not a pickle"
    with pytest.raises(FrameError, match="undecodable"):
        Decoder().feed(struct.pack(">IBQ", HEADER_BYTES + len(junk), Kind.REQUEST, 1) + junk)


def test_after_a_malformed_frame_the_stream_stays_broken() -> None:
    decoder = Decoder(max_frame=100)
    with pytest.raises(FrameError):
        decoder.feed(struct.pack(">I", 101))
    with pytest.raises(FrameError):
        decoder.feed(encode(Kind.CANCEL, 1))


def test_only_our_own_uid_may_be_a_peer() -> None:
    assert peer_allowed(1000, 1000)
    assert not peer_allowed(1001, 1000)
    assert not peer_allowed(0, 1000)  # not even root: nobody else's pickles
    assert not peer_allowed(1000, 0)


def test_the_stream_and_websocket_kinds_round_trip() -> None:
    from datalink.frames import Opening, Window

    payloads = {
        Kind.STREAM: Opening("r1:7", Window(4, 1000)),
        Kind.WEBSOCKET: Opening(("socket-1", REQUEST), Window()),
        Kind.ITEM: b"a chunk",
        Kind.END: None,
        Kind.CREDIT: (3, 2048),
        Kind.DISCARD: "r1:8",
        Kind.PUSH: ("socket-1", {"type": "websocket.receive", "text": "hi"}),
    }
    for call_id, (kind, payload) in enumerate(payloads.items(), start=1):
        assert Decoder().feed(encode(kind, call_id, payload)) == [Frame(kind, call_id, payload)]
    message = {"type": "websocket.send", "bytes": b"\x00\x01"}
    assert Decoder().feed(encode(Kind.ITEM, 9, message)) == [Frame(Kind.ITEM, 9, message)]


def test_a_window_allows_at_least_one_item_and_one_byte() -> None:
    from datalink.frames import Window

    assert Window().items >= 1 and Window().bytes >= 1
    for items, size in ((0, 10), (10, 0), (-1, -1)):
        with pytest.raises(ValueError):
            Window(items, size)


def test_an_item_counts_its_body_against_the_window() -> None:
    from datalink.frames import item_bytes

    assert item_bytes(b"12345") == 5
    assert item_bytes({"type": "websocket.send", "text": "héllo"}) == 5
    assert item_bytes({"type": "websocket.send", "bytes": b"\x00" * 7, "text": None}) == 7
    assert item_bytes({"type": "websocket.close", "code": 1000}) == 0
    assert item_bytes(None) == 0


@given(
    sizes=st.lists(st.integers(min_value=0, max_value=200_000), min_size=1, max_size=6),
    cuts=st.lists(st.integers(min_value=0, max_value=2_000_000), max_size=10),
)
def test_large_payloads_and_raw_body_pieces_come_out_whole_however_the_stream_is_cut(
    sizes: list[int], cuts: list[int]
) -> None:
    # Even calls: a pickled request whose body may pass the size read through a view; odd: a raw BODY piece.
    def framed(n: int, size: int) -> tuple[bytes, Frame]:
        body = bytes([n % 256]) * size
        if n % 2:
            return encode_piece(n, body), Frame(Kind.BODY, n, body)
        request = make_request("POST", "/", body=body)
        return encode(Kind.REQUEST, n, request), Frame(Kind.REQUEST, n, request)

    pairs = [framed(n, size) for n, size in enumerate(sizes)]
    stream = b"".join(frame for frame, _ in pairs)
    points = sorted({0, len(stream), *(cut % (len(stream) + 1) for cut in cuts)})
    decoder = Decoder()
    frames: list[Frame] = []
    for start, end in zip(points, points[1:]):
        frames += decoder.feed(stream[start:end])
    assert [frame for frame in frames] == [expected for _, expected in pairs]
    # Nobody holds a body for these pieces (no sink): each comes out as bytes of its own.
    assert all(type(frame.payload) is bytes for frame in frames if frame.kind is Kind.BODY)
    assert len(decoder) == 0


def test_a_piece_head_and_its_piece_written_apart_are_one_body_frame() -> None:
    piece = bytes(range(256)) * 400
    framed = piece_head(9, len(piece) - 100) + memoryview(piece)[100:]
    assert framed == encode_piece(9, piece[100:])
    assert Decoder().feed(framed) == [Frame(Kind.BODY, 9, piece[100:])]
    with pytest.raises(ValueError):
        piece_head(2**64, 1)


def test_a_large_frame_arriving_in_reads_is_read_in_place_then_comes_out_whole() -> None:
    body = bytes(range(256)) * 1000  # 256,000 bytes: read in place, not through the read buffer
    stream = encode_piece(3, body) + encode(Kind.CANCEL, 4)
    decoder = Decoder()
    assert decoder.feed(stream[:10]) == []
    assert len(decoder) == 10 and not decoder.decoder.in_place
    assert decoder.feed(stream[10:100_000]) == []
    assert len(decoder) == 100_000 - 4 - HEADER_BYTES  # its head is read; its payload so far is held
    assert decoder.decoder.in_place and len(decoder.decoder.buffer()) == len(body) - len(decoder)
    assert decoder.feed(stream[100_000:]) == [Frame(Kind.BODY, 3, body), Frame(Kind.CANCEL, 4, None)]
    assert len(decoder) == 0 and not decoder.decoder.in_place


def test_a_large_pickled_frame_is_read_in_place_and_unpickled_once_whole() -> None:
    request = make_request("POST", "/", body=b"q" * 200_000)
    stream = encode(Kind.REQUEST, 8, request)
    decoder = Decoder()
    assert decoder.feed(stream[:1000]) == [] and decoder.decoder.in_place
    assert decoder.feed(stream[1000:]) == [Frame(Kind.REQUEST, 8, request)]


def test_a_body_piece_is_read_straight_into_the_body_its_receiver_holds() -> None:
    body = bytes(range(256)) * 1024  # 256 KiB, in two pieces
    pieces = Pieces(len(body))
    asked: list[tuple[int, int]] = []

    def sink(call_id: int, size: int) -> memoryview | None:
        asked.append((call_id, size))
        return pieces.room(size) if call_id == 5 else None

    decoder = Decoder(sink=sink)
    half = len(body) // 2
    first = encode_piece(5, body[:half])
    assert decoder.feed(first[:1000]) == []  # the head and what came with it: copied into the body
    # The rest as a socket read would bring it: written into `buffer()`, which is the body itself.
    room = decoder.decoder.buffer()
    room[: half - 1000 + 4 + HEADER_BYTES] = first[1000:]
    room.release()
    decoder.decoder.filled(len(first) - 1000)
    assert decoder.frames == [Frame(Kind.BODY, 5, half)]  # its size: it is in the body already
    assert decoder.feed(encode_piece(5, body[half:]) + encode_piece(6, b"elsewhere")) == [
        Frame(Kind.BODY, 5, half), Frame(Kind.BODY, 6, b"elsewhere"),  # call 6: nobody holds its body
    ]
    assert asked == [(5, half), (5, half), (6, 9)]
    # Its receiver counts each piece as written when its frame comes (not when its room was given).
    assert not pieces.complete
    assert [pieces.placed(frame.payload) for frame in decoder.frames if frame.call_id == 5] == [False, True]
    assert pieces.body() == body


def test_a_piece_past_its_body_breaks_the_stream_at_its_head() -> None:
    pieces = Pieces(100_000)
    decoder = Decoder(sink=lambda call_id, size: pieces.room(size))
    with pytest.raises(FrameError, match="100001 bytes of pieces for a body of 100000"):
        decoder.feed(encode_piece(1, b"x" * 100_001)[:20])


def test_a_malformed_frame_after_one_read_in_place_breaks_the_stream() -> None:
    decoder = Decoder()
    frame = encode_piece(1, b"x" * 100_000)
    assert decoder.feed(frame[:50_000]) == []
    with pytest.raises(FrameError):
        decoder.feed(frame[50_000:] + struct.pack(">IBQ", HEADER_BYTES, 99, 1))
    with pytest.raises(FrameError):
        decoder.feed(encode(Kind.CANCEL, 2))


def test_a_body_in_one_piece_is_that_piece_and_one_in_many_is_joined_in_order() -> None:
    whole = b"w" * (PIECES_ABOVE + 1)
    one = Pieces(len(whole))
    assert one.add(whole) is True
    assert one.body() is whole  # not copied
    many = Pieces(3 * 1000 + 1)
    assert [many.add(b"a" * 1000), many.add(b"b" * 1000), many.add(b"c" * 1000), many.add(b"d")] == [
        False, False, False, True,
    ]
    assert many.body() == b"a" * 1000 + b"b" * 1000 + b"c" * 1000 + b"d"


def test_a_body_written_in_place_becomes_bytes_without_a_copy() -> None:
    pieces = Pieces(2_000_000)
    room = pieces.room(1_000_000)
    assert pieces.add(b"b" * 1_000_000) is False  # the first piece has its room but is not written yet
    room[:] = b"a" * 1_000_000
    room.release()
    assert pieces.placed(1_000_000) is True
    body = pieces.body()
    assert body == b"a" * 1_000_000 + b"b" * 1_000_000
    assert Pieces(5).add(b"whole") is True
    assert pieces.body() is body  # the buffer itself, handed over (a copy would be a new object)


def test_pieces_past_the_announced_size_are_malformed() -> None:
    pieces = Pieces(10)
    assert pieces.add(b"x" * 6) is False
    with pytest.raises(FrameError, match="11 bytes of pieces for a body of 10"):
        pieces.add(b"y" * 5)


def test_a_frame_started_in_a_buffer_its_reader_reuses_is_not_changed_by_the_reuse() -> None:
    body = bytes(range(256)) * 400
    frame = encode_piece(5, body)
    reused = bytearray(frame[:70_000])
    decoder = Decoder()
    assert decoder.feed(memoryview(reused)) == []  # a writable view: what is kept of it is copied
    reused[:] = b"\xff" * len(reused)
    assert decoder.feed(frame[70_000:]) == [Frame(Kind.BODY, 5, body)]


def test_the_rest_of_a_large_frame_read_into_a_reused_buffer_is_not_changed_by_the_reuse() -> None:
    body = bytes(range(256)) * 400
    frame = encode_piece(6, body) + encode_piece(7, b"tail")
    decoder = Decoder()
    assert decoder.feed(frame[:70_000]) == []
    reused = bytearray(frame[70_000:90_000])
    assert decoder.feed(memoryview(reused)) == []  # the middle of the frame, in a writable view
    reused[:] = b"\xff" * len(reused)
    reused = bytearray(frame[90_000:])
    got = decoder.feed(memoryview(reused))  # its end and the next frame, in a writable view
    reused[:] = b"\xff" * len(reused)
    assert got == [Frame(Kind.BODY, 6, body), Frame(Kind.BODY, 7, b"tail")]


@settings(deadline=None, max_examples=60)
@given(
    sizes=st.lists(st.integers(min_value=1, max_value=300_000), min_size=1, max_size=4),
    piece=st.integers(min_value=2_000, max_value=150_000),
    cuts=st.lists(st.integers(min_value=0, max_value=2_000_000), max_size=12),
)
def test_bodies_read_into_their_pieces_come_out_whole_however_the_stream_is_cut(
    sizes: list[int], piece: int, cuts: list[int]
) -> None:
    """Each call's body in pieces of `piece` bytes, a small frame after every piece, the reads cut
    anywhere: every body comes out whole through its sink, and every small frame in order."""
    bodies = {call_id: bytes([call_id + 1]) * size for call_id, size in enumerate(sizes)}
    held = {call_id: Pieces(len(body)) for call_id, body in bodies.items()}
    stream = b"".join(
        encode_piece(call_id, body[at : at + piece]) + encode(Kind.CREDIT, call_id, (at, 0))
        for call_id, body in bodies.items() for at in range(0, len(body), piece)
    )
    points = sorted({0, len(stream), *(cut % (len(stream) + 1) for cut in cuts)})
    decoder = Decoder(sink=lambda call_id, size: held[call_id].room(size))
    for start, end in zip(points, points[1:]):
        decoder.feed(stream[start:end])
    for frame in decoder.frames:
        if frame.kind is Kind.BODY:
            held[frame.call_id].placed(frame.payload)
    assert {call_id: pieces.body() for call_id, pieces in held.items()} == bodies
    credits = [frame.payload[0] for frame in decoder.frames if frame.kind is Kind.CREDIT]
    assert credits == [at for body in bodies.values() for at in range(0, len(body), piece)]
    assert len(decoder) == 0
