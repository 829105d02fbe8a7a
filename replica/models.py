"""A node's model cache: content-addressed by digest, shared by every replica on the node.

Owns staging a model (docs/guides/models.md) before a replica's user code runs:
`ModelCache.stage` returns a local, read-only path whose bytes match the
digest git pins, fetching them (`replica.fetching.sources`) only when the
cache does not hold them. Layout under the cache directory:

- `entries/DIGEST/` — a staged model: the file (named as in its source) or
  the directory's files; read-only. It appears by a rename only once fully
  fetched and verified, so a partial download is never visible.
- `tmp/` — downloads in progress (removed when they fail, and swept when
  the process that started one is gone). An hf:// download is
  `tmp/DIGEST.partial/` instead, kept when it breaks off (a network error,
  a timeout, its replica killed) so the next fetch of that digest continues
  it (`replica.fetching.hub`); removed when its bytes do not verify, and
  swept a day after it was last written.
- `locks/DIGEST` — held exclusively while one process checks or fetches
  that digest: however many replicas (of however many backends) start at
  once on a node, one downloads and the others wait and reuse it.
- `failed/DIGEST` — downloads whose bytes did not match the digest (or
  would not fit the cap): how many, and when the last ended. Another
  download of it waits for a back-off that doubles each time (30 s up to an
  hour), so a wrong pin costs a bounded number of downloads, not one per
  replica restart.
- `use/DIGEST` — each replica using the model holds a shared lock on it
  for its lifetime (the kernel drops it when the process dies), and its
  modification time is when a replica last staged it: least recently used
  entries no replica holds are evicted first when `max_bytes` is exceeded.

The cache directory and its folders are 0700 and this user's: one another
local user made first (or a link) is refused with an error naming it, never
used (`datalink.private_dirs.own_dir`). Every stage verifies the entry's
bytes against the digest (a cache hit fetches 0 bytes but reads them once;
a cold fetch is read back only where its fetcher did not hash the bytes as
it wrote them, `replica.fetching.hashing`), and that nothing in it is a
link or another user's; a corrupt or tampered entry is removed and fetched
again. With a cap, a download stops once past it: a model larger than the
cap is refused, not written whole. A failure is a `ModelError` with one
line naming the model, its source and, for a wrong digest, both digests.
An I/O shell.
"""

from __future__ import annotations

import asyncio
import errno
import json
import stat
import fcntl
import logging
import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING
from urllib.parse import unquote, urlsplit

from datalink.private_dirs import own_dir, process_alive
from replica.fetching.hashing import FileDigests, file_sha256
from replica.fetching.sources import FetchError, FetchProgress, TooLarge, fetch
from vocabulary.spec.backends import ModelConfig
from vocabulary.replicas.model_digests import ManifestEntry, is_directory, manifest_digest
from vocabulary.replicas.model_stats import CACHE_DIR_NAME, STATS_FILE, ModelCacheStats

if TYPE_CHECKING:
    from replica.fetching.hub import HubOptions

__all__ = [
    "DEFAULT_CACHE_DIR", "ModelCache", "ModelError", "Staged", "backoff_s", "digest_of", "eviction_order", "hub_options",
    "stage_models",
]

_LOG = logging.getLogger(__name__)
_LOCK_POLL_S = 0.05
# Where a replica caches models when the agent names no --model-cache-dir (a node-local path).
DEFAULT_CACHE_DIR = os.path.join(tempfile.gettempdir(), CACHE_DIR_NAME)

# A digest whose download failed verification waits BACKOFF_S * 2**(failures - 1), at most BACKOFF_MAX_S.
BACKOFF_S = 30.0
BACKOFF_MAX_S = 3600.0
_FOLDERS = ("entries", "tmp", "locks", "use", "failed")

Fetcher = Callable[..., None]  # (source, dest, deadline, progress[, hub=HubOptions]): `replica.fetching.sources.fetch`
PARTIAL_SUFFIX = ".partial"
PARTIAL_KEPT_S = 24 * 3600.0  # an hf:// download left this long unwritten is swept


