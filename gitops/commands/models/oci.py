"""`gitops models resolve oci://REGISTRY/REPO:TAG`: the pin of an OCI tag, and its model's digest.

A tag moves; a `[models.NAME]` table pins the manifest by digest
(`vocabulary.replicas.oci_sources`). This asks the registry (its
distribution API, with the registries' bearer-token flow: anonymous, or with
`--token-file`'s `USER:PASSWORD`) for the manifest the tag names today,
pins that manifest's digest (an image index's own, as a node then picks its
linux/amd64 manifest), and computes the model directory's digest as a node's
cache will check it: an artifact's from its layers' digests and sizes (each
layer is one file), a modelcar's by reading its tar layers as a stream and
hashing the files under /models, each blob checked against its digest, with
whiteouts applied and nothing written. The credentials are never printed.
`oci_tag_digest` is what `gitops validate` uses to say which digest a
refused tag names today, and artifact automation to see whether a watched
tag moved (`gitops.commands.automation`); `oci_tags` reads a repository's
tag list, page by page (`vocabulary.replicas.oci_tags`), for an automation
that picks a tag by its version.
"""

from __future__ import annotations

import base64
import hashlib
import tarfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gitops.errors import UserError
from gitops.printable import printable
from vocabulary.replicas.model_digests import ManifestEntry, manifest_digest
from vocabulary.replicas.oci_tags import MAX_TAG_PAGES, MAX_TAGS, TAG_PAGE_SIZE, next_page, page_tags, tags_url
from vocabulary.replicas.oci_sources import (
    ACCEPT,
    MAX_MANIFEST_BYTES,
    MAX_MEMBERS,
    Blob,
    Challenge,
    OciReference,
    blob_url,
    child_manifest,
    layer_compression,
    layer_member,
    manifest_url,
    parse_challenge,
    parse_image,
    split_credentials,
    title_path,
    token_from,
    token_request,
)

__all__ = ["OciPin", "oci_credentials", "oci_pin", "oci_tag_digest", "oci_tags"]

_CHUNK = 1024 * 1024


@dataclass(frozen=True)
class OciPin:
    reference: OciReference  # at the manifest's digest
    sha256: str  # the model directory's manifest digest
    files: int


def oci_credentials(token_file: str | None, flag: str = "--token-file") -> str | None:
    """`USER:PASSWORD` from `token_file` (given as `flag`), or None (an anonymous pull)."""
    if token_file is None:
        return None
    try:
        text = Path(token_file).read_text().strip()
        split_credentials(text)
    except (OSError, UnicodeDecodeError) as error:
        raise UserError(f"{flag} {printable(token_file)}: cannot read it ({error.__class__.__name__})") from None
    except ValueError:
        raise UserError(f"{flag} {printable(token_file)}: for a registry it holds USER:PASSWORD") from None
    return text


def oci_pin(reference: OciReference, credentials: str | None, timeout_s: float = 600.0,
            flag: str = "--token-file") -> OciPin:
    """The manifest `reference`'s tag (or digest) names today, and its model directory's digest."""
    import httpx

    where = printable(reference.url())
    pin = reference.digest or reference.tag or ""
    try:
        with httpx.Client(timeout=timeout_s, follow_redirects=True, trust_env=False) as client:
            registry = _Registry(client, reference, credentials, flag)
            body, content_type = registry.manifest(pin)
            digest = f"sha256:{hashlib.sha256(body).hexdigest()}"
            if reference.digest is not None and digest != reference.digest:
                raise UserError(f"{where}: the registry's manifest does not have that digest")
            try:
                child = child_manifest(body, content_type)
                if child is not None:
                    child_body, content_type = registry.manifest(child)
                    if f"sha256:{hashlib.sha256(child_body).hexdigest()}" != child:
                        raise UserError(f"{where}: the registry's manifest {child} does not have its digest")
                    body = child_body
                image = parse_image(body, content_type)
                if image.modelcar:
                    entries = _modelcar_entries(registry, image.layers)
                else:
                    entries = [(title_path(layer.title or ""), layer.size, layer.digest.removeprefix("sha256:"))
                               for layer in image.layers]
            except ValueError as error:
                raise UserError(f"{where}: {error}") from None
            if not entries:
                raise UserError(f"{where}: the image holds no file under /models (a modelcar keeps its model there)")
            return OciPin(reference.pinned(digest), manifest_digest(entries), len(entries))
    except httpx.HTTPError as error:
        raise UserError(f"{where}: cannot reach the registry {reference.registry} ({type(error).__name__})") from None


