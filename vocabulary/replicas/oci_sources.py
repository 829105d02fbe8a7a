"""What an `oci://REGISTRY/REPO@sha256:DIGEST` model source is, and how its image becomes a model directory.

An OCI source (docs/guides/models.md) names a registry, a repository and a
manifest by digest: a tag moves, a digest does not, so `oci_source_problem`
refuses a tag with a message naming the command that prints the pin
(`gitops models resolve oci://REGISTRY/REPO:TAG`), as an hf:// branch is
refused. The model is a directory, and its `sha256` the manifest digest of
that directory (`vocabulary.replicas.model_digests`), as for any directory:
the image digest says which blobs to pull (each verified as it streams),
the model's digest what the cache keeps.

Two kinds of manifest hold a model:
- a modelcar image (KServe's layout; its config is an image config): the
  model is the `/models` directory of the image's filesystem, built from its
  tar layers (plain or gzip) in order, with OCI whiteouts (`.wh.NAME`
  removes a lower layer's NAME, `.wh..wh..opq` empties a lower layer's
  directory). Everything outside `/models` is never written;
- an artifact (any other config, ORAS's layout): each layer is one file,
  named by its `org.opencontainers.image.title` annotation.
An image index (or a Docker manifest list) names its linux/amd64 manifest,
or its one manifest; anything else is refused saying which platforms it has.

`layer_member` is the attacker's side of a layer: every tar member's name
is read here, and an absolute path, a `..`, a symbolic link, a hard link to
outside `/models`, a device or a name too long is refused before a byte is
written. Also owns the distribution API as values: URLs (plain http only on
a loopback registry), the media types asked for, the `WWW-Authenticate`
challenge and the token request an anonymous or basic-credential pull makes.
The replica (`replica.fetching.oci`) and the CLI (`gitops models resolve`)
do the I/O. Values only.
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode, urlsplit

__all__ = [
    "ACCEPT",
    "DIGEST",
    "MAX_MANIFEST_BYTES",
    "MAX_MEMBERS",
    "MODEL_DIR",
    "Blob",
    "Challenge",
    "Image",
    "Member",
    "OciReference",
    "blob_url",
    "child_manifest",
    "is_loopback",
    "layer_compression",
    "layer_member",
    "manifest_url",
    "media_type_of",
    "moving_tag",
    "oci_source_problem",
    "parse_challenge",
    "parse_image",
    "parse_oci_reference",
    "registry_base",
    "sizes",
    "split_credentials",
    "title_path",
    "token_from",
    "token_request",
]

OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
INDEXES = (OCI_INDEX, DOCKER_LIST)
MANIFESTS = (OCI_MANIFEST, DOCKER_MANIFEST)
ACCEPT = f"{OCI_INDEX}, {DOCKER_LIST}, {OCI_MANIFEST}, {DOCKER_MANIFEST}"
IMAGE_CONFIGS = ("application/vnd.oci.image.config.v1+json", "application/vnd.docker.container.image.v1+json")
# The tar layers' media types, plain and gzip'd (`layer_compression`).
PLAIN_TARS = frozenset({"application/vnd.oci.image.layer.v1.tar", "application/vnd.docker.image.rootfs.diff.tar"})
GZIP_TARS = frozenset({
    "application/vnd.oci.image.layer.v1.tar+gzip", "application/vnd.docker.image.rootfs.diff.tar.gzip",
})
TAR_LAYERS = PLAIN_TARS | GZIP_TARS
TITLE = "org.opencontainers.image.title"
MODEL_DIR = "models"  # KServe's modelcar: the model under /models
MAX_MANIFEST_BYTES = 4 * 1024 * 1024  # what the distribution spec lets a registry refuse above
MAX_MEMBERS = 200_000  # tar members in one layer (each kept in memory while the layer streams)
_MAX_PATH = 4096
_MAX_NAME = 255

DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
# The distribution spec's repository name and tag grammar; a registry is a host with an optional port.
_REPOSITORY = re.compile(r"[a-z0-9]+(?:(?:\.|_|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:\.|_|__|-+)[a-z0-9]+)*)*")
_TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
_REGISTRY = re.compile(r"(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*"
                       r"|\[[0-9A-Fa-f:]+\])(?::[0-9]{1,5})?")
_MOVING = re.compile(r"the tag '([^']+)' of (oci://[^ :@]+(?::[0-9]+)?/[^ :@]+) is not a digest")


@dataclass(frozen=True)
class OciReference:
    registry: str  # host[:port]
    repository: str
    digest: str | None = None  # sha256:HEX
    tag: str | None = None

    def url(self) -> str:
        pin = f"@{self.digest}" if self.digest else f":{self.tag}" if self.tag else ""
        return f"oci://{self.registry}/{self.repository}{pin}"

    def pinned(self, digest: str) -> OciReference:
        return OciReference(self.registry, self.repository, digest)


@dataclass(frozen=True)
class Blob:
    media_type: str
    digest: str  # sha256:HEX
    size: int
    title: str | None = None  # an artifact layer's file name


@dataclass(frozen=True)
class Image:
    """A manifest that holds a model: a modelcar's tar layers, or an artifact's files."""

    modelcar: bool
    layers: tuple[Blob, ...]


@dataclass(frozen=True)
class Challenge:
    scheme: str  # "bearer" or "basic", lower-case
    params: Mapping[str, str]


@dataclass(frozen=True)
class Member:
    """What one tar member of a modelcar layer does to the model directory."""

    action: str  # skip | dir | file | link (a hard link) | whiteout | opaque
    path: str = ""  # relative to the model directory, '/'-separated ("" for the directory itself)
    target: str = ""  # a hard link's file, relative to the model directory


def parse_oci_reference(source: str) -> OciReference:
    """`oci://REGISTRY/REPO@sha256:HEX` or `oci://REGISTRY/REPO:TAG` as its parts; ValueError says what is wrong."""
    if not source.startswith("oci://"):
        raise ValueError("must start with oci://")
    rest = source[len("oci://") :]
    name, at, digest = rest.partition("@")
    registry, slash, repository = name.partition("/")
    if not slash or _REGISTRY.fullmatch(registry) is None:
        raise ValueError(f"names a registry and a repository as oci://REGISTRY/REPO (got {rest[:80]!r})")
    tag: str | None = None
    last = repository.rpartition("/")[2]
    if ":" in last:
        repository, _, tag = repository.rpartition(":")
        if _TAG.fullmatch(tag) is None:
            raise ValueError(f"has no usable tag ({tag[:60]!r})")
    if _REPOSITORY.fullmatch(repository) is None or len(repository) > 255:
        raise ValueError(
            f"names no repository the registry API takes ({repository[:80]!r}: lower-case letters, digits, "
            "'.', '_', '-' and '/')"
        )
    if at:
        if tag is not None:
            raise ValueError("names a tag and a digest: keep only the digest (@sha256:…)")
        if DIGEST.fullmatch(digest) is None:
            lower = DIGEST.fullmatch(digest.lower()) is not None
            raise ValueError(
                "the digest must be lower-case hex" if lower
                else f"has no usable digest ({digest[:80]!r}): sha256: and 64 lower-case hex digits"
            )
        return OciReference(registry, repository, digest=digest)
    return OciReference(registry, repository, tag=tag)


def oci_source_problem(source: str) -> str | None:
    """Why an oci:// source cannot be pinned in git, or None: it must name its manifest
    by `@sha256:<64 hex>`; a tag (or no reference) is refused, naming the command that pins it."""
    try:
        parsed = parse_oci_reference(source)
    except ValueError as error:
        return str(error)
    if parsed.digest is not None:
        return None
    name = f"oci://{parsed.registry}/{parsed.repository}"
    if parsed.tag is None:
        return f"{name} names no digest: pin one as {name}@sha256:… (`gitops models resolve {name}:TAG` prints it)"
    return (
        f"the tag '{parsed.tag}' of {name} is not a digest (a tag moves): pin one as @sha256:… "
        f"(`gitops models resolve {parsed.url()}` prints it and the sha256)"
    )


def moving_tag(message: str) -> OciReference | None:
    """The reference an `oci_source_problem` message refuses for naming a tag, or None."""
    found = _MOVING.search(message)
    if found is None:
        return None
    try:
        return parse_oci_reference(f"{found.group(2)}:{found.group(1)}")
    except ValueError:
        return None


def is_loopback(host: str) -> bool:
    """localhost, or a loopback address (127.0.0.0/8, ::1); never a name that merely starts with 127."""
    host = host.strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def registry_base(registry: str) -> str:
    """The registry's API root: https, or plain http on a loopback registry (tests, a node's own mirror)."""
    host = urlsplit(f"//{registry}").hostname or ""
    return f"{'http' if is_loopback(host) else 'https'}://{registry}/v2"


def manifest_url(reference: OciReference, pin: str) -> str:
    return f"{registry_base(reference.registry)}/{reference.repository}/manifests/{pin}"


def blob_url(reference: OciReference, digest: str) -> str:
    return f"{registry_base(reference.registry)}/{reference.repository}/blobs/{digest}"


def _document(body: bytes) -> Mapping[str, Any]:
    try:
        document = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        raise ValueError("the registry's manifest is not JSON") from None
    if not isinstance(document, Mapping):
        raise ValueError("the registry's manifest is not a JSON object")
    return document


def media_type_of(body: bytes, content_type: str) -> str:
    """A manifest's media type: its own `mediaType`, else the Content-Type the registry sent."""
    declared = _document(body).get("mediaType")
    return declared if isinstance(declared, str) and declared else content_type.split(";")[0].strip()


