"""A body as the pieces it came in: the one interface capture, shadow comparison and tracing read it through.

`BodyView` is a read-only view over a list of pieces (`bytes`), in order:
its total length, its pieces one by one, and, bounded, what its readers
need of it as one buffer. The request path hands a reply's body on as a
view (`proxy.pipeline.stage`'s `answered` hook): a whole answer is its one
piece, the very object the data link read it into and the client is sent;
a streamed answer's kept start (`proxy.observability.redacting.Flow`) the
chunks as they were relayed. Nothing here joins pieces unbounded:

- `prefix(limit)`: at most `limit` bytes as one `bytes` (the first piece
  itself when it is all of them; else a copy of at most `limit` bytes);
- `whole(limit)`: the body as one `bytes` when it is no longer than
  `limit` (its one piece uncopied; several joined, at most `limit` bytes),
  else None: for a reader that must parse it (JSON), bounded by its caller;
- `same(other)` and `differs_at(other)`: compared piece against piece,
  never joined (bytes compared in C; where the two bodies' pieces are cut
  at different places, windows of at most `WINDOW_BYTES` copied).

Who copies says so: a bounded copy is the reader's own (the capture record's
cut, redaction's JSON parse, the comparison's JSON parse); none of them
copies a whole reply on the way to its client. Pure.
"""

from __future__ import annotations

from typing import Iterable, Iterator

__all__ = ["BodyView", "EMPTY", "WINDOW_BYTES"]

# Where two bodies' pieces are cut at different places, compared in copies of at most this many bytes.
WINDOW_BYTES = 64 * 1024


class BodyView:
    """A read-only view of a body held as pieces: never joined here past a bound its reader gives."""

    __slots__ = ("pieces", "size")

    def __init__(self, pieces: Iterable[bytes] = ()) -> None:
        self.pieces: tuple[bytes, ...] = tuple(piece for piece in pieces if piece)
        self.size = sum(map(len, self.pieces))

    @classmethod
    def one(cls, piece: bytes) -> BodyView:
        """A body in one piece (a whole answer): the view holds that very object."""
        view = cls.__new__(cls)
        view.pieces = (piece,) if piece else ()
        view.size = len(piece)
        return view

    @classmethod
    def of(cls, body: bytes | BodyView) -> BodyView:
        """`body` as a view (a view is itself)."""
        return body if isinstance(body, BodyView) else cls.one(body)

    def __len__(self) -> int:
        return self.size

    def __bool__(self) -> bool:
        return self.size > 0

    def __iter__(self) -> Iterator[bytes]:
        return iter(self.pieces)

    def __repr__(self) -> str:
        return f"BodyView({len(self.pieces)} pieces, {self.size} bytes)"

    def prefix(self, limit: int) -> bytes:
        """Its first `limit` bytes (all of it when shorter) as one `bytes`: the first piece
        itself when it is exactly that, else a copy of at most `limit` bytes."""
        if limit <= 0 or not self.pieces:
            return b""
        first = self.pieces[0]
        if len(first) >= limit or len(self.pieces) == 1:
            return first if len(first) <= limit else first[:limit]
        taken: list[bytes] = []
        room = limit
        for piece in self.pieces:
            if room <= 0:
                break
            taken.append(piece if len(piece) <= room else piece[:room])
            room -= len(piece)
        return b"".join(taken)

    def whole(self, limit: int) -> bytes | None:
        """The whole body as one `bytes` when it is at most `limit` bytes (its one piece
        uncopied, several joined), else None: a reader that must parse it bounds the copy."""
        return self.prefix(limit) if self.size <= limit else None

    def same(self, other: BodyView) -> bool:
        """Whether both hold the same bytes, compared piece against piece."""
        return self.size == other.size and self.differs_at(other) is None

    def differs_at(self, other: BodyView) -> int | None:
        """The offset of the first byte where the two differ (one ending first differs at
        its end), None when they are the same bytes; never joins either."""
        offset = 0
        for left, right in _aligned(self.pieces, other.pieces):
            if left != right:
                return offset + _first_difference(left, right)
            offset += len(left)
        return None if self.size == other.size else min(self.size, other.size)


def _first_difference(left: bytes, right: bytes) -> int:
    """Where two equal-length stretches that differ first differ: the window found by
    comparing copies of at most `WINDOW_BYTES`, then the byte within it."""
    start = 0
    while left[start : start + WINDOW_BYTES] == right[start : start + WINDOW_BYTES]:
        start += WINDOW_BYTES
    window = zip(left[start : start + WINDOW_BYTES], right[start : start + WINDOW_BYTES])
    return start + next(i for i, (a, b) in enumerate(window) if a != b)


def _aligned(left: tuple[bytes, ...], right: tuple[bytes, ...]) -> Iterator[tuple[bytes, bytes]]:
    """Both bodies' bytes as pairs of equal-length stretches, up to the shorter one's end:
    whole pieces where both are cut alike (no copy), else windows of at most `WINDOW_BYTES`."""
    i = j = 0  # the pieces
    x = y = 0  # the offsets within them
    while i < len(left) and j < len(right):
        a, b = left[i], right[j]
        if x == 0 and y == 0 and len(a) == len(b):
            yield a, b
            i, j = i + 1, j + 1
            continue
        step = min(len(a) - x, len(b) - y, WINDOW_BYTES)
        yield a[x : x + step], b[y : y + step]
        x, y = x + step, y + step
        if x == len(a):
            i, x = i + 1, 0
        if y == len(b):
            j, y = j + 1, 0


EMPTY = BodyView()