def oci_tag_digest(reference: OciReference, credentials: str | None, timeout_s: float,
                   flag: str = "--token-file") -> str:
    """The digest of the manifest `reference`'s tag names today (that manifest only: what
    `gitops validate` adds to a refused tag); UserError when the registry does not say."""
    import httpx

    try:
        with httpx.Client(timeout=timeout_s, follow_redirects=True, trust_env=False) as client:
            body, _ = _Registry(client, reference, credentials, flag).manifest(reference.tag or "")
    except httpx.HTTPError as error:
        raise UserError(f"{printable(reference.url())}: cannot reach the registry ({type(error).__name__})") from None
    return f"sha256:{hashlib.sha256(body).hexdigest()}"


def oci_tags(reference: OciReference, credentials: str | None, timeout_s: float,
             page_size: int = TAG_PAGE_SIZE, flag: str = "--token-file") -> list[str]:
    """Every tag of `reference`'s repository, following the registry's `Link` pages (at most
    `MAX_TAG_PAGES` pages and `MAX_TAGS` tags: more is an error, never a partial list)."""
    import httpx

    where = printable(f"oci://{reference.registry}/{reference.repository}")
    tags: list[str] = []
    url: str | None = tags_url(reference, page_size)
    try:
        with httpx.Client(timeout=timeout_s, follow_redirects=True, trust_env=False) as client:
            registry = _Registry(client, reference, credentials, flag)
            for _ in range(MAX_TAG_PAGES):
                if url is None:
                    return tags
                body, link = registry.tag_page(url)
                try:
                    tags += page_tags(body)
                    url = next_page(url, link)
                except ValueError as error:
                    raise UserError(f"{where}: {error}") from None
                if len(tags) > MAX_TAGS:
                    break
    except httpx.HTTPError as error:
        raise UserError(f"{where}: cannot reach the registry {reference.registry} ({type(error).__name__})") from None
    if url is None and len(tags) <= MAX_TAGS:
        return tags
    raise UserError(f"{where}: the tag list is longer than {MAX_TAGS} tags or {MAX_TAG_PAGES} pages: "
                    "watch one tag (oci://REGISTRY/REPO:TAG) instead")


class _Registry:
    def __init__(self, client: Any, reference: OciReference, credentials: str | None,
                 flag: str = "--token-file") -> None:
        self.client = client
        self.flag = flag  # where a person gives the credentials, for the errors that ask for them
        self.reference = reference
        self.where = printable(reference.url())
        self.basic = split_credentials(credentials) if credentials else None
        self.authorization: str | None = None

    def open(self, url: str, accept: str | None = None) -> Any:
        for attempt in range(2):
            headers = {"Accept": accept} if accept else {}
            if self.authorization:
                headers["Authorization"] = self.authorization
            response = self.client.send(self.client.build_request("GET", url, headers=headers), stream=True)
            if response.status_code != 401 or attempt:
                return response
            challenge = parse_challenge(response.headers.get("www-authenticate", ""))
            response.close()
            if challenge is None:
                break
            self.authorization = self._authorize(challenge)
        raise UserError(f"{self.where}: access denied (401) by the registry: pass {self.flag} (USER:PASSWORD)")

    def _authorize(self, challenge: Challenge) -> str:
        if challenge.scheme == "basic":
            if self.basic is None:
                raise UserError(f"{self.where}: the registry asks for credentials: pass {self.flag} (USER:PASSWORD)")
            return "Basic " + base64.b64encode(":".join(self.basic).encode()).decode()
        try:
            url = token_request(challenge, self.reference.repository)
        except ValueError as error:
            raise UserError(f"{self.where}: {error}") from None
        answer = self.client.get(url, auth=self.basic) if self.basic else self.client.get(url)
        if answer.status_code != 200:
            raise UserError(
                f"{self.where}: the registry's token service answered {answer.status_code}"
                + (f": pass {self.flag} (USER:PASSWORD)" if answer.status_code in (401, 403) else "")
            )
        try:
            return f"Bearer {token_from(answer.json())}"
        except ValueError as error:
            raise UserError(f"{self.where}: {error}") from None

    def tag_page(self, url: str) -> tuple[bytes, str | None]:
        """One page of the tag list, and its `Link` header."""
        response = self.open(url, "application/json")
        try:
            if response.status_code == 404:
                raise UserError(f"{self.where}: not found (404): no repository {self.reference.repository}")
            if response.status_code != 200:
                raise UserError(f"{self.where}: the registry answered {response.status_code} for the tag list")
            return self._body(response, "tag list"), response.headers.get("link")
        finally:
            response.close()

    def _body(self, response: Any, what: str) -> bytes:
        body = bytearray()
        for chunk in response.iter_bytes():
            body += chunk
            if len(body) > MAX_MANIFEST_BYTES:
                raise UserError(f"{self.where}: the {what} is larger than {MAX_MANIFEST_BYTES} bytes")
        return bytes(body)

    def manifest(self, pin: str) -> tuple[bytes, str]:
        response = self.open(manifest_url(self.reference, pin), ACCEPT)
        try:
            if response.status_code == 404:
                raise UserError(f"{self.where}: not found (404): no manifest {printable(pin)} in {self.reference.repository}")
            if response.status_code != 200:
                raise UserError(f"{self.where}: the registry answered {response.status_code} for the manifest")
            return self._body(response, "manifest"), response.headers.get("content-type", "")
        finally:
            response.close()


