"""Hashing a cold fetch's bytes once, as they stream, so the cache need not read the model back.

The cache (`replica.models`) checks every fetched model against the digest git
pins: a file's sha256, or a directory's manifest of its files' sha256s. Read
back from disk after the download, that check is a second pass over the whole
model. A fetcher that sees each file's bytes as it writes them records their
sha256 in the fetch's `FileDigests` instead (`FetchProgress.file_digests`),
and the cache reads only the files no fetcher hashed.

- `FileDigests`: the sha256 of each file a fetch wrote, from the very bytes it
  wrote. An entry counts only while the file is as the fetcher left it (the
  same size, modification time and inode); any other file is read and hashed.
- `StreamHash`: the sha256 of a byte stream handed over chunk by chunk,
  computed in a thread of its own beside the download and its writes (one
  hash call per MiB batch: the hasher takes the GIL rarely). It may also walk
  the bytes it hashes, in order: `tar_spans` does, for an OCI layer.
- `tar_spans`: walks a plain (ustar, GNU or pax) tar as it streams and hashes
  each regular member's data, keyed by the byte span it occupies in the
  archive. A span's sha256 is the hash of those bytes of the archive however
  the archive is read, so the layer, once verified whole, is extracted by
  tarfile and each file it copies from a span takes that span's hash. The
  walk reads no header larger than `MAX_PAX_HEADER` and keeps no member data:
  its memory is bounded whatever the (not yet verified) bytes say.

An I/O shell (threads, file status).
"""

from __future__ import annotations

import hashlib
import queue
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = [
    "FileDigests", "MAX_PAX_HEADER", "Spans", "StreamHash", "StreamReader", "file_sha256", "prefix_sha256", "tar_spans",
]

_BATCH = 1024 * 1024  # bytes handed to the hasher per hash call
_QUEUED = 16  # batches waiting for the hasher at most (16 MiB): a slow hasher slows the download
_BLOCK = 512
MAX_PAX_HEADER = 64 * 1024  # a pax header read to learn a member's size; a larger one is passed over

# The data of a tar's regular members: (offset in the archive, size) -> sha256 hex.
Spans = dict[tuple[int, int], str]


class FileDigests:
    """The sha256 of each file a fetch wrote, from the bytes it wrote (keyed by path)."""

    def __init__(self) -> None:
        self._files: dict[str, tuple[int, int, int, str]] = {}

    def record(self, path: Path, sha256: str) -> None:
        """`path` was just written, and `sha256` is the hash of what was written into it."""
        status = path.stat()
        self._files[str(path)] = (status.st_size, status.st_mtime_ns, status.st_ino, sha256)

    def sha256(self, path: Path) -> str | None:
        """The recorded hash of `path`, or None when none was recorded or the file changed since."""
        entry = self._files.get(str(path))
        if entry is None:
            return None
        try:
            status = path.stat()
        except OSError:
            return None
        return entry[3] if (status.st_size, status.st_mtime_ns, status.st_ino) == entry[:3] else None


class StreamHash:
    """The sha256 of the bytes `feed` is given, hashed in a thread; `finish()` says it.

    `start`: a hash already fed with what came before (a download continued from
    a file's first part). `walk`: also run in the thread, over the same bytes in
    order (`StreamReader`), e.g. `tar_spans`; whatever it leaves unread is still
    hashed, and an error in it ends the walk, never the hashing.
    """

    def __init__(self, start: Any = None, walk: Callable[[StreamReader], None] | None = None) -> None:
        self._digest = start if start is not None else hashlib.sha256()
        self._batches: queue.Queue[list[bytes] | None] = queue.Queue(maxsize=_QUEUED)
        self._batch: list[bytes] = []
        self._batched = 0
        self._thread = threading.Thread(target=self._run, args=(walk,), name="fetch-sha256", daemon=True)
        self._thread.start()
        self._finished = False

    def feed(self, chunk: bytes) -> None:
        self._batch.append(chunk)
        self._batched += len(chunk)
        if self._batched >= _BATCH:
            self._batches.put(self._batch)
            self._batch, self._batched = [], 0

    def finish(self) -> str:
        """The hex sha256 of everything fed (the thread ends; call it however the stream ended)."""
        if not self._finished:
            self._finished = True
            self._batches.put(self._batch)
            self._batches.put(None)
            self._thread.join()
        return str(self._digest.hexdigest())

    def _run(self, walk: Callable[[StreamReader], None] | None) -> None:
        reader = StreamReader(self._batches, self._digest)
        try:
            if walk is not None:
                walk(reader)
        except (ValueError, OverflowError):
            pass  # bytes the walk cannot read: whoever parses them after the digest is checked says why
        finally:
            reader.drain()