def child_manifest(body: bytes, content_type: str) -> str | None:
    """For an index, the digest of the manifest to pull (its linux/amd64 one, or its only one);
    None for a manifest. ValueError when neither, or when no manifest fits."""
    media = media_type_of(body, content_type)
    if media in MANIFESTS:
        return None
    if media not in INDEXES:
        raise ValueError(f"the registry's manifest has media type {media[:100]!r}, not an OCI or Docker v2 image")
    entries = [m for m in _document(body).get("manifests") or () if isinstance(m, Mapping)]
    named = [(entry, _platform(entry)) for entry in entries]
    runnable = [(entry, platform) for entry, platform in named if platform != "unknown/unknown"]  # attestations
    chosen = [entry for entry, platform in runnable if platform == "linux/amd64"]
    if not chosen and len(runnable) == 1:
        chosen = [runnable[0][0]]
    if len(chosen) != 1:
        having = ", ".join(sorted({platform for _, platform in runnable})) or "none"
        why = "several linux/amd64 manifests" if chosen else f"no linux/amd64 manifest (platforms: {having})"
        raise ValueError(f"the image index has {why}: pin a manifest's own digest")
    digest = chosen[0].get("digest")
    if not isinstance(digest, str) or DIGEST.fullmatch(digest) is None:
        raise ValueError("the image index names its manifest by no sha256 digest")
    return digest


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _platform(entry: Mapping[str, Any]) -> str:
    platform = _mapping(entry.get("platform"))
    return f"{platform.get('os', '?')}/{platform.get('architecture', '?')}"


