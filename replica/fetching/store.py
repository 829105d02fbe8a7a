"""Fetching an s3:// or http(s):// model's bytes with obstore.

Owns the one library that talks to object stores and HTTP servers for
models (obstore: the Rust `object_store` crate, with retries and back-off
built in), called by `replica.fetching.sources.fetch` for these schemes only,
so a replica whose models come from elsewhere (or that has none) never loads
it. S3 takes its credentials, region and endpoint from the node's standard
variables (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_REGION`,
`AWS_ENDPOINT_URL`), never from the spec. Large objects are read as parallel
ranged reads, a bounded window at a time, so memory stays bounded whatever
the model's size. Every failure is a `FetchError` of one line. An I/O shell.
"""

from __future__ import annotations

import os
import time
from datetime import timedelta
from pathlib import Path
from typing import Any, BinaryIO
from urllib.parse import unquote, urlsplit

import obstore
from obstore.exceptions import NotSupportedError
from obstore.store import HTTPStore, S3Store

from replica.fetching.sources import FetchError, Progress, check_deadline, expect
from vocabulary.replicas.model_digests import is_directory
from vocabulary.replicas.s3_picks import store_error_line

__all__ = ["fetch_store", "PART_BYTES", "PARALLEL_PARTS"]

PART_BYTES = 8 * 1024 * 1024  # one ranged read
PARALLEL_PARTS = 8  # ranged reads in flight at once: at most 64 MiB held
_STREAM_CHUNK = 1024 * 1024
_RETRIES = {
    "max_retries": 5,
    "backoff": {"init_backoff": timedelta(milliseconds=100), "max_backoff": timedelta(seconds=5), "base": 2.0},
}


def fetch_store(source: str, dest: Path, deadline: float, progress: Progress) -> None:
    """An s3:// object or prefix (a source ending in `/`), or an http(s):// file, at `dest`."""
    parts = urlsplit(source)
    try:
        if parts.scheme == "s3":
            client = _client(deadline, os.environ.get("AWS_ENDPOINT_URL", ""))
            store = S3Store(parts.netloc, client_options=client, retry_config=_RETRIES)  # type: ignore[arg-type]  # obstore's options are TypedDicts; ours are plain dicts
            key = unquote(parts.path.lstrip("/"))
            if is_directory(source):
                _fetch_prefix(store, key, dest, deadline, progress)
            else:
                _fetch_object(store, key, dest, deadline, progress)
        else:
            base, _, name = source.rpartition("/")
            client = _client(deadline, source)
            http = HTTPStore.from_url(base, client_options=client, retry_config=_RETRIES)  # type: ignore[arg-type]  # obstore's options are TypedDicts; ours are plain dicts
            _fetch_object(http, unquote(name), dest, deadline, progress)
    except FetchError:
        raise
    except Exception as error:  # noqa: BLE001 — obstore's errors, made one line
        raise FetchError(_store_error(error)) from None


def _client(deadline: float, endpoint: str) -> dict[str, Any]:
    remaining = max(deadline - time.monotonic(), 0.001)
    options: dict[str, Any] = {
        "timeout": timedelta(seconds=remaining),
        "connect_timeout": timedelta(seconds=min(remaining, 10.0)),
    }
    if endpoint.startswith("http://"):
        options["allow_http"] = True  # an S3-compatible store or server on loopback (docs/guides/models.md)
    return options


def _store_error(error: Exception) -> str:
    """obstore's error as one line: its type when it says enough, else its text as
    `gitops models` reads it (`store_error_line`), never its debug dump."""
    if isinstance(error, FileNotFoundError):
        return "not found (no such key or file)"
    if isinstance(error, PermissionError):
        return "access denied (403): check the node's AWS_* credentials"
    return store_error_line(str(error)) or type(error).__name__


def _fetch_object(
    store: Any, key: str, dest: Path, deadline: float, progress: Progress, size: int | None = None
) -> None:
    """One object; `size` when a listing already said it (else a HEAD asks, and it is expected)."""
    if size is None:
        size = int(obstore.head(store, key)["size"])
        expect(progress, size)
    dest.parent.mkdir(parents=True, exist_ok=True)
    with dest.open("wb") as out:
        if size > PART_BYTES * 2:
            try:
                _ranged(store, key, size, out, deadline, progress)
                return
            except NotSupportedError:  # a server without range requests: one stream instead
                out.seek(0)
                out.truncate()
        for chunk in obstore.get(store, key).stream(min_chunk_size=_STREAM_CHUNK):
            check_deadline(deadline)
            out.write(chunk)
            progress(len(chunk))


def _ranged(store: Any, key: str, size: int, out: BinaryIO, deadline: float, progress: Progress) -> None:
    """Parallel ranged reads, PARALLEL_PARTS at a time: bounded memory, full bandwidth."""
    starts = list(range(0, size, PART_BYTES))
    for window in range(0, len(starts), PARALLEL_PARTS):
        check_deadline(deadline)
        begin = starts[window : window + PARALLEL_PARTS]
        ends = [min(start + PART_BYTES, size) for start in begin]
        for buffer in obstore.get_ranges(store, key, starts=begin, ends=ends):
            out.write(memoryview(buffer))
            progress(len(buffer))


def _fetch_prefix(store: Any, prefix: str, dest: Path, deadline: float, progress: Progress) -> None:
    objects = [
        (meta["path"], meta["path"][len(prefix) :], int(meta["size"]))
        for batch in obstore.list(store, prefix)
        for meta in batch
        if meta["path"][len(prefix) :] and not meta["path"].endswith("/")  # not a folder marker
    ]
    if not objects:
        raise FetchError("not found (no object under the prefix)")
    expect(progress, sum(size for _, _, size in objects))
    for key, relative, size in objects:
        check_deadline(deadline)
        _fetch_object(store, key, dest / relative, deadline, progress, size)
