"""`gitops models digest PATH|URL`: the sha256 to commit in a `[models.NAME]` table.

A file's digest is its sha256; a directory's is the sha256 of its manifest
(`vocabulary.replicas.model_digests`), the rule every node's cache checks, so a user
never computes a manifest by hand. PATH is a local file or directory;
file:///… is the same; s3://bucket/key, s3://bucket/prefix/ and https://
(http:// on loopback) are read as a stream with obstore, as a node fetches
them, with the same AWS_* variables. Nothing is written.
"""

from __future__ import annotations

import argparse
import hashlib
import os
from pathlib import Path
from urllib.parse import unquote, urlsplit

from gitops.errors import UserError
from gitops.printable import printable
from vocabulary.replicas.model_digests import (
    ManifestEntry,
    is_directory,
    manifest_digest,
    source_problem,
)

__all__ = ["file_sha256", "local_digest", "models_command", "remote_digest"]

_CHUNK = 1024 * 1024


def models_command(args: argparse.Namespace) -> int:
    target: str = args.target
    parts = urlsplit(target)
    if parts.scheme == "file":
        path = Path(unquote(parts.path))
    elif parts.scheme in ("s3", "http", "https"):
        problem = source_problem(target)
        if problem is not None:
            raise UserError(f"{printable(target)}: {problem}")
        print(remote_digest(target))
        return 0
    else:
        path = Path(target)
    print(local_digest(path))
    return 0


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
            endpoint = os.environ.get("AWS_ENDPOINT_URL", "")
            store: S3Store | HTTPStore = S3Store(
                parts.netloc, client_options={"allow_http": endpoint.startswith("http://")}
            )
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
        text = " ".join(str(error).split("Debug source:")[0].split())[:300]
        raise UserError(f"{printable(source)}: cannot read it ({text})") from None
