"""A real OCI registry on 127.0.0.1 for tests: Debian's `docker-registry` (distribution 2.8), and pushes to it.

`oci_registry(folder)` starts `/usr/bin/docker-registry serve` with its
storage in `folder` on a free loopback port (it answers in well under a
second) and yields a `LoopbackRegistry`, whose pushes speak the distribution
API as any client does (a monolithic blob upload: POST then PUT ?digest=,
then the manifest PUT): `push_modelcar` makes a KServe modelcar (an image
config and tar layers whose files sit under /models), `push_artifact` an
ORAS-style artifact (one layer per file, named by its title annotation),
`push_index` an image index over manifests. `blob_gets(digest)` counts the
registry's own log lines of GETs of a blob, so a test sees how many times a
node pulled it. No skip: `make system-deps` installs the package, so a
missing binary is a broken environment and fails the test.

`TokenFront` puts the registries' bearer-token flow in front of it: a
request without `Authorization: Bearer TOKEN` is answered 401 with
`WWW-Authenticate: Bearer realm=…/token`, and the token service hands
TOKEN out only to `USER:PASSWORD` (basic credentials) when it is given
them, else to anyone (an anonymous pull). Every request it saw is kept
(path, query, Authorization header), so a test can check where the
credentials went. With `tag_page_size`, it hands a repository's tag list out
in pages as the distribution spec allows (`?n=&last=`, a `Link: <…>;
rel="next"` header while more follow; registries such as distribution 3,
Harbor or GHCR do, Debian's 2.8 sends one page).
"""

from __future__ import annotations

import base64
import contextlib
import gzip
import hashlib
import http.server
import io
import json
import re
import subprocess
import tarfile
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import httpx

from tests.support.stack import free_port

__all__ = ["DOCKER_REGISTRY", "LoopbackRegistry", "TokenFront", "modelcar_layer", "oci_registry", "token_front"]

DOCKER_REGISTRY = "/usr/bin/docker-registry"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
IMAGE_CONFIG = "application/vnd.oci.image.config.v1+json"
TAR = "application/vnd.oci.image.layer.v1.tar"
TAR_GZIP = "application/vnd.oci.image.layer.v1.tar+gzip"
CONFIG = """\
version: 0.1
log:
  level: info
  accesslog:
    disabled: false
storage:
  filesystem:
    rootdirectory: {root}
  delete:
    enabled: true
http:
  addr: 127.0.0.1:{port}
"""


def _sha256(data: bytes) -> str:
    return f"sha256:{hashlib.sha256(data).hexdigest()}"


