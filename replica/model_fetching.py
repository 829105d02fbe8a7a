"""Fetching a model's bytes from its source into a local path, with obstore.

Owns the one library that talks to object stores and HTTP servers for
models (obstore: the Rust `object_store` crate, with retries and back-off
built in): `fetch(source, dest, deadline)` writes a single file to `dest`,
or a directory's files under `dest`, and never verifies anything — the
cache (`replica.models`) does. S3 takes its credentials, region and
endpoint from the node's standard variables (`AWS_ACCESS_KEY_ID`,
`AWS_SECRET_ACCESS_KEY`, `AWS_REGION`, `AWS_ENDPOINT_URL`), never from the
spec. Large objects are read as parallel ranged reads, a bounded window at
a time, so memory stays bounded whatever the model's size. Every failure is
a `FetchError` with one line a user can act on (no such key, access denied,
timed out). A `FetchProgress` passed as `progress` is also told how many
bytes to expect, once known (a directory's: all its files', listed first),
so a starting replica can say how far its fetch is; one given a limit (the
cache's cap) stops the fetch once past it, so a download never holds more
than the cache may. hf:// sources are `replica.hub_fetching`'s (the Hub's
HTTP API with httpx) and oci:// ones `replica.oci_fetching`'s (a registry's
distribution API with httpx), called from here. An I/O shell.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO
from urllib.parse import unquote, urlsplit

import obstore
from obstore.exceptions import NotSupportedError
from obstore.store import HTTPStore, S3Store

from vocabulary.replicas.model_digests import is_directory
from vocabulary.replicas.s3_picks import store_error_line

if TYPE_CHECKING:
    from replica.hub_fetching import HubOptions

__all__ = ["FetchError", "FetchProgress", "TooLarge", "fetch"]

PART_BYTES = 8 * 1024 * 1024  # one ranged read
PARALLEL_PARTS = 8  # ranged reads in flight at once: at most 64 MiB held
_STREAM_CHUNK = 1024 * 1024
_RETRIES = {
    "max_retries": 5,
    "backoff": {"init_backoff": timedelta(milliseconds=100), "max_backoff": timedelta(seconds=5), "base": 2.0},
}

Progress = Callable[[int], None]


class FetchProgress:
    """Bytes fetched so far and bytes expected (0 until known); written by the
    fetching thread, read by another (plain ints: each read sees a whole value).
    With a `limit`, a fetch expected or grown past it stops (`TooLarge`)."""

    def __init__(self, limit: int | None = None) -> None:
        self.done = 0
        self.total = 0
        self.limit = limit

    def __call__(self, count: int) -> None:
        self.done += count
        if self.limit is not None and self.done > self.limit:
            raise TooLarge(f"more than the cache's cap of {self.limit} bytes: the download stopped there")

    def expect(self, total: int) -> None:
        self.total += total
        if self.limit is not None and self.total > self.limit:
            raise TooLarge(f"{self.total} bytes, more than the cache's cap of {self.limit} bytes: not downloaded")


def _expect(progress: Progress, total: int) -> None:
    if isinstance(progress, FetchProgress):
        progress.expect(total)


class FetchError(Exception):
    """A source that could not be fetched: one line, no credentials."""


class TooLarge(FetchError):
    """A source larger than the cache may hold (`FetchProgress.limit`)."""


def fetch(
    source: str, dest: Path, deadline: float, progress: Progress = lambda _n: None, hub: HubOptions | None = None
) -> None:
    """The source's bytes at `dest` (a file, or a directory for a source ending in `/`
    or an hf:// one, whose selection and token `hub` gives: `replica.hub_fetching`;
    or an oci:// one, whose registry credentials are `hub`'s token: `replica.oci_fetching`)."""
    parts = urlsplit(source)
    if parts.scheme == "hf":
        from replica.hub_fetching import HubOptions, fetch_hub  # it builds on this module's errors

        fetch_hub(source, dest, deadline, progress, hub or HubOptions())
        return
    if parts.scheme == "oci":
        from replica.oci_fetching import fetch_oci  # it builds on this module's errors

        fetch_oci(source, dest, deadline, progress, hub.token if hub is not None else None)
        return
    try:
        if parts.scheme == "file":
            _copy(Path(unquote(parts.path)), dest, deadline, progress)
        elif parts.scheme == "s3":
            client = _client(deadline, os.environ.get("AWS_ENDPOINT_URL", ""))
            store = S3Store(parts.netloc, client_options=client, retry_config=_RETRIES)  # type: ignore[arg-type]  # obstore's options are TypedDicts; ours are plain dicts
            key = unquote(parts.path.lstrip("/"))
            if is_directory(source):
                _fetch_prefix(store, key, dest, deadline, progress)
            else:
                _fetch_object(store, key, dest, deadline, progress)
        elif parts.scheme in ("http", "https"):
            base, _, name = source.rpartition("/")
            client = _client(deadline, source)
            http = HTTPStore.from_url(base, client_options=client, retry_config=_RETRIES)  # type: ignore[arg-type]  # obstore's options are TypedDicts; ours are plain dicts
            _fetch_object(http, unquote(name), dest, deadline, progress)
        else:
            raise FetchError(f"cannot fetch scheme '{parts.scheme}'")
    except FetchError:
        raise
    except OSError as error:
        if parts.scheme != "file":  # obstore's NotFoundError is a FileNotFoundError too
            raise FetchError(_store_error(error)) from None
        if isinstance(error, FileNotFoundError):
            raise FetchError(f"no such file: {error.filename}") from None
        raise FetchError(f"cannot read it ({error.strerror or error})") from None
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


def _check(deadline: float) -> None:
    if time.monotonic() > deadline:
        raise FetchError("timed out (load_timeout_s)")


def _fetch_object(
    store: Any, key: str, dest: Path, deadline: float, progress: Progress, size: int | None = None
) -> None:
    """One object; `size` when a listing already said it (else a HEAD asks, and it is expected)."""
    if size is None:
        size = int(obstore.head(store, key)["size"])
        _expect(progress, size)
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
            _check(deadline)
            out.write(chunk)
            progress(len(chunk))


def _ranged(store: Any, key: str, size: int, out: BinaryIO, deadline: float, progress: Progress) -> None:
    """Parallel ranged reads, PARALLEL_PARTS at a time: bounded memory, full bandwidth."""
    starts = list(range(0, size, PART_BYTES))
    for window in range(0, len(starts), PARALLEL_PARTS):
        _check(deadline)
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
    _expect(progress, sum(size for _, _, size in objects))
    for key, relative, size in objects:
        _check(deadline)
        _fetch_object(store, key, dest / relative, deadline, progress, size)


def _copy(source: Path, dest: Path, deadline: float, progress: Progress) -> None:
    if source.is_dir():
        files = [path for path in sorted(source.rglob("*")) if path.is_file()]
        if not files:
            raise FetchError("not found (an empty directory)")
        _expect(progress, sum(path.stat().st_size for path in files))
        for path in files:
            _check(deadline)
            _copy_file(path, dest / path.relative_to(source), progress)
    else:
        _expect(progress, source.stat().st_size)
        _copy_file(source, dest, progress)


def _copy_file(source: Path, dest: Path, progress: Progress) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, dest)
    progress(dest.stat().st_size)
