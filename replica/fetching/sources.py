"""Fetching a model's bytes from its source into a local path: the errors, the progress, the dispatch.

`fetch(source, dest, deadline)` writes a single file to `dest`, or a
directory's files under `dest`, and never verifies anything — the cache
(`replica.models`) does. Each scheme has its fetcher, imported when a model
of its scheme is fetched (a replica that fetches none never loads their
libraries): s3:// and http(s):// are `replica.fetching.store`'s (obstore),
hf:// `replica.fetching.hub`'s (the Hub's HTTP API with httpx) and oci://
`replica.fetching.oci`'s (a registry's distribution API with httpx); file://
is copied here. Every failure is a `FetchError` with one line a user can act
on (no such key, access denied, timed out). A `FetchProgress` passed as
`progress` is also told how many bytes to expect, once known (a directory's:
all its files', listed first), so a starting replica can say how far its
fetch is; one given a limit (the cache's cap) stops the fetch once past it,
so a download never holds more than the cache may; and a fetcher that
hashes what it writes (hf://, oci://) records it there, so a cold fetch is
read once (`replica.fetching.hashing`). An I/O shell.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlsplit

from replica.fetching.hashing import FileDigests

if TYPE_CHECKING:
    from replica.fetching.hub import HubOptions

__all__ = ["FetchError", "FetchProgress", "Progress", "TooLarge", "check_deadline", "expect", "fetch"]

Progress = Callable[[int], None]


class FetchProgress:
    """Bytes fetched so far and bytes expected (0 until known); written by the
    fetching thread, read by another (plain ints: each read sees a whole value).
    With a `limit`, a fetch expected or grown past it stops (`TooLarge`).
    `file_digests`: the files the fetch wrote and hashed as it wrote them
    (`replica.fetching.hashing`), which the cache need not read back."""

    def __init__(self, limit: int | None = None) -> None:
        self.done = 0
        self.total = 0
        self.limit = limit
        self.file_digests = FileDigests()

    def __call__(self, count: int) -> None:
        self.done += count
        if self.limit is not None and self.done > self.limit:
            raise TooLarge(f"more than the cache's cap of {self.limit} bytes: the download stopped there")

    def expect(self, total: int) -> None:
        self.total += total
        if self.limit is not None and self.total > self.limit:
            raise TooLarge(f"{self.total} bytes, more than the cache's cap of {self.limit} bytes: not downloaded")


def expect(progress: Progress, total: int) -> None:
    """Tell a `FetchProgress` how many more bytes to expect (a plain callable is not told)."""
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
    or an hf:// one, whose selection and token `hub` gives: `replica.fetching.hub`;
    or an oci:// one, whose registry credentials are `hub`'s token: `replica.fetching.oci`)."""
    parts = urlsplit(source)
    if parts.scheme == "hf":
        from replica.fetching.hub import HubOptions, fetch_hub  # it builds on this module's errors

        fetch_hub(source, dest, deadline, progress, hub or HubOptions())
        return
    if parts.scheme == "oci":
        from replica.fetching.oci import fetch_oci  # it builds on this module's errors

        fetch_oci(source, dest, deadline, progress, hub.token if hub is not None else None)
        return
    if parts.scheme in ("s3", "http", "https"):
        from replica.fetching.store import fetch_store  # it builds on this module's errors

        fetch_store(source, dest, deadline, progress)
        return
    if parts.scheme != "file":
        raise FetchError(f"cannot fetch scheme '{parts.scheme}'")
    try:
        _copy(Path(unquote(parts.path)), dest, deadline, progress)
    except FileNotFoundError as error:
        raise FetchError(f"no such file: {error.filename}") from None
    except OSError as error:
        raise FetchError(f"cannot read it ({error.strerror or error})") from None


def check_deadline(deadline: float) -> None:
    """A `FetchError` once the model's `load_timeout_s` has passed."""
    if time.monotonic() > deadline:
        raise FetchError("timed out (load_timeout_s)")


def _copy(source: Path, dest: Path, deadline: float, progress: Progress) -> None:
    if source.is_dir():
        files = [path for path in sorted(source.rglob("*")) if path.is_file()]
        if not files:
            raise FetchError("not found (an empty directory)")
        expect(progress, sum(path.stat().st_size for path in files))
        for path in files:
            check_deadline(deadline)
            _copy_file(path, dest / path.relative_to(source), progress)
    else:
        expect(progress, source.stat().st_size)
        _copy_file(source, dest, progress)


def _copy_file(source: Path, dest: Path, progress: Progress) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, dest)
    progress(dest.stat().st_size)