def modelcar_layer(files: Mapping[str, bytes], compress: bool = True, base: str = "models",
                   extra: list[tarfile.TarInfo] | None = None) -> bytes:
    """A tar layer holding `files` under `base` (with its directory entries), gzip'd when `compress`;
    `extra` members (hostile ones, a test's) are added as they are, with no data but their size's zeros."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        prefix = f"{base}/" if base else ""
        folders = ({base} if base else set()) | {f"{prefix}{p.rsplit('/', 1)[0]}" for p in files if "/" in p}
        for folder in sorted(folders):
            info = tarfile.TarInfo(folder)
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(info)
        for path, data in sorted(files.items()):
            info = tarfile.TarInfo(f"{prefix}{path}")
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
        for info in extra or ():
            tar.addfile(info, io.BytesIO(b"\0" * info.size) if info.isreg() else None)
    data = out.getvalue()
    return gzip.compress(data, compresslevel=1, mtime=0) if compress else data


@dataclass
class LoopbackRegistry:
    host: str  # 127.0.0.1:PORT
    log: Path
    client: httpx.Client = field(default_factory=lambda: httpx.Client(timeout=60, trust_env=False))

    @property
    def url(self) -> str:
        return f"http://{self.host}"

    def push_blob(self, repository: str, data: bytes) -> str:
        digest = _sha256(data)
        if self.client.head(f"{self.url}/v2/{repository}/blobs/{digest}").status_code == 200:
            return digest
        started = self.client.post(f"{self.url}/v2/{repository}/blobs/uploads/")
        assert started.status_code == 202, started.text
        location = started.headers["location"]
        location = location if location.startswith("http") else f"{self.url}{location}"
        location += f"{'&' if '?' in location else '?'}digest={digest}"
        done = self.client.put(location, content=data,
                               headers={"Content-Type": "application/octet-stream"})
        assert done.status_code == 201, done.text
        return digest

    def push_manifest(self, repository: str, reference: str, manifest: Mapping[str, object]) -> str:
        body = json.dumps(manifest).encode()
        media = str(manifest["mediaType"])
        answer = self.client.put(f"{self.url}/v2/{repository}/manifests/{reference}", content=body,
                                 headers={"Content-Type": media})
        assert answer.status_code == 201, answer.text
        return _sha256(body)

    def push_image(self, repository: str, tag: str, layers: list[tuple[str, bytes]],
                   annotations: list[dict[str, str]] | None = None, config_type: str = IMAGE_CONFIG,
                   config: bytes | None = None) -> str:
        """A manifest over `layers` (media type, bytes) under `tag`; its digest."""
        config = config if config is not None else json.dumps(
            {"architecture": "amd64", "os": "linux", "rootfs": {"type": "layers", "diff_ids": []}}
        ).encode()
        described = []
        for index, (media, data) in enumerate(layers):
            entry: dict[str, object] = {"mediaType": media, "digest": self.push_blob(repository, data),
                                        "size": len(data)}
            if annotations and annotations[index]:
                entry["annotations"] = annotations[index]
            described.append(entry)
        manifest = {
            "schemaVersion": 2, "mediaType": OCI_MANIFEST,
            "config": {"mediaType": config_type, "digest": self.push_blob(repository, config), "size": len(config)},
            "layers": described,
        }
        return self.push_manifest(repository, tag, manifest)

    def push_modelcar(self, repository: str, tag: str, files: Mapping[str, bytes], compress: bool = True) -> str:
        """A KServe modelcar: a base layer outside /models, then `files` under /models; its manifest digest."""
        base = modelcar_layer({"bin/sh": b"#!/bin/true\n", "etc/os-release": b"ID=test\n"}, compress, base="")
        return self.push_image(repository, tag, [
            (TAR_GZIP if compress else TAR, base), (TAR_GZIP if compress else TAR, modelcar_layer(files, compress)),
        ])

    def push_artifact(self, repository: str, tag: str, files: Mapping[str, bytes]) -> str:
        """An ORAS-style artifact: one layer per file, its name in the title annotation."""
        names = sorted(files)
        return self.push_image(
            repository, tag, [("application/octet-stream", files[name]) for name in names],
            annotations=[{"org.opencontainers.image.title": name} for name in names],
            config_type="application/vnd.acme.model.config.v1+json", config=b"{}",
        )

    def push_index(self, repository: str, tag: str, manifests: list[tuple[str, str, str]]) -> str:
        """An image index over (digest, os, architecture) manifests pushed before; its digest."""
        entries = []
        for digest, os_name, architecture in manifests:
            size = len(self.client.get(f"{self.url}/v2/{repository}/manifests/{digest}",
                                       headers={"Accept": OCI_MANIFEST}).content)
            entries.append({"mediaType": OCI_MANIFEST, "digest": digest, "size": size,
                            "platform": {"os": os_name, "architecture": architecture}})
        return self.push_manifest(repository, tag, {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": entries})

    def blob_gets(self, digest: str) -> int:
        """GETs of a blob the registry answered, from its access log."""
        needle = f"/blobs/{digest}"
        return sum(1 for line in self.log.read_text(errors="replace").splitlines()
                   if '"GET ' in line and needle in line)


@contextlib.contextmanager
def oci_registry(folder: Path) -> Iterator[LoopbackRegistry]:
    """docker-registry serving from `folder` on a free loopback port, stopped when the block ends."""
    folder.mkdir(parents=True, exist_ok=True)
    port = free_port()
    config = folder / "config.yml"
    config.write_text(CONFIG.format(root=folder / "storage", port=port))
    log = folder / "registry.log"
    with log.open("wb") as out:
        process = subprocess.Popen([DOCKER_REGISTRY, "serve", str(config)], stdout=out, stderr=subprocess.STDOUT)
    registry = LoopbackRegistry(f"127.0.0.1:{port}", log)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                if registry.client.get(f"{registry.url}/v2/").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"docker-registry did not start: {log.read_text(errors='replace')[-2000:]}")
            time.sleep(0.05)
        yield registry
    finally:
        registry.client.close()
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@dataclass
class TokenFront:
    """The bearer-token flow in front of a registry (see the module's docstring)."""

    upstream: str  # http://127.0.0.1:PORT of the registry
    token: str
    credentials: str | None  # USER:PASSWORD the token service asks for, or None: anonymous
    tag_page_size: int | None = None  # tags/list in pages of at most this many (None: as the registry answers)
    port: int = 0
    seen: list[tuple[str, str, str]] = field(default_factory=list)  # (path, query, authorization)

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"


@contextlib.contextmanager
def token_front(upstream: str, token: str, credentials: str | None = None,
                tag_page_size: int | None = None) -> Iterator[TokenFront]:
    front = TokenFront(upstream, token, credentials, tag_page_size)
    proxy = httpx.Client(timeout=60, trust_env=False)

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *_args: object) -> None:
            pass

        def _answer(self, status: int, body: bytes, headers: Mapping[str, str]) -> None:
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:  # noqa: N802 — http.server's name
            parts = urlsplit(self.path)
            authorization = self.headers.get("Authorization", "")
            front.seen.append((parts.path, parts.query, authorization))
            if parts.path == "/token":
                wanted = f"Basic {base64.b64encode(front.credentials.encode()).decode()}" if front.credentials else None
                scope = parse_qs(parts.query).get("scope", [""])[0]
                if (wanted is not None and authorization != wanted) or not scope.endswith(":pull"):
                    self._answer(401, b'{"errors": [{"code": "UNAUTHORIZED"}]}', {"Content-Type": "application/json"})
                    return
                self._answer(200, json.dumps({"token": front.token}).encode(), {"Content-Type": "application/json"})
                return
            if authorization != f"Bearer {front.token}":
                repository = re.sub(r"^/v2/(.*)/(manifests/[^/]*|blobs/[^/]*|tags/list)$", r"\1", parts.path)
                challenge = (f'Bearer realm="http://{front.host}/token",service="loopback-registry",'
                             f'scope="repository:{repository}:pull"')
                self._answer(401, b'{"errors": [{"code": "UNAUTHORIZED"}]}',
                             {"Content-Type": "application/json", "WWW-Authenticate": challenge})
                return
            if front.tag_page_size is not None and parts.path.endswith("/tags/list"):
                self._tag_page(parts.path, parse_qs(parts.query))
                return
            answer = proxy.get(f"{front.upstream}{self.path}", headers={"Accept": self.headers.get("Accept", "*/*")})
            headers = {name: answer.headers[name] for name in ("content-type", "docker-content-digest", "link")
                       if name in answer.headers}
            self._answer(answer.status_code, answer.content, headers)

        def _tag_page(self, path: str, query: dict[str, list[str]]) -> None:
            answer = proxy.get(f"{front.upstream}{path}")
            if answer.status_code != 200:
                self._answer(answer.status_code, answer.content, {"Content-Type": "application/json"})
                return
            document = answer.json()
            tags = sorted(document.get("tags") or [])
            last = query.get("last", [""])[0]
            size = min(int(query.get("n", ["1000"])[0]), front.tag_page_size or 1000)
            page = [tag for tag in tags if tag > last][:size]
            headers = {"Content-Type": "application/json"}
            if page and page[-1] != tags[-1]:
                headers["Link"] = f'<{path}?n={size}&last={page[-1]}>; rel="next"'
            self._answer(200, json.dumps({"name": document["name"], "tags": page}).encode(), headers)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    front.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield front
    finally:
        server.shutdown()
        server.server_close()
        proxy.close()
