"""Who is at the other end of a data-path socket, and the socket options it runs with.

Both ends of the same-node data path (`proxy.pool.socketcalls`, `replica.data_socket`)
check their peer here before any frame is read: the frames carry pickles
(`datalink.frames`), so only our own OS user may send them over the Unix
socket. `peer_uid` is the one socket call (the kernel's SO_PEERCRED record,
never the stream); `peer_allowed` is the rule. A TCP peer (another node's
proxy) has no such record: it proves itself with the secret instead
(`datalink.handshake`). `set_nodelay` turns off Nagle's algorithm on a TCP
data connection, whose small frames must leave at once.
"""

from __future__ import annotations

import socket
import struct

__all__ = ["peer_uid", "peer_allowed", "set_nodelay"]

_CREDENTIALS = struct.Struct("3i")  # struct ucred: pid, uid, gid


def peer_uid(sock: socket.socket) -> int:
    """The uid of the process at the other end of a connected Unix socket."""
    _, uid, _ = _CREDENTIALS.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _CREDENTIALS.size))
    return uid


def peer_allowed(peer_uid: int, own_uid: int) -> bool:
    """Whether a peer whose SO_PEERCRED says `peer_uid` may talk frames with us.

    Only our own OS user: root included, nobody else is trusted with pickles.
    """
    return peer_uid == own_uid


def set_nodelay(sock: socket.socket | None) -> None:
    """TCP_NODELAY on a TCP socket (asyncio sets it too; uvloop may not); other sockets are left alone."""
    if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            pass  # a socket closing meanwhile: its connection ends anyway