class StreamReader:
    """The hasher thread's view of the stream: the bytes in order, each hashed once as it is handed out."""

    def __init__(self, batches: queue.Queue[list[bytes] | None], digest: Any) -> None:
        self._batches = batches
        self._digest = digest
        self._data = memoryview(b"")
        self._ended = False
        self.offset = 0  # bytes handed out so far

    def take(self, count: int, into: Any = None) -> int:
        """Up to `count` more bytes, given to `into.update` when `into` is given; how many there were."""
        taken = 0
        while taken < count:
            if not self._data and not self._more():
                break
            part = self._data[: count - taken]
            if into is not None:
                into.update(part)
            self._data = self._data[len(part):]
            taken += len(part)
        self.offset += taken
        return taken

    def drain(self) -> None:
        """Hash the rest of the stream, to its end."""
        self._data = memoryview(b"")
        while self._more():
            self._data = memoryview(b"")

    def _more(self) -> bool:
        if self._ended:
            return False
        batch = self._batches.get()
        if batch is None:
            self._ended = True
            return False
        data = b"".join(batch)
        self._digest.update(data)
        self._data = memoryview(data)
        return True


class _Collected:
    def __init__(self) -> None:
        self.data = bytearray()

    def update(self, part: memoryview) -> None:
        self.data += part


def tar_spans(spans: Spans, max_members: int) -> Callable[[StreamReader], None]:
    """A walk (`StreamHash`) that fills `spans` with the sha256 of each regular member's data,
    for at most `max_members` members; it stops at the archive's end or at bytes no tar has."""

    def walk(reader: StreamReader) -> None:
        size_from_pax: int | None = None
        for _ in range(max_members * 2):  # a member may have a pax or GNU long-name header before it
            header = _Collected()
            if reader.take(_BLOCK, header) < _BLOCK or not any(header.data):
                return  # the end: short, or the first of the two zero blocks
            kind = bytes(header.data[156:157])
            size = _size(bytes(header.data[124:136]))
            if size_from_pax is not None and kind not in (b"x", b"g", b"L", b"K"):
                size, size_from_pax = size_from_pax, None
            if kind in (b"0", b"\0", b"7"):  # a regular file: hash its data
                offset, digest = reader.offset, hashlib.sha256()
                if reader.take(size, digest) < size:
                    return
                spans[(offset, size)] = digest.hexdigest()
            elif kind == b"x" and size <= MAX_PAX_HEADER:
                records = _Collected()
                if reader.take(size, records) < size:
                    return
                size_from_pax = _pax_size(bytes(records.data))
            elif reader.take(size) < size:  # any other entry's data (a long name, a sparse map): passed over
                return
            reader.take(-size % _BLOCK)

    return walk


def _size(field: bytes) -> int:
    """A tar header's size field: octal text, or GNU's base-256 (its first byte's high bit set)."""
    if field[:1] and field[0] & 0x80:
        return int.from_bytes(bytes([field[0] & 0x7F]) + field[1:], "big")
    text = field.split(b"\0", 1)[0].strip()
    return int(text, 8) if text else 0


def _pax_size(records: bytes) -> int | None:
    """The `size` a pax extended header gives its member (`LENGTH size=N\\n` records), if any."""
    found = None
    while records:
        length_text, _, _ = records.partition(b" ")
        length = int(length_text)
        if length <= 0 or length > len(records):
            raise ValueError("a pax record's length is out of bounds")
        key, _, value = records[len(length_text) + 1 : length - 1].partition(b"=")
        if key == b"size":
            found = int(value)
        records = records[length:]
    return found


def file_sha256(path: Path, chunk: int = _BATCH) -> str:
    """A file's sha256, read from disk."""
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        while part := stream.read(chunk):
            digest.update(part)
    return digest.hexdigest()


def prefix_sha256(path: Path, size: int) -> Any:
    """A hash fed with the first `size` bytes of `path` (a download continued from there)."""
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        left = size
        while left and (part := stream.read(min(left, _BATCH))):
            digest.update(part)
            left -= len(part)
    return digest
