"""Fetching an `oci://REGISTRY/REPO@sha256:…` model from an OCI registry, over the distribution HTTP API with httpx.

Owns the replica's end of OCI sources (docs/guides/models.md): the manifest
by its digest (an image index names its linux/amd64 manifest, fetched by
digest too), then each layer's blob by digest, each checked against its
sha256 and size as it streams (hashed in a thread beside the download), so
a byte the registry changed fails the fetch. A modelcar image's tar layer is
saved beside the model directory (`DEST-layer`, one layer at a time) and
verified whole before it is parsed; then only its members under `/models`
are written, each first judged by
`vocabulary.replicas.oci_sources.layer_member` (no absolute path, no `..`,
no link, no device): a plain tar's files copied by the kernel from their
offsets in the layer, a gzip'd one's read in tarfile's stream mode. An
artifact's layers are written straight to the files their titles name.
Every file written is hashed once, as its bytes go by, into the fetch's
`FetchProgress.file_digests` (`replica.fetching.hashing`), so the cache
does not read the model back: an artifact's file is its blob (whose digest
is checked anyway); a plain tar's members are hashed by the byte spans they
occupy while the layer streams (a walk of its headers that keeps no member
data, its result used only once the layer verifies); a gzip'd one's as they
are written. The
bytes written are bounded by the cache's cap (`FetchProgress.limit`),
whatever a gzip layer expands to, and with no cap by `EXPANSION_RATIO` times
the layers' size (and `EXPANSION_SLACK`); a layer's members by `MAX_MEMBERS`.

Authentication is the registries' own flow: a request answered 401 with
`WWW-Authenticate: Bearer realm=…` asks that token service for a pull token
(anonymously, or with the model's credentials), and one answered with
`Basic` is sent the credentials. The credentials (`USER:PASSWORD`, from the
model's `token_secret`) go only into the Authorization header of the
registry or its token service: never into a URL, an error or a log line, and
httpx drops the header on a redirect to another host (a registry's blob
storage). Never verifies the model's digest: the cache does. An I/O shell.
"""

from __future__ import annotations

import base64
import hashlib
import os
import shutil
import tarfile
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

import httpx

from replica.fetching.hashing import FileDigests, Spans, StreamHash, tar_spans
from replica.fetching.sources import FetchError, FetchProgress, Progress, TooLarge
from vocabulary.replicas.oci_sources import (
    ACCEPT,
    MAX_MANIFEST_BYTES,
    MAX_MEMBERS,
    Blob,
    OciReference,
    blob_url,
    child_manifest,
    layer_compression,
    layer_member,
    manifest_url,
    parse_challenge,
    parse_image,
    parse_oci_reference,
    sizes,
    split_credentials,
    title_path,
    token_from,
    token_request,
)

__all__ = ["EXPANSION_RATIO", "EXPANSION_SLACK", "Registry", "fetch_oci"]

_CHUNK = 1024 * 1024
# What a modelcar's layers may expand to however large the cache: weights hardly compress,
# text a few times; gzip can reach 1,000 x, and hard links to one file more.
EXPANSION_RATIO = 100
EXPANSION_SLACK = 64 * 1024 * 1024


def _status_error(status: int, what: str) -> FetchError:
    if status in (401, 403):
        return FetchError(
            f"access denied ({status}) by the registry: give the model a token_secret holding USER:PASSWORD"
        )
    if status == 404:
        return FetchError(f"not found (404): no such {what}")
    return FetchError(f"the registry answered {status} for {what}")


