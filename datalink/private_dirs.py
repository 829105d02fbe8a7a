"""The per-user private directory a node's data-plane files live under, opened once.

Proxy workers' port claims and shared metrics and a replica's data socket
must live where no other OS user can read, plant or swap anything: the data
socket carries pickles, the claims decide who serves a port, the metrics
files hold shadow samples. Ray's session directory is no such place (others
may write there, and without a sticky bit they may rename our entries), and
a fixed name in the temp dir can be made first by anyone.

`private_base()` takes the first candidate that is, or can be made, a
directory owned by this user with no access for anyone else:
`$XDG_RUNTIME_DIR/ray-gitops` (when `XDG_RUNTIME_DIR` itself is ours and
0700), then `<temp dir>/ray-gitops-<uid>`, then `-1` ... `-15` after it,
then `$HOME/.cache/ray-gitops` (when the home directory and its `.cache` are
ours and nobody else may write them: no other user can make a name there
first). A candidate another user made first (or a symlink, a file, one open
to others) is passed over, not an error, so such a squatter cannot stop a
proxy worker or a replica from starting, however many of the temp dir's
names they take; every process of this user on the node walks the same list
and meets in the same directory. The directory is opened once per
process (`O_DIRECTORY | O_NOFOLLOW`) and judged on that descriptor (`fstat`),
and the subdirectories are made and opened relative to it (`subdir`); the
paths handed to APIs that need one (a socket's address, prometheus_client's
directory) lie under it, where only this user can change anything, and the
temp dir's sticky bit keeps others from renaming the base itself.

What a process left under a private directory (a replica's secrets, a
download into the model cache) is swept by the next process once its owner
is gone: `process_alive` is that one test.

The I/O shell of private directories; `candidates` and `is_private` are the pure rules.
"""

from __future__ import annotations

import os
import stat
import tempfile
import threading
from dataclasses import dataclass
from typing import Mapping

__all__ = ["PrivateBase", "private_base", "subdir", "own_dir", "candidates", "is_private", "FALLBACKS"]

FALLBACKS = 15
_NAME = "ray-gitops"
_OPEN_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


@dataclass(frozen=True)
class PrivateBase:
    """The base directory's path (for APIs that need one) and its descriptor (for everything else)."""

    path: str
    fd: int


def candidates(uid: int, temp_dir: str, runtime_dir: str | None, cache_home: str | None = None) -> list[str]:
    """Where the base may be, in the order every process of `uid` tries them
    (`cache_home`: this user's `$HOME/.cache`, when only this user may write it)."""
    found = [os.path.join(runtime_dir, _NAME)] if runtime_dir else []
    first = os.path.join(temp_dir, f"{_NAME}-{uid}")
    last = [os.path.join(cache_home, _NAME)] if cache_home else []
    return [*found, first, *(f"{first}-{n}" for n in range(1, FALLBACKS + 1)), *last]


def is_private(info: os.stat_result, uid: int) -> bool:
    """A directory of `uid`'s that nobody else may enter, list or write."""
    return stat.S_ISDIR(info.st_mode) and info.st_uid == uid and not info.st_mode & 0o077


_lock = threading.Lock()
_base: PrivateBase | None = None


def private_base(environ: Mapping[str, str] = os.environ, temp_dir: str | None = None) -> PrivateBase:
    """This process's private base, found and opened on first use; raises
    PermissionError (naming every candidate) when none can be had."""
    global _base
    with _lock:
        if _base is None or temp_dir is not None:
            base = _find(environ, temp_dir if temp_dir is not None else tempfile.gettempdir())
            if temp_dir is not None:
                return base  # tests: another temp dir, not this process's base
            _base = base
        return _base


def _find(environ: Mapping[str, str], temp_dir: str) -> PrivateBase:
    uid = os.getuid()
    runtime_dir = environ.get("XDG_RUNTIME_DIR") or None
    if runtime_dir is not None:
        try:
            if not is_private(os.stat(runtime_dir), uid):
                runtime_dir = None
        except OSError:
            runtime_dir = None
    tried = candidates(uid, temp_dir, runtime_dir, _cache_home(environ, uid))
    for path in tried:
        fd = _open_private(path, uid)
        if fd is not None:
            return PrivateBase(path, fd)
    raise PermissionError(f"no private directory of uid {uid} could be made or found at {', '.join(tried)}")


def _cache_home(environ: Mapping[str, str], uid: int) -> str | None:
    """`$HOME/.cache` (made 0700 when missing), when it and the home directory
    are this user's real directories nobody else may write; else None."""
    home = environ.get("HOME") or os.path.expanduser("~")
    if not os.path.isabs(home):
        return None
    cache = os.path.join(home, ".cache")
    try:
        os.mkdir(cache, 0o700)
    except FileExistsError:
        pass
    except OSError:
        return None
    for path in (home, cache):
        try:
            info = os.lstat(path)
        except OSError:
            return None
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != uid or info.st_mode & 0o022:
            return None
    return cache


def own_dir(path: str) -> int:
    """`path` as a directory only this user may use: made 0700 when missing,
    narrowed to 0700 when it is this user's real directory open to others,
    opened without following a link; its descriptor. Raises PermissionError
    saying why when it is a link, not a directory, or another user's."""
    try:
        os.makedirs(path, 0o700, exist_ok=True)
    except OSError as error:
        raise PermissionError(f"{path} cannot be made ({error.strerror or error})") from None
    try:
        fd = os.open(path, _OPEN_DIR)
    except OSError as error:
        raise PermissionError(f"{path} is a link or not a directory ({error.strerror or error}): refused") from None
    info = os.fstat(fd)
    if info.st_uid != os.getuid():
        os.close(fd)
        raise PermissionError(
            f"{path} belongs to uid {info.st_uid}, not to this user (uid {os.getuid()}): refused; "
            "another local user made it first, so name a directory of your own"
        )
    if info.st_mode & 0o077:
        os.fchmod(fd, 0o700)
    return fd


def _open_private(path: str, uid: int, dir_fd: int | None = None) -> int | None:
    """`path` (made 0700 when missing) opened as a directory, if it is private to `uid`; else None."""
    try:
        os.mkdir(path, 0o700, dir_fd=dir_fd)
    except FileExistsError:
        pass
    except OSError:
        return None
    try:
        fd = os.open(path, _OPEN_DIR, dir_fd=dir_fd)
    except OSError:
        return None  # a symlink (O_NOFOLLOW), a file, or not ours to enter
    if is_private(os.fstat(fd), uid):
        return fd
    os.close(fd)
    return None


def subdir(base: PrivateBase, name: str) -> tuple[str, int]:
    """`base`'s subdirectory `name` (made 0700 when missing, relative to the
    base's descriptor): its path and an open descriptor. Raises PermissionError
    when it is not private (only this user could have made it so)."""
    if os.sep in name or name in ("", ".", ".."):
        raise ValueError(f"{name!r} is not a name in a directory")
    fd = _open_private(name, os.getuid(), dir_fd=base.fd)
    if fd is None:
        raise PermissionError(f"{os.path.join(base.path, name)} is not a private directory of this user (0700)")
    return os.path.join(base.path, name), fd


def process_alive(pid: int) -> bool:
    """Whether process `pid` still exists (one of another user counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
