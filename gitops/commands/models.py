"""`gitops models digest PATH`: the sha256 to commit in a `[models.NAME]` table.

A file's digest is its sha256; a directory's is the sha256 of its manifest
(`vocabulary.model_digests`), the rule every node's cache checks, so a user
never computes a manifest by hand. PATH is a local file or directory;
file:///… is the same. Nothing is written.
"""

from __future__ import annotations

import argparse
import hashlib
import os
from pathlib import Path
from urllib.parse import unquote, urlsplit

from gitops.errors import UserError
from gitops.printable import printable
from vocabulary.model_digests import ManifestEntry, manifest_digest

__all__ = ["file_sha256", "local_digest", "models_command"]

_CHUNK = 1024 * 1024


def models_command(args: argparse.Namespace) -> int:
    target: str = args.target
    parts = urlsplit(target)
    if parts.scheme == "file":
        path = Path(unquote(parts.path))
    elif parts.scheme in ("s3", "http", "https"):
        raise UserError(
            f"gitops models digest {printable(target)}: fetch it first and give the local copy "
            "(a digest of a remote source is computed from its bytes, which this command does not download)"
        )
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
