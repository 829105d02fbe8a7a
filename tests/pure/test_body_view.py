"""A body read as its pieces (`proxy.observability.bodies.BodyView`): its length and pieces, bounded
prefixes and whole copies, comparisons across pieces cut at different places; and what capture's
redaction and the shadow comparison make of a body in pieces: the same as of the same bytes in one."""

from __future__ import annotations

import json

import pytest

from proxy.observability.bodies import EMPTY, WINDOW_BYTES, BodyView
from proxy.observability.redacting import Flow, Redaction, needed
from proxy.observability.shadow_compare import compare
from vocabulary.spec.endpoints import CaptureConfig, ShadowCompare


def cut(data: bytes, *sizes: int) -> BodyView:
    """`data` as pieces of `sizes` (the rest in one last piece)."""
    pieces, at = [], 0
    for size in sizes:
        pieces.append(data[at : at + size])
        at += size
    return BodyView([*pieces, data[at:]])


def test_a_view_has_its_pieces_length_and_order_and_holds_one_piece_as_that_very_object() -> None:
    piece = b"x" * 1000
    view = BodyView.one(piece)
    assert len(view) == 1000 and bool(view) and view.pieces[0] is piece
    assert BodyView.of(view) is view and BodyView.of(piece).pieces[0] is piece
    several = BodyView([b"ab", b"", b"cde"])
    assert list(several) == [b"ab", b"cde"] and len(several) == 5
    assert not EMPTY and len(EMPTY) == 0 and not BodyView.one(b"")


def test_a_prefix_is_bounded_and_no_copy_when_one_piece_is_all_of_it() -> None:
    piece = b"0123456789"
    assert BodyView.one(piece).prefix(10) is piece and BodyView.one(piece).prefix(99) is piece
    assert BodyView.one(piece).prefix(4) == b"0123"
    view = cut(piece, 3, 3)
    assert view.prefix(5) == b"01234" and view.prefix(99) == piece and view.prefix(0) == b""
    assert EMPTY.prefix(5) == b""


def test_whole_is_one_buffer_only_within_its_bound() -> None:
    piece = b"y" * 100
    assert BodyView.one(piece).whole(100) is piece  # its one piece: uncopied
    assert BodyView.one(piece).whole(99) is None
    assert cut(piece, 30, 30).whole(100) == piece and cut(piece, 30, 30).whole(99) is None


def test_bodies_cut_at_different_places_compare_byte_for_byte_without_being_joined() -> None:
    data = bytes(range(256)) * (3 * WINDOW_BYTES // 256)
    one = BodyView.one(data)
    assert one.same(cut(data, 7, WINDOW_BYTES + 1)) and cut(data, 100).differs_at(cut(data, 5, 5, 5)) is None
    changed = bytearray(data)
    changed[2 * WINDOW_BYTES + 17] ^= 0xFF
    assert one.differs_at(cut(bytes(changed), 1000, WINDOW_BYTES)) == 2 * WINDOW_BYTES + 17
    assert cut(bytes(changed), 3).differs_at(one) == 2 * WINDOW_BYTES + 17
    # One ending first differs where it ends.
    assert one.differs_at(BodyView.one(data[:500])) == 500 and not one.same(BodyView.one(data[:500]))
    assert EMPTY.same(BodyView([b""])) and EMPTY.differs_at(BodyView.one(b"a")) == 0


@pytest.mark.parametrize("redact", [(), ("json:$.secret",)])
def test_a_record_shows_a_body_in_pieces_as_it_shows_the_same_bytes_in_one(redact: tuple[str, ...]) -> None:
    rules = Redaction.of(CaptureConfig(sink="file:///records", max_body_bytes=20, redact=redact))
    document = json.dumps({"secret": "planted", "list": list(range(20))}).encode()
    for sizes in ((1,), (5, 5), (len(document) - 1,)):
        assert rules.body(cut(document, *sizes)) == rules.body(document)
        assert rules.body(cut(document, *sizes), 10_000) == rules.body(document, 10_000)
    assert ("planted" in json.dumps(rules.body(cut(document, 3)))) is (not redact)  # redacted in pieces too


def test_what_a_queued_record_keeps_of_a_body_is_bounded_and_an_unsliced_body_is_kept_uncopied() -> None:
    rules = Redaction.of(CaptureConfig(sink="file:///records", max_body_bytes=8))
    big = b"z" * 1000
    assert needed(rules, BodyView.one(big)).prefix(100) == b"z" * 8
    small = b"abc"
    assert needed(rules, BodyView.one(small)).pieces[0] is small


def test_a_stream_s_kept_start_is_its_chunks_as_they_went() -> None:
    flow = Flow(10)
    chunks = [b"aaaa", b"bbbb", b"cccccccc"]
    for chunk in chunks:
        flow.add(chunk)
    start = flow.start()
    assert start.pieces[0] is chunks[0] and start.pieces[1] is chunks[1]  # kept as they went, not copied
    assert start.prefix(100) == b"aaaabbbbcc" and (flow.count, flow.size) == (3, 16)


@pytest.mark.parametrize("mode", [ShadowCompare.EXACT, ShadowCompare.JSON])
def test_a_comparison_of_bodies_in_pieces_finds_what_the_same_bytes_in_one_find(mode: ShadowCompare) -> None:
    left = json.dumps({"a": 1, "b": [1, 2, 3]}).encode()
    right = json.dumps({"a": 1, "b": [1, 2, 4]}).encode()
    for primary, shadow in ((left, left), (left, right), (left, b"not json"), (b"x" * 10, b"x" * 9)):
        whole = compare(mode, frozenset(), (200, [], primary), (200, [], shadow))
        pieces = compare(mode, frozenset(), (200, [], cut(primary, 3)), (200, [], cut(shadow, 1, 4)))
        assert pieces == whole
