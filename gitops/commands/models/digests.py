"""A model's digest from where it is: a local file or directory, an s3:// or http(s):// source, an hf:// revision.

A file's digest is its sha256; a directory's is the sha256 of its manifest
(`vocabulary.replicas.model_digests`), the rule every node's cache checks, so a user
never computes a manifest by hand. s3://bucket/key, s3://bucket/prefix/ and https://
(http:// on loopback) are read as a stream with obstore, as a node fetches
them, with the same AWS_* variables (`s3_listing` lists a prefix with them).
Nothing is written.

An hf:// revision's pin (`hub_pin`) is the commit the Hub names for it today
and the digest of the selection include/exclude make there
(`vocabulary.replicas.hub_sources`). The Hub's metadata gives each large
(LFS) file's sha256 and size; the small files are read to hash them (every
node checks the whole selection on fetch). The Hub is `HF_ENDPOINT` or
huggingface.co; the token (`hub_token`) comes from `--token-file`, else
`HF_TOKEN`, else the Hub's token file, and is never printed. `hub_commit` is
what `gitops validate` uses to say which commit a refused branch names
today; artifact automation (`gitops.commands.automation`) pins with
`hub_pin`, `s3_listing` and `remote_digest` as `gitops models resolve`
(`gitops.commands.models.command`) does.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from collections.abc import Callable
from typing import Any, TypeVar
from pathlib import Path
from urllib.parse import unquote, urlsplit

from gitops.errors import UserError
from gitops.printable import printable
from vocabulary.replicas.hub_sources import (
    HubRevision,
    HubSource,
    endpoint_in,
    file_url,
    parse_revision,
    revision_url,
    selected,
    token_in,
    token_path,
)
from vocabulary.replicas.model_digests import ManifestEntry, is_directory, manifest_digest
from vocabulary.replicas.s3_picks import Listed, store_error_line

__all__ = [
    "HubPin", "file_sha256", "hub_commit", "hub_pin", "hub_token", "local_digest", "remote_digest", "s3_listing",
]

_CHUNK = 1024 * 1024


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        while chunk := stream.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def local_digest(path: Path) -> str:
    """A file's sha256, or a directory's manifest digest (symbolic links are refused)."""
    try:
        if path.is_symlink():
            raise UserError(f"{printable(str(path))}: is a symbolic link; give the file or directory itself")
        if path.is_file():
            return file_sha256(path)
        if not path.is_dir():
            raise UserError(f"{printable(str(path))}: no such file or directory")
        entries: list[ManifestEntry] = []
        for folder, dirs, files in os.walk(path):
            for name in dirs + files:
                if (Path(folder) / name).is_symlink():
                    raise UserError(f"{printable(str(Path(folder) / name))}: a model directory holds no symbolic links")
            for name in files:
                file = Path(folder) / name
                entries.append((file.relative_to(path).as_posix(), file.stat().st_size, file_sha256(file)))
        if not entries:
            raise UserError(f"{printable(str(path))}: an empty directory is no model")
        return manifest_digest(entries)
    except OSError as error:
        raise UserError(f"{printable(str(path))}: cannot read it ({error.strerror})") from None


def remote_digest(source: str) -> str:
    """The digest of what an s3:// or http(s):// source holds, read as a stream (nothing is stored)."""
    import obstore
    from obstore.store import HTTPStore, S3Store

    parts = urlsplit(source)
    try:
        if parts.scheme == "s3":
            store: S3Store | HTTPStore = _s3_store(parts.netloc)
            key = unquote(parts.path.lstrip("/"))
        else:
            base, _, name = source.rpartition("/")
            store, key = HTTPStore.from_url(base, client_options={"allow_http": parts.scheme == "http"}), unquote(name)

        def sha256(path: str) -> tuple[int, str]:
            digest, size = hashlib.sha256(), 0
            for chunk in obstore.get(store, path).stream(min_chunk_size=_CHUNK):
                digest.update(chunk)
                size += len(chunk)
            return size, digest.hexdigest()

        if not is_directory(source):
            return sha256(key)[1]
        entries: list[ManifestEntry] = []
        for batch in obstore.list(store, key):
            for meta in batch:
                relative = meta["path"][len(key) :]
                if relative and not relative.endswith("/"):
                    entries.append((relative, *sha256(meta["path"])))
        if not entries:
            raise UserError(f"{printable(source)}: no object under the prefix")
        return manifest_digest(entries)
    except UserError:
        raise
    except Exception as error:  # noqa: BLE001 — obstore's errors, one line for the user
        raise UserError(f"{printable(source)}: cannot read it ({store_error_line(str(error))})") from None


@dataclass(frozen=True)
class HubPin:
    source: HubSource  # at the commit
    sha256: str  # the selection's manifest digest
    files: int


