"""Ports shared by one node's proxy workers, and by no one else.

A node's proxy workers all listen on the same HTTP port (and metrics port)
with SO_REUSEPORT, and the kernel spreads new connections over them. The
kernel lets any socket of the same user join such a port, so without more a
second agent on the node (another namespace, or another Ray cluster) given
the same port would silently take a share of the first one's traffic
instead of failing with "address in use". Owned here: the claim that stops
that. Each worker holds a shared `flock` on a claim file named by the
address, which says which group of workers owns it (the group: the node's
shared metrics directory, unique per Ray session, namespace and node); a
worker of another group is refused with a clear error while any worker of
the owning group lives. The lock dies with its process, so a killed group
leaves nothing to clean up.

Claim files live in a directory private to this user (0700, checked),
under the node's private base (`datalink.private_dirs`), opened once and
used by descriptor: a port shared by SO_REUSEPORT can only be shared with
the same user anyway, and a directory another user made first in the temp
dir is passed over instead of stopping the workers. `group_dir` is where a
group of workers shares its files (metrics, shadow mismatches): under the
same base, named by the group.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import socket
import stat
import threading
import time

from datalink.private_dirs import private_base, subdir

__all__ = ["claim", "release", "bind", "private_dir", "group_dir"]

_ATTEMPTS = 200
_RETRY_S = 0.01


def bind(host: str, port: int, group: str | None) -> socket.socket:
    """A TCP socket bound to host:port (not yet listening); shared by `group`'s workers, or by none when None."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if group is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    return sock


def claim(host: str, port: int, group: str) -> int:
    """Hold host:port for `group` until `release` (or this process dies); returns the claim's descriptor.

    Raises `OSError` naming the group that holds it when another group's workers do.
    Port 0 claims nothing (every worker gets a port of its own).
    """
    if port == 0:
        return -1
    name = f"{host.replace(':', '_')}_{port}"
    fd = os.open(name, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=_claims_dir())
    try:
        for _ in range(_ATTEMPTS):
            if _try_claim(fd, group.encode()):
                return fd
            time.sleep(_RETRY_S)
        raise _Taken(_read(fd))
    except _Taken as taken:
        os.close(fd)
        holder = taken.holder.decode(errors="replace") or "another agent"
        raise OSError(f"in use by the proxies of {holder}") from None
    except BaseException:
        os.close(fd)
        raise


def release(fd: int) -> None:
    if fd >= 0:
        os.close(fd)  # drops the lock


class _Taken(Exception):
    def __init__(self, holder: bytes) -> None:
        self.holder = holder


def _try_claim(fd: int, group: bytes) -> bool:
    """True once `fd` holds a shared lock on a file naming `group`; False to try again; `_Taken` if another owns it."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = _read(fd)
        if holder and holder != group:
            raise _Taken(holder) from None
        if not holder:
            return False  # being written by the owner's first worker
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return False  # someone holds it exclusively for a moment
    else:
        # No one holds it: it is ours to name (a dead group's name is overwritten).
        os.ftruncate(fd, 0)
        os.pwrite(fd, group, 0)
        fcntl.flock(fd, fcntl.LOCK_SH)  # not atomic: another group may slip in, checked below
    if _read(fd) != group:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    return True


def _read(fd: int) -> bytes:
    return os.pread(fd, 4096, 0)


_claims_lock = threading.Lock()
_claims_fd: int | None = None


def _claims_dir() -> int:
    """The claims' directory, opened once per process."""
    global _claims_fd
    with _claims_lock:
        if _claims_fd is None:
            _claims_fd = subdir(private_base(), "proxy-ports")[1]
        return _claims_fd


def group_dir(group: str) -> str:
    """The private directory `group`'s workers share their files in (made 0700 when missing)."""
    path, fd = subdir(private_base(), "proxy-group-" + hashlib.sha256(group.encode()).hexdigest()[:24])
    os.close(fd)
    return path


def private_dir(path: str) -> None:
    """Make `path` (0700) unless it exists; refuse one that is not a directory private to this user,
    since another user could plant or read what the node's workers keep in it (port claims, metrics,
    shadow mismatches)."""
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    info = os.lstat(path)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
        raise PermissionError(f"proxy workers' directory {path} is not a private directory of this user (0700)")