def parse_image(body: bytes, content_type: str) -> Image:
    """A manifest as the blobs that make the model; ValueError when it holds none we can read."""
    media = media_type_of(body, content_type)
    if media not in MANIFESTS:
        raise ValueError(f"the registry's manifest has media type {media[:100]!r}, not an OCI or Docker v2 manifest")
    document = _document(body)
    config = _mapping(document.get("config"))
    modelcar = config.get("mediaType") in IMAGE_CONFIGS
    layers: list[Blob] = []
    for index, layer in enumerate(document.get("layers") or ()):
        if not isinstance(layer, Mapping):
            raise ValueError(f"layer {index} of the manifest is not an object")
        digest, size, media_type = layer.get("digest"), layer.get("size"), layer.get("mediaType")
        if not isinstance(digest, str) or DIGEST.fullmatch(digest) is None:
            raise ValueError(f"layer {index} of the manifest has no sha256 digest")
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise ValueError(f"layer {index} of the manifest has no size")
        media_type = media_type if isinstance(media_type, str) else ""
        annotations = _mapping(layer.get("annotations"))
        title = annotations.get(TITLE)
        if modelcar and media_type not in TAR_LAYERS:
            zstd = media_type.endswith("+zstd")
            raise ValueError(
                f"layer {index} is {media_type[:100]!r}: a modelcar's layers must be tar or tar+gzip"
                + (" (zstd layers are not supported)" if zstd else "")
            )
        if not modelcar:
            if not isinstance(title, str):
                raise ValueError(f"layer {index} of the artifact has no {TITLE} annotation naming its file")
            title_path(title)
        layers.append(Blob(media_type, digest, size, title if isinstance(title, str) and not modelcar else None))
    if not layers:
        raise ValueError("the manifest has no layers")
    if not modelcar and len({layer.title for layer in layers}) != len(layers):
        raise ValueError("two layers of the artifact have the same title")
    return Image(modelcar, tuple(layers))


def layer_compression(media_type: str) -> str:
    """'' or 'gz' for a tar layer's media type (tarfile's stream mode suffix); KeyError for another."""
    if media_type not in TAR_LAYERS:
        raise KeyError(media_type)
    return "gz" if media_type in GZIP_TARS else ""