def s3_listing(bucket: str, prefix: str) -> list[Listed]:
    """Every object under `prefix` in `bucket` (keys relative to it), as a node's S3 client sees them."""
    import obstore

    try:
        return [
            Listed(meta["path"][len(prefix) :], int(meta["size"]), meta["last_modified"])
            for batch in obstore.list(_s3_store(bucket), prefix or None)
            for meta in batch
        ]
    except Exception as error:  # noqa: BLE001 — obstore's errors, one line for the user
        where = printable(f"s3://{bucket}/{prefix}")
        raise UserError(f"{where}: cannot list it ({store_error_line(str(error))})") from None


def _s3_store(bucket: str) -> Any:
    """obstore's S3 client for `bucket`, with the AWS_* variables (plain http when AWS_ENDPOINT_URL says so)."""
    from obstore.store import S3Store

    endpoint = os.environ.get("AWS_ENDPOINT_URL", "")
    return S3Store(bucket, client_options={"allow_http": endpoint.startswith("http://")})


def hub_token(token_file: str | None) -> str | None:
    """The Hub token: `token_file`'s, else `HF_TOKEN`, else the Hub's token file, else none."""
    if token_file is not None:
        try:
            return Path(token_file).read_text().strip() or None
        except (OSError, UnicodeDecodeError) as error:
            raise UserError(f"--token-file {printable(token_file)}: cannot read it ({error.__class__.__name__})") from None
    token = token_in(os.environ)
    if token:
        return token
    try:
        return Path(token_path(os.environ, os.path.expanduser("~"))).read_text().strip() or None
    except (OSError, UnicodeDecodeError):
        return None


def hub_pin(
    source: HubSource, include: tuple[str, ...], exclude: tuple[str, ...], token: str | None, timeout_s: float = 60.0
) -> HubPin:
    """The commit `source`'s revision names on the Hub today, and the digest of the selection there."""
    return _with_hub(source, token, timeout_s, lambda client, endpoint, revision: _pin(
        client, endpoint, source, revision, include, exclude
    ))


def hub_commit(source: HubSource, token: str | None, timeout_s: float) -> str:
    """The commit `source`'s revision names on the Hub today (its metadata only)."""
    return _with_hub(source, token, timeout_s, lambda _client, _endpoint, revision: revision.commit)


_T = TypeVar("_T")


def _with_hub(
    source: HubSource, token: str | None, timeout_s: float, then: Callable[[Any, str, HubRevision], _T]
) -> _T:
    """`then(client, endpoint, revision)` with `source`'s revision read from the Hub; UserError when it cannot be."""
    import httpx

    try:
        endpoint = endpoint_in(os.environ)
    except ValueError as error:
        raise UserError(str(error)) from None
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    where = printable(source.url())
    try:
        with httpx.Client(headers=headers, timeout=timeout_s, follow_redirects=True, trust_env=False) as client:
            answer = client.get(revision_url(endpoint, source))
            if answer.status_code in (401, 403):
                raise UserError(f"{where}: access denied ({answer.status_code}) by the Hub: pass --token-file or set HF_TOKEN")
            if answer.status_code == 404:
                raise UserError(f"{where}: not found (404): no such repository or revision on {endpoint}")
            if answer.status_code != 200:
                raise UserError(f"{where}: the Hub answered {answer.status_code}")
            try:
                revision = parse_revision(answer.json())
            except ValueError as error:
                raise UserError(f"{where}: {error}") from None
            return then(client, endpoint, revision)
    except httpx.HTTPError as error:
        raise UserError(f"{where}: cannot reach the Hub at {endpoint} ({type(error).__name__})") from None


def _pin(
    client: Any, endpoint: str, source: HubSource, revision: HubRevision,
    include: tuple[str, ...], exclude: tuple[str, ...],
) -> HubPin:
    where = printable(source.url())
    files = selected(revision.files, include, exclude)
    if not files:
        raise UserError(f"{where}: include/exclude select none of the revision's {len(revision.files)} files")
    entries: list[ManifestEntry] = []
    for file in files:
        if file.sha256 is None:  # a small file: read it
            entries.append((file.path, *_read_file(client, file_url(endpoint, source.repo, revision.commit, file.path))))
        else:
            entries.append((file.path, file.size, file.sha256))
    try:
        digest = manifest_digest(entries)
    except ValueError as error:
        raise UserError(f"{where}: {error}") from None
    return HubPin(HubSource(source.repo, revision.commit), digest, len(entries))


def _read_file(client: Any, url: str) -> tuple[int, str]:
    digest, size = hashlib.sha256(), 0
    with client.stream("GET", url) as body:
        if body.status_code != 200:
            raise UserError(f"{printable(url)}: the Hub answered {body.status_code}")
        for chunk in body.iter_bytes(_CHUNK):
            digest.update(chunk)
            size += len(chunk)
    return size, digest.hexdigest()