class Registry:
    """One repository of a registry, as httpx requests with its authentication flow."""

    def __init__(self, reference: OciReference, credentials: str | None, client: httpx.Client) -> None:
        self.reference = reference
        self.client = client
        self._basic: tuple[str, str] | None = None
        if credentials:
            try:
                self._basic = split_credentials(credentials)
            except ValueError as error:
                raise FetchError(str(error)) from None
        self._authorization: str | None = None

    def open(self, url: str, accept: str | None = None) -> httpx.Response:
        """A streamed GET of `url`, authorized as the registry asks; the caller closes it."""
        for attempt in range(2):
            headers = {"Accept": accept} if accept else {}
            if self._authorization:
                headers["Authorization"] = self._authorization
            response = self.client.send(self.client.build_request("GET", url, headers=headers), stream=True)
            if response.status_code != 401 or attempt:
                return response
            challenge = parse_challenge(response.headers.get("www-authenticate", ""))
            response.close()
            if challenge is None:
                raise _status_error(401, "authentication the registry names")
            self._authorization = self._authorize(challenge)
        raise AssertionError("unreachable")

    def _authorize(self, challenge: Any) -> str:
        if challenge.scheme == "basic":
            if self._basic is None:
                raise _status_error(401, "anonymous pull")
            return "Basic " + base64.b64encode(":".join(self._basic).encode()).decode()
        try:
            url = token_request(challenge, self.reference.repository)
        except ValueError as error:
            raise FetchError(str(error)) from None
        answer = self.client.get(url, auth=self._basic) if self._basic else self.client.get(url)
        if answer.status_code != 200:
            raise _status_error(answer.status_code, "token from the registry's token service")
        try:
            return f"Bearer {token_from(answer.json())}"
        except ValueError as error:
            raise FetchError(str(error)) from None

    def manifest(self, digest: str) -> tuple[bytes, str]:
        """The manifest `digest` names, checked against it, and its Content-Type."""
        response = self.open(manifest_url(self.reference, digest), ACCEPT)
        try:
            if response.status_code != 200:
                raise _status_error(response.status_code, f"manifest {digest} in {self.reference.repository}")
            body = bytearray()
            for chunk in response.iter_bytes():
                body += chunk
                if len(body) > MAX_MANIFEST_BYTES:
                    raise FetchError(f"the manifest {digest} is larger than {MAX_MANIFEST_BYTES} bytes")
        finally:
            response.close()
        if f"sha256:{hashlib.sha256(body).hexdigest()}" != digest:
            raise FetchError(f"the registry's manifest does not have the digest {digest}: refused")
        return bytes(body), response.headers.get("content-type", "")

    def blob(self, blob: Blob) -> httpx.Response:
        """A streamed GET of `blob`; the caller checks it against its digest and size (`_save`)."""
        response = self.open(blob_url(self.reference, blob.digest))
        if response.status_code != 200:
            response.close()
            raise _status_error(response.status_code, f"blob {blob.digest}")
        return response


def _save(response: httpx.Response, blob: Blob, target: Path, deadline: float, progress: Progress,
          written: _Written | None = None, spans: Spans | None = None) -> None:
    """`blob`'s body into `target`, hashed as it streams (in a thread of its own, beside the
    download and the writes); FetchError unless it has the manifest's size and digest.
    `spans`: filled with the sha256 of each regular member's data, for a plain tar layer."""
    hashing = StreamHash(walk=None if spans is None else tar_spans(spans, MAX_MEMBERS))
    size = 0
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        with target.open("wb") as out:
            for chunk in response.iter_bytes():
                if time.monotonic() > deadline:
                    raise FetchError("timed out (load_timeout_s)")
                size += len(chunk)
                if size > blob.size:
                    raise FetchError(f"the blob {blob.digest} is longer than the manifest's {blob.size} bytes")
                if written is not None:
                    written.add(len(chunk))
                out.write(chunk)
                progress(len(chunk))
                hashing.feed(chunk)
    finally:
        got = f"sha256:{hashing.finish()}"
        response.close()
    if size != blob.size or got != blob.digest:
        raise FetchError(f"the blob {blob.digest} the registry sent has {size} bytes and digest {got}: refused")