class ModelError(Exception):
    """A model that could not be staged: one line, naming the model and its source."""


@dataclass(frozen=True)
class Staged:
    name: str
    digest: str
    path: Path  # the file, or the directory, user code reads
    fetched_bytes: int  # 0 on a cache hit
    seconds: float


def digest_of(path: Path, directory: bool, hashed: FileDigests | None = None) -> str:
    """A staged model's digest: the one file's sha256, or the directory's manifest digest.
    `hashed`: the files a fetch hashed as it wrote them; any other file is read and hashed."""
    def sha256(file: Path) -> str:
        return (hashed.sha256(file) if hashed is not None else None) or file_sha256(file)

    if not directory:
        return sha256(path)
    entries: list[ManifestEntry] = []
    for file in sorted(p for p in path.rglob("*") if not p.is_dir()):
        if file.is_symlink():
            raise ValueError(f"{file} is a symbolic link")
        entries.append((file.relative_to(path).as_posix(), file.stat().st_size, sha256(file)))
    return manifest_digest(entries)


def eviction_order(entries: dict[str, tuple[int, float]], in_use: set[str], need: int, max_bytes: int) -> list[str]:
    """Which entries (digest -> (bytes, last used)) to evict, least recently used
    first, so that `need` more bytes fit in `max_bytes`; entries in use stay."""
    total = sum(size for size, _ in entries.values())
    chosen: list[str] = []
    for digest, (size, _) in sorted(entries.items(), key=lambda item: item[1][1]):
        if total + need <= max_bytes:
            break
        if digest in in_use:
            continue
        chosen.append(digest)
        total -= size
    return chosen


def _source_name(source: str) -> str:
    return unquote(urlsplit(source).path.rstrip("/").rpartition("/")[2]) or "model"