class _Hashed:
    """A blob's body as a file object for tarfile, checked against its digest once read to the end."""

    def __init__(self, response: Any, blob: Blob) -> None:
        self.chunks = response.iter_bytes(_CHUNK)
        self.blob = blob
        self.hash = hashlib.sha256()
        self.size = 0
        self.buffer = b""
        self.at = 0

    def _next(self) -> bytes:
        chunk: bytes = next(self.chunks, b"")
        self.size += len(chunk)
        self.hash.update(chunk)
        return chunk

    def read(self, count: int = -1) -> bytes:
        out = bytearray()
        while count is None or count < 0 or len(out) < count:
            if self.at == len(self.buffer):
                self.buffer, self.at = self._next(), 0
                if not self.buffer:
                    break
            take = len(self.buffer) - self.at if count is None or count < 0 else count - len(out)
            out += self.buffer[self.at : self.at + take]
            self.at = min(self.at + take, len(self.buffer))
        return bytes(out)

    def verified(self) -> bool:
        while self._next():
            pass
        return self.size == self.blob.size and f"sha256:{self.hash.hexdigest()}" == self.blob.digest


def _modelcar_entries(registry: _Registry, layers: tuple[Blob, ...]) -> list[ManifestEntry]:
    """The files under /models once every layer is applied, as (path, size, sha256), hashed as they stream."""
    files: dict[str, tuple[int, str]] = {}
    for layer in layers:
        response = registry.open(blob_url(registry.reference, layer.digest))
        try:
            if response.status_code != 200:
                raise UserError(f"{registry.where}: the registry answered {response.status_code} for blob {layer.digest}")
            stream = _Hashed(response, layer)
            _apply(stream, layer_compression(layer.media_type), files)
            if not stream.verified():
                raise UserError(f"{registry.where}: the blob {layer.digest} the registry sent does not have its digest")
        finally:
            response.close()
    return [(path, size, sha) for path, (size, sha) in sorted(files.items())]


def _gone(files: dict[str, tuple[int, str]], path: str, keep: set[str]) -> None:
    for name in [name for name in files if (name == path or name.startswith(path + "/") or not path)]:
        if name not in keep:
            del files[name]


def _apply(stream: _Hashed, compression: str, files: dict[str, tuple[int, str]]) -> None:
    ours: set[str] = set()
    try:
        with tarfile.open(fileobj=stream, mode=f"r|{compression}", bufsize=_CHUNK) as tar:  # type: ignore[call-overload]  # a file object by duck typing
            for count, member in enumerate(tar, start=1):
                if count > MAX_MEMBERS:
                    raise ValueError(f"a layer has more than {MAX_MEMBERS} entries")
                kind = ("file" if member.isreg() else "dir" if member.isdir() else "symlink" if member.issym()
                        else "hardlink" if member.islnk() else "device, fifo or other special file")
                action = layer_member(member.name, kind, member.linkname)
                if action.action == "file":
                    _gone(files, action.path, set())
                    digest, size = hashlib.sha256(), 0
                    source = tar.extractfile(member)
                    while source is not None and (chunk := source.read(_CHUNK)):
                        digest.update(chunk)
                        size += len(chunk)
                    files[action.path] = (size, digest.hexdigest())
                    ours.add(action.path)
                elif action.action == "link":
                    if action.target not in files:
                        raise ValueError(f"/models/{action.path} is a hard link to no file of the model")
                    files[action.path] = files[action.target]
                    ours.add(action.path)
                elif action.action == "dir" and action.path:
                    files.pop(action.path, None)
                elif action.action == "whiteout" and action.path not in ours:
                    _gone(files, action.path, ours)
                elif action.action == "opaque":
                    _gone(files, action.path, ours)
    except (tarfile.TarError, zlib.error, EOFError) as error:
        raise ValueError(f"layer {stream.blob.digest[:19]}… is no tar ({error})") from None