def fetch_oci(source: str, dest: Path, deadline: float, progress: Progress, credentials: str | None) -> None:
    """The model directory of `source`'s image (or artifact) under `dest`."""
    try:
        reference = parse_oci_reference(source)
    except ValueError as error:
        raise FetchError(str(error)) from None
    if reference.digest is None:
        raise FetchError("an oci:// source needs @sha256:… (`gitops models resolve` prints it)")
    remaining = max(deadline - time.monotonic(), 0.001)
    timeout = httpx.Timeout(remaining, connect=min(remaining, 10.0))
    try:
        with httpx.Client(timeout=timeout, follow_redirects=True, trust_env=False) as client:
            registry = Registry(reference, credentials, client)
            body, content_type = registry.manifest(reference.digest)
            try:
                child = child_manifest(body, content_type)
                if child is not None:
                    body, content_type = registry.manifest(child)
                image = parse_image(body, content_type)
            except ValueError as error:
                raise FetchError(str(error)) from None
            if isinstance(progress, FetchProgress):
                progress.expect(sizes(image.layers))
            dest.mkdir(parents=True, exist_ok=True)
            limit = progress.limit if isinstance(progress, FetchProgress) else None
            digests = progress.file_digests if isinstance(progress, FetchProgress) else FileDigests()
            written = _Written(limit, EXPANSION_SLACK + EXPANSION_RATIO * sizes(image.layers))
            blob_file = dest.parent / f"{dest.name}-layer"  # beside the model: swept with it if we die
            for layer in image.layers:
                if not image.modelcar:
                    target = _inside(dest, title_path(layer.title or ""))
                    _save(registry.blob(layer), layer, target, deadline, progress, written)
                    digests.record(target, layer.digest.removeprefix("sha256:"))
                    continue
                try:
                    # Verified whole before a byte of it is parsed, then extracted from the file; a plain
                    # tar's members are hashed as the blob streams, by the spans of the layer they occupy.
                    spans: Spans = {}
                    plain = layer_compression(layer.media_type) == ""
                    _save(registry.blob(layer), layer, blob_file, deadline, progress, spans=spans if plain else None)
                    _extract(blob_file, layer, dest, written, spans, digests)
                finally:
                    blob_file.unlink(missing_ok=True)
            if not any(path.is_file() for path in dest.rglob("*")):
                raise FetchError("the image holds no file under /models (a modelcar keeps its model there)")
    except httpx.TimeoutException:
        raise FetchError("timed out") from None
    except httpx.HTTPError as error:
        raise FetchError(f"cannot reach the registry ({type(error).__name__}: {_plain(error)})") from None


def _plain(error: Exception) -> str:
    return " ".join(str(error).split())[:200]


def _inside(dest: Path, relative: str) -> Path:
    return dest.joinpath(*relative.split("/")) if relative else dest


class _Written:
    """The bytes written so far, against the cache's cap and `bound` (a gzip layer, or hard links
    to one file, may expand far past the layers' size: a bomb stops here even with no cap)."""

    def __init__(self, limit: int | None, bound: int | None = None) -> None:
        self.limit = limit
        self.bound = bound
        self.bytes = 0

    def add(self, count: int) -> None:
        self.bytes += count
        if self.limit is not None and self.bytes > self.limit:
            raise TooLarge(f"the image's model expands past the cache's cap of {self.limit} bytes: stopped there")
        if self.bound is not None and self.bytes > self.bound:
            raise FetchError(
                f"the image's layers expand past {self.bound} bytes ({EXPANSION_RATIO} x their size and "
                f"{EXPANSION_SLACK // 2**20} MiB): refused as a decompression bomb"
            )