class ModelCache:
    """One node's cache directory, as one replica process sees it."""

    def __init__(
        self, root: Path, max_bytes: int | None = None, fetcher: Fetcher = fetch,
        fetching: dict[str, FetchProgress] | None = None,
    ) -> None:
        self.root = root
        self.max_bytes = max_bytes
        self._fetch = fetcher
        # The models this process is fetching now, by name: how far each is (read by another thread).
        self.fetching: dict[str, FetchProgress] = {} if fetching is None else fetching
        self._held: dict[str, IO[bytes]] = {}  # digest -> its use file, locked shared while this process lives
        for path in (root, *(root / folder for folder in _FOLDERS)):
            try:
                os.close(own_dir(str(path)))
            except PermissionError as error:
                raise ModelError(f"model cache: {error} (gitops run --model-cache-dir names another)") from None
        self._sweep()

    def _sweep(self) -> None:
        """Remove downloads left by processes that are gone (a replica killed mid-fetch)."""
        for temp in (self.root / "tmp").iterdir():
            parts = temp.name.split(".")
            if len(parts) == 3 and parts[1].isdigit() and not process_alive(int(parts[1])):
                _LOG.info("model cache: removing %s, a download its process left behind", temp.name)
                _remove(temp)
            elif temp.name.endswith(PARTIAL_SUFFIX) and time.time() - _last_written(temp) > PARTIAL_KEPT_S:
                with _try_exclusive(self.root / "locks" / temp.name.removesuffix(PARTIAL_SUFFIX)) as free:
                    if free:
                        _LOG.info("model cache: removing %s, a download not continued for a day", temp.name)
                        _remove(temp)

    def stage(self, name: str, source: str, digest: str, deadline: float, hub: HubOptions | None = None) -> Staged:
        """The model's verified local path, fetched if need be, by `deadline` (monotonic);
        counted in the node's stats (`vocabulary.replicas.model_stats`). `hub`: an hf://
        source's selection and token."""
        staged = self._stage(name, source, digest, deadline, hub)
        self._count(staged)
        return staged

    def _count(self, staged: Staged) -> None:
        with self._exclusive(self.root / "locks" / STATS_FILE, time.monotonic() + 10, staged.name, "stats"):
            path = self.root / STATS_FILE
            stats = ModelCacheStats.from_json(path.read_text() if path.exists() else "")
            stats.staged(staged.name, staged.fetched_bytes, staged.seconds, self.cached_bytes())
            temp = path.with_suffix(f".{os.getpid()}.tmp")
            temp.write_text(stats.to_json())
            os.replace(temp, path)

    def _stage(self, name: str, source: str, digest: str, deadline: float, hub: HubOptions | None) -> Staged:
        started = time.monotonic()
        directory = is_directory(source)
        self._hold(digest, deadline, name, source)
        with self._exclusive(self.root / "locks" / digest, deadline, name, source):
            entry = self.root / "entries" / digest
            path = entry if directory else entry / _source_name(source)
            if entry.exists():
                if not directory:  # the same bytes, staged earlier from a source with another file name
                    held = [file for file in entry.iterdir()]
                    path = held[0] if len(held) == 1 else path
                if self._verified(path, directory, digest):
                    return Staged(name, digest, path, 0, time.monotonic() - started)
                _LOG.warning("model %s: the cached copy of %s… is corrupt; fetching it again", name, digest[:12])
                _remove(entry)
                path = entry if directory else entry / _source_name(source)
            self._check_backoff(name, source, digest)
            fetched = self._fetch_verified(name, source, digest, directory, deadline, hub)
            return Staged(name, digest, path, fetched, time.monotonic() - started)

    def release(self) -> None:
        """Let go of every model this process held (the replica stops)."""
        for stream in self._held.values():
            stream.close()
        self._held.clear()

    def cached_bytes(self) -> int:
        return sum(size for size, _ in self._entries().values())

    # --- inside the digest's lock -------------------------------------------------

    def _fetch_verified(
        self, name: str, source: str, digest: str, directory: bool, deadline: float, hub: HubOptions | None
    ) -> int:
        resumable = source.startswith("hf://")
        temp = self.root / "tmp" / (
            f"{digest}{PARTIAL_SUFFIX}" if resumable else f"{digest}.{os.getpid()}.{uuid.uuid4().hex[:8]}"
        )
        target = temp if directory else temp / _source_name(source)
        progress = FetchProgress(limit=self.max_bytes)
        self.fetching[name] = progress
        keep = False  # an hf:// download that broke off: the next fetch continues it
        try:
            try:
                self._fetch(source, target, deadline, progress, *(() if hub is None else (hub,)))
            except TooLarge as error:
                self._failed(digest, str(error))
                raise ModelError(f"model {name} ({source}): {error}") from None
            except FetchError as error:
                keep = resumable
                raise ModelError(f"model {name} ({source}): {error}") from None
            if time.monotonic() > deadline:
                raise ModelError(f"model {name} ({source}): timed out (load_timeout_s)")
            got = digest_of(target, directory, progress.file_digests)
            if got != digest:
                why = f"its bytes have sha256 {got}, but git pins {digest}"
                self._failed(digest, why)
                raise ModelError(f"model {name} ({source}): {why}")
            (self.root / "failed" / digest).unlink(missing_ok=True)
            _read_only(temp)
            self._evict_for(progress.done, keep=digest)
            os.rename(temp, self.root / "entries" / digest)
        finally:
            self.fetching.pop(name, None)
            if temp.exists() and not keep:
                _remove(temp)
        return progress.done

    def _verified(self, path: Path, directory: bool, digest: str) -> bool:
        try:
            return _owned(path.parent if not directory else path) and digest_of(path, directory) == digest
        except (OSError, ValueError):
            return False

    # --- failed downloads -----------------------------------------------------------

    def _failures(self, digest: str) -> tuple[int, float, str]:
        try:
            record = json.loads((self.root / "failed" / digest).read_text())
            return int(record["count"]), float(record["at"]), str(record.get("why", ""))
        except (OSError, ValueError, KeyError, TypeError):
            return 0, 0.0, ""

    def _failed(self, digest: str, why: str) -> None:
        count, _, _ = self._failures(digest)
        path = self.root / "failed" / digest
        temp = path.with_suffix(f".{os.getpid()}.tmp")
        temp.write_text(json.dumps({"count": count + 1, "at": time.time(), "why": why[:500]}))
        os.replace(temp, path)

    def _check_backoff(self, name: str, source: str, digest: str) -> None:
        count, at, why = self._failures(digest)
        if not count:
            return
        wait = backoff_s(count) - (time.time() - at)
        if wait > 0:
            raise ModelError(
                f"model {name} ({source}): {why or 'its download did not verify'} ({count} download(s) so far; "
                f"not downloaded again for {wait:.0f}s, a back-off: fix the pin or the source)"
            )

    # --- eviction -------------------------------------------------------------------

    def _entries(self) -> dict[str, tuple[int, float]]:
        found: dict[str, tuple[int, float]] = {}
        for entry in (self.root / "entries").iterdir():
            size = sum(p.stat().st_size for p in entry.rglob("*") if p.is_file())
            use = self.root / "use" / entry.name
            found[entry.name] = (size, use.stat().st_mtime if use.exists() else 0.0)
        return found

    def _evict_for(self, need: int, keep: str) -> None:
        if self.max_bytes is None:
            return
        entries = self._entries()
        in_use = {keep} | {digest for digest in entries if self._in_use(digest)}
        for digest in eviction_order(entries, in_use, need, self.max_bytes):
            with _try_exclusive(self.root / "use" / digest) as free:
                if free:  # no replica took it meanwhile
                    size = entries[digest][0]
                    _LOG.info("model cache: evicting %s… (%d bytes, least recently used)", digest[:12], size)
                    _remove(self.root / "entries" / digest)

    def _in_use(self, digest: str) -> bool:
        if digest in self._held:
            return True
        with _try_exclusive(self.root / "use" / digest) as free:
            return not free

    # --- locks ----------------------------------------------------------------------

    def _hold(self, digest: str, deadline: float, name: str, source: str) -> None:
        """A shared lock on `use/DIGEST` for this process's life: no eviction takes it."""
        if digest in self._held:
            os.utime(self.root / "use" / digest)
            return
        stream = (self.root / "use" / digest).open("ab")
        _wait_for(stream, fcntl.LOCK_SH, deadline, f"model {name} ({source}): timed out waiting for the cache")
        os.utime(self.root / "use" / digest)
        self._held[digest] = stream

    def _exclusive(self, path: Path, deadline: float, name: str, source: str) -> _Locked:
        stream = path.open("ab")
        try:
            waiting = f"model {name} ({source}): timed out (load_timeout_s) waiting for another replica's download"
            _wait_for(stream, fcntl.LOCK_EX, deadline, waiting)
        except BaseException:
            stream.close()
            raise
        return _Locked(stream)