def _parts(name: str, what: str) -> list[str]:
    if "\0" in name or len(name) > _MAX_PATH:
        raise ValueError(f"{what} has a name no file system takes ({name[:80]!r})")
    if name.startswith("/"):
        raise ValueError(f"{what} has an absolute path ({name[:80]!r})")
    parts = [part for part in name.split("/") if part not in ("", ".")]
    if ".." in parts:
        raise ValueError(f"{what} climbs out with '..' ({name[:80]!r})")
    if any(len(part.encode("utf-8", "surrogateescape")) > _MAX_NAME for part in parts):
        raise ValueError(f"{what} has a name longer than {_MAX_NAME} bytes ({name[:80]!r})")
    return parts


def title_path(title: str) -> str:
    """An artifact layer's file, relative to the model directory; ValueError when it is not plain."""
    parts = _parts(title, "an artifact layer's title")
    if not parts:
        raise ValueError(f"an artifact layer's title names no file ({title[:80]!r})")
    return "/".join(parts)


def layer_member(name: str, kind: str, linkname: str = "") -> Member:
    """What a modelcar layer's tar member `name` of `kind` (file, dir, symlink, hardlink,
    other) does to the model directory (`MODEL_DIR` of the image); ValueError refuses
    a hostile or unusable member, before anything is written."""
    parts = _parts(name, "a layer member")
    if not parts or parts[0] != MODEL_DIR:
        return Member("skip")  # the image's other files (a modelcar's base image): never written
    path = "/".join(parts[1:])
    shown = "/" + "/".join(parts)
    base = parts[-1]
    if base.startswith(".wh.") and path:
        parent = "/".join(parts[1:-1])
        if base == ".wh..wh..opq":
            return Member("opaque", parent)
        hidden = base[len(".wh.") :]
        if not hidden or hidden in (".", ".."):
            raise ValueError(f"a layer's whiteout {shown[:80]!r} names no file")
        return Member("whiteout", f"{parent}/{hidden}" if parent else hidden)
    if kind == "dir":
        return Member("dir", path)
    if not path:
        raise ValueError(f"{shown} is not a directory in the image ({kind})")
    if kind == "file":
        return Member("file", path)
    if kind == "symlink":
        raise ValueError(f"{shown[:80]} is a symbolic link: a model directory holds no links")
    if kind == "hardlink":
        target = _parts(linkname, "a hard link's target")
        if len(target) < 2 or target[0] != MODEL_DIR:
            raise ValueError(f"{shown[:80]} is a hard link to {linkname[:80]!r}, outside /{MODEL_DIR}")
        return Member("link", path, "/".join(target[1:]))
    raise ValueError(f"{shown[:80]} is a {kind}, not a file or a directory")


def parse_challenge(header: str) -> Challenge | None:
    """A `WWW-Authenticate` header's first challenge (Bearer or Basic), or None."""
    scheme, _, rest = header.strip().partition(" ")
    if scheme.lower() not in ("bearer", "basic"):
        return None
    params = {key.lower(): value for key, value in re.findall(r'([A-Za-z_]+)="([^"]*)"', rest)}
    return Challenge(scheme.lower(), params)


def token_request(challenge: Challenge, repository: str) -> str:
    """The token service's URL a Bearer challenge names, asking to pull `repository`;
    ValueError when the realm is no URL to send credentials to (https, or http on loopback)."""
    realm = challenge.params.get("realm", "")
    parts = urlsplit(realm)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"the registry's token realm is no URL ({realm[:80]!r})")
    if parts.scheme == "http" and not is_loopback(parts.hostname):
        raise ValueError("the registry's token realm is plain http on another host: refused")
    query: dict[str, str] = {}
    if challenge.params.get("service"):
        query["service"] = challenge.params["service"]
    query["scope"] = challenge.params.get("scope") or f"repository:{repository}:pull"
    return f"{realm}{'&' if parts.query else '?'}{urlencode(query)}"


def token_from(body: Any) -> str:
    """The token a token service answered (`token`, or OAuth's `access_token`); ValueError when none."""
    if isinstance(body, Mapping):
        for key in ("token", "access_token"):
            if isinstance(body.get(key), str) and body[key]:
                return str(body[key])
    raise ValueError("the registry's token service answered no token")


def split_credentials(text: str) -> tuple[str, str]:
    """A secret's `USER:PASSWORD` (docker login's pair); ValueError when it is not one."""
    user, colon, password = text.strip().partition(":")
    if not colon or not user:
        raise ValueError("an oci:// model's token_secret holds USER:PASSWORD")
    return user, password


def sizes(layers: Sequence[Blob]) -> int:
    return sum(layer.size for layer in layers)