def _write(chunks: Iterator[bytes], target: Path, written: _Written, digests: FileDigests) -> None:
    """A file of the model from `chunks` (a gzip'd layer's member), counted against the cap, hashed as written."""
    _clear(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256()
    with target.open("wb") as out:
        for chunk in chunks:
            written.add(len(chunk))
            out.write(chunk)
            digest.update(chunk)
    digests.record(target, digest.hexdigest())


def _clear(target: Path) -> None:
    """Room for a later layer's entry where an earlier one put something else."""
    if target.is_dir() and not target.is_symlink():
        shutil.rmtree(target)
    elif target.exists() or target.is_symlink():
        target.unlink()


def _extract(blob_file: Path, layer: Blob, dest: Path, written: _Written, spans: Spans, digests: FileDigests) -> None:
    """A verified modelcar layer's members under /models into `dest`, as an overlay on the layers before it.
    A plain tar's files are copied by the kernel from their offsets in the layer, each taking the sha256 of
    its span (`spans`, hashed as the layer streamed); a gzip'd one is read as a stream and hashed as written.
    Each file's sha256 goes into `digests`."""
    ours: set[str] = set()  # what this layer wrote: its own whiteouts do not remove it
    plain = layer_compression(layer.media_type) == ""
    where = f"layer {layer.digest[:19]}…"
    try:
        with blob_file.open("rb") as raw, tarfile.open(
            fileobj=raw, mode="r:" if plain else "r|gz", bufsize=_CHUNK
        ) as tar:
            for count, member in enumerate(tar, start=1):
                if count > MAX_MEMBERS:
                    raise FetchError(f"a layer has more than {MAX_MEMBERS} entries: refused")
                try:
                    action = layer_member(member.name, _kind(member), member.linkname)
                except ValueError as error:
                    raise FetchError(f"{where}: {error}") from None
                target = _inside(dest, action.path)
                if action.action == "skip" or (action.action == "dir" and not action.path):
                    continue
                if action.action == "dir":
                    if not target.is_dir():
                        _clear(target)
                    target.mkdir(parents=True, exist_ok=True)
                elif action.action == "file":
                    if plain and not member.issparse():
                        _copy_range(raw, member.offset_data, member.size, target, written)
                        if (hashed := spans.get((member.offset_data, member.size))) is not None:
                            digests.record(target, hashed)
                    else:
                        source = tar.extractfile(member)
                        if source is None:
                            raise FetchError(f"{where}: /models/{action.path} cannot be read")
                        _write(_reads(source), target, written, digests)
                elif action.action == "link":
                    linked = _inside(dest, action.target)
                    if not linked.is_file() or linked.is_symlink():
                        raise FetchError(f"/models/{action.path} is a hard link to no file of the model")
                    written.add(linked.stat().st_size)
                    _clear(target)
                    target.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(linked, target)
                    if (hashed := digests.sha256(linked)) is not None:
                        digests.record(target, hashed)
                elif action.action == "whiteout":
                    if action.path not in ours:
                        _clear(target)
                    continue
                elif action.action == "opaque":
                    if target.is_dir():
                        for child in list(target.iterdir()):
                            relative = child.relative_to(dest).as_posix()
                            if relative not in ours and not any(mine.startswith(relative + "/") for mine in ours):
                                _clear(child)
                    continue
                ours.add(action.path)
    except (tarfile.TarError, zlib.error, EOFError) as error:
        raise FetchError(f"{where} is no tar ({_plain(error)})") from None
    except OSError as error:
        raise FetchError(f"{where}: cannot write it ({error.strerror or error})") from None


def _copy_range(raw: BinaryIO, offset: int, size: int, target: Path, written: _Written) -> None:
    """`size` bytes at `offset` of the layer file into `target`, copied in the kernel."""
    written.add(size)
    _clear(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    with target.open("wb") as out:
        done = 0
        while done < size:
            copied = os.copy_file_range(raw.fileno(), out.fileno(), min(size - done, 1 << 30), offset + done)
            if copied == 0:
                raise FetchError("the layer ends inside a file")
            done += copied


def _reads(source: Any) -> Iterator[bytes]:
    while chunk := source.read(_CHUNK):
        yield chunk


def _kind(member: tarfile.TarInfo) -> str:
    if member.isreg():
        return "file"
    if member.isdir():
        return "dir"
    if member.issym():
        return "symlink"
    if member.islnk():
        return "hardlink"
    return "device, fifo or other special file"