class _Locked:
    def __init__(self, stream: IO[bytes]) -> None:
        self._stream = stream

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        self._stream.close()  # closing drops the lock


class _try_exclusive:
    """`with _try_exclusive(path) as free`: True when no one holds `path` (then held until exit)."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._stream: IO[bytes] | None = None

    def __enter__(self) -> bool:
        self._stream = self._path.open("ab")
        try:
            fcntl.flock(self._stream, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as error:
            if error.errno not in (errno.EAGAIN, errno.EACCES):
                raise
            return False
        return True

    def __exit__(self, *exc: object) -> None:
        if self._stream is not None:
            self._stream.close()


def _wait_for(stream: IO[bytes], mode: int, deadline: float, message: str) -> None:
    while True:
        try:
            fcntl.flock(stream, mode | fcntl.LOCK_NB)
            return
        except OSError as error:
            if error.errno not in (errno.EAGAIN, errno.EACCES):
                raise
        if time.monotonic() > deadline:
            raise ModelError(message)
        time.sleep(_LOCK_POLL_S)


def backoff_s(failures: int) -> float:
    """How long after its `failures`-th failed download a digest waits before another."""
    return min(BACKOFF_S * 2 ** max(failures - 1, 0), BACKOFF_MAX_S)


def _owned(entry: Path) -> bool:
    """Everything under `entry` (and it) this user's, no link, nothing others may write."""
    uid = os.getuid()
    for folder, dirs, files in os.walk(entry):
        for path in (folder, *(os.path.join(folder, name) for name in (*dirs, *files))):
            info = os.lstat(path)
            if stat.S_ISLNK(info.st_mode) or info.st_uid != uid or info.st_mode & 0o022:
                return False
    return True


