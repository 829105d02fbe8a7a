"""Fetching an `hf://ORG/NAME@COMMIT` model from a Hugging Face Hub, over its HTTP API with httpx.

Owns the replica's end of Hub sources (docs/guides/models.md): one call to
the revision's metadata (`GET /api/models/ORG/NAME/revision/COMMIT`), the
selection of its files by the model's `include`/`exclude` globs
(`vocabulary.replicas.hub_sources`), then each file from
`/ORG/NAME/resolve/COMMIT/PATH`, following the Hub's redirects to its
storage (httpx drops the token on a redirect to another host). The Hub is
`HF_ENDPOINT` when set, else huggingface.co.

Resumable: a file already under `dest` is continued from its size with a
range request (the cache keeps an hf:// download's directory when a fetch
fails or its replica dies, `replica.models`), and a connection that breaks
mid-file is retried from where it stopped, a few times with back-off. A
commit's files never change, so bytes from an earlier attempt are the
bytes this one would fetch, and the cache verifies the whole selection
against the pinned manifest digest anyway. Each file is hashed as it is
written (in a thread beside the download) and its sha256 recorded in the
fetch's `FetchProgress.file_digests`, so the cache does not read it back.

The token (`HubOptions.token`: the model's `token_secret`, else the node's
`HF_TOKEN`, else its token file) goes only into the Authorization header:
never into a URL, an error or a log line. Never verifies anything: the
cache does. An I/O shell.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

import httpx

from replica.fetching.hashing import StreamHash, prefix_sha256
from replica.fetching.sources import FetchError, FetchProgress, Progress
from vocabulary.replicas.hub_sources import (
    HubFile,
    endpoint_in,
    file_url,
    parse_hub_source,
    parse_revision,
    revision_url,
    selected,
    token_in,
    token_path,
)

__all__ = ["HubOptions", "fetch_hub", "hub_endpoint", "node_token"]

_ATTEMPTS = 5  # per file, each continuing where the last stopped
_BACKOFF_S = 0.2


@dataclass(frozen=True)
class HubOptions:
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    token: str | None = field(default=None, repr=False)


def hub_endpoint() -> str:
    """`HF_ENDPOINT`, else the public Hub; a FetchError when it is no Hub to fetch from."""
    try:
        return endpoint_in(os.environ)
    except ValueError as error:
        raise FetchError(str(error)) from None


def node_token() -> str | None:
    """The node's Hub token, as the Hub's own client finds it: `HF_TOKEN`, else
    the file `HF_TOKEN_PATH`, else `HF_HOME/token` (`~/.cache/huggingface/token`)."""
    token = token_in(os.environ)
    if token:
        return token
    try:
        return Path(token_path(os.environ, os.path.expanduser("~"))).read_text().strip() or None
    except (OSError, UnicodeDecodeError):
        return None


def _status_error(status: int, what: str) -> FetchError:
    if status in (401, 403):
        return FetchError(
            f"access denied ({status}) by the Hub: give the model a token_secret, or the node HF_TOKEN or a token file"
        )
    if status == 404:
        return FetchError(f"not found (404): no such {what}")
    return FetchError(f"the Hub answered {status} for {what}")


def fetch_hub(source: str, dest: Path, deadline: float, progress: Progress, options: HubOptions) -> None:
    """The selected files of `source`'s commit under `dest`, continuing any already there."""
    try:
        hub = parse_hub_source(source)
    except ValueError as error:
        raise FetchError(str(error)) from None
    endpoint = hub_endpoint()
    headers = {"Authorization": f"Bearer {options.token}"} if options.token else {}
    remaining = max(deadline - time.monotonic(), 0.001)
    timeout = httpx.Timeout(remaining, connect=min(remaining, 10.0))
    try:
        with httpx.Client(headers=headers, timeout=timeout, follow_redirects=True, trust_env=False) as client:
            answer = client.get(revision_url(endpoint, hub))
            if answer.status_code != 200:
                raise _status_error(answer.status_code, f"repository or revision {hub.url()}")
            try:
                revision = parse_revision(answer.json())
            except ValueError as error:
                raise FetchError(str(error)) from None
            if revision.commit != hub.revision:
                raise FetchError(f"the Hub resolved {hub.revision} to {revision.commit}: not the pinned commit")
            files = selected(revision.files, options.include, options.exclude)
            if not files:
                raise FetchError("not found (include/exclude select no file of the revision)")
            if isinstance(progress, FetchProgress):
                progress.expect(sum(file.size for file in files))
            for file in files:
                _fetch_file(client, file_url(endpoint, hub.repo, revision.commit, file.path),
                            file, _inside(dest, file.path), deadline, progress)
    except httpx.TimeoutException:
        raise FetchError("timed out") from None
    except httpx.HTTPError as error:
        raise FetchError(f"cannot reach the Hub ({type(error).__name__}: {_plain(error)})") from None