def _read_only(path: Path) -> None:
    for folder, _dirs, files in os.walk(path):
        for file in files:
            os.chmod(os.path.join(folder, file), 0o444)
    for folder, _dirs, _files in sorted(os.walk(path), key=lambda walked: -len(walked[0])):
        os.chmod(folder, 0o555)


def _last_written(path: Path) -> float:
    try:
        return max([path.stat().st_mtime, *(p.stat().st_mtime for p in path.rglob("*"))])
    except OSError:
        return time.time()


def _remove(path: Path) -> None:
    """Remove an entry or a partial download, read-only or not."""
    if not path.exists():
        return
    for folder, _dirs, _files in os.walk(path):
        os.chmod(folder, 0o755)
    shutil.rmtree(path, ignore_errors=True)


def hub_options(model: ModelConfig, secret: Callable[[str], bytes] | None) -> HubOptions | None:
    """An hf:// model's selection and token: its `token_secret`'s value (delivered
    with the backend's secrets), else the node's (`replica.fetching.hub.node_token`);
    an oci:// model's registry credentials (USER:PASSWORD) as the token: its
    `token_secret`'s value, else none (an anonymous pull)."""
    if not model.source.startswith(("hf://", "oci://")):
        return None
    from replica.fetching.hub import HubOptions, node_token  # httpx: only where a model comes from a Hub or a registry

    if model.token_secret is not None and secret is not None:
        try:
            token: str | None = secret(model.token_secret).decode().strip()
        except (LookupError, UnicodeDecodeError):
            raise ModelError(
                f"model {model.name} ({model.source}): its token_secret '{model.token_secret}' was not "
                "delivered to this replica, or is not text"
            ) from None
    else:
        token = node_token() if model.source.startswith("hf://") else None
    return HubOptions(model.include, model.exclude, token)


async def stage_models(
    models: Mapping[str, ModelConfig], cache_dir: str | None, max_bytes: int | None,
    fetching: dict[str, FetchProgress] | None = None, secret: Callable[[str], bytes] | None = None,
) -> tuple[ModelCache, list[Staged]]:
    """Every model of a backend (its `model_sources`, by name) staged in the
    node's cache, each within its own `load_timeout_s`; the cache keeps them
    held (not evictable) until `ModelCache.release`. `fetching` is filled with
    the models being fetched meanwhile, and how far each is; `secret` reads
    the backend's delivered secrets (an hf:// model's `token_secret`)."""
    cache = ModelCache(Path(cache_dir or DEFAULT_CACHE_DIR), max_bytes, fetching=fetching)
    staged: list[Staged] = []
    try:
        for name, model in sorted(models.items()):
            deadline = time.monotonic() + model.load_timeout_s
            hub = hub_options(model, secret)
            done = await asyncio.to_thread(cache.stage, name, model.source, model.sha256, deadline, hub)
            _LOG.info(
                "model %s: %s (%d bytes fetched in %.1fs)",
                name, "fetched" if done.fetched_bytes else "cached", done.fetched_bytes, done.seconds,
            )
            staged.append(done)
    except BaseException:
        cache.release()
        raise
    return cache, staged