def _plain(error: Exception) -> str:
    return " ".join(str(error).split())[:200]


def _inside(dest: Path, path: str) -> Path:
    """Where a repository file goes under `dest`: never outside it, whatever the Hub says."""
    parts = PurePosixPath(path).parts
    if not parts or path.startswith("/") or "\\" in path or any(part in ("..", ".") for part in parts):
        raise FetchError(f"the Hub lists a file whose path is not plain ({path[:100]!r})")
    return dest.joinpath(*parts)


def _fetch_file(
    client: httpx.Client, url: str, file: HubFile, target: Path, deadline: float, progress: Progress
) -> None:
    """One file, continued from what is on disk; `progress` always counts the bytes on disk."""
    target.parent.mkdir(parents=True, exist_ok=True)
    have = target.stat().st_size if target.exists() else 0
    progress(have)  # left by an earlier fetch
    for attempt in range(_ATTEMPTS):
        have = target.stat().st_size if target.exists() else 0
        if have > file.size:
            target.unlink()
            progress(-have)
            have = 0
        if have == file.size:
            return
        try:
            _continue(client, url, file, target, have, deadline, progress)
        except httpx.TransportError:
            if attempt == _ATTEMPTS - 1 or time.monotonic() > deadline:
                raise FetchError(
                    f"{file.path}: the connection broke after {attempt + 1} tries; the next start continues it"
                ) from None
            time.sleep(_BACKOFF_S * 2**attempt)
    if (target.stat().st_size if target.exists() else 0) != file.size:
        raise FetchError(f"{file.path}: the Hub sent {target.stat().st_size} bytes of {file.size}")


def _continue(
    client: httpx.Client, url: str, file: HubFile, target: Path, have: int, deadline: float, progress: Progress
) -> None:
    headers = {"Range": f"bytes={have}-"} if have else {}
    with client.stream("GET", url, headers=headers) as response:
        if response.status_code == 206 and have:
            mode = "ab"
        elif response.status_code == 200:
            mode = "wb"  # no range support: from the start
            progress(-have)
        else:
            raise _status_error(response.status_code, f"file {file.path}")
        # Hashed as it is written (the part an earlier try left, read once first), so the cache
        # need not read the file back (`replica.fetching.hashing`).
        hashing = StreamHash(prefix_sha256(target, have) if mode == "ab" else None)
        try:
            with target.open(mode) as out:
                for chunk in response.iter_bytes():  # as received: re-chunked to 1 MiB it was 2x slower (bench.models)
                    if time.monotonic() > deadline:
                        raise FetchError("timed out (load_timeout_s)")
                    out.write(chunk)
                    hashing.feed(chunk)
                    progress(len(chunk))
        finally:
            sha256 = hashing.finish()
    if isinstance(progress, FetchProgress) and target.stat().st_size == file.size:
        progress.file_digests.record(target, sha256)
