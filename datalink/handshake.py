"""Where a replica serves frames, and the handshake that opens its TCP listener to a proxy.

A replica serves `datalink.frames` on a private Unix socket for a proxy on
its own node and on TCP, at its node's IP address, for proxies on other nodes;
its `vocabulary.request_path.wire.DataAddress` (asked over Ray, the control plane) names both, and the TCP
listener's `secret`. The frames carry pickles, and unpickling runs whatever
the bytes say, so on TCP — where any host that reaches the port can connect —
both ends prove they know the secret before either decodes a single frame:

  each side, on connect:            HELLO = MAGIC + its nonce (32 random bytes)
  each side, on the peer's HELLO:   PROOF = HMAC-SHA256(secret, LABEL + its role
                                            + the proxy's nonce + the replica's nonce)
  each side, on the peer's PROOF:   compare it (`hmac.compare_digest`) with the
                                    peer role's proof; only then frames flow

Every message has a fixed size (`HELLO_BYTES`, `PROOF_BYTES`), so a peer's
bytes are never buffered past one read before it is judged; the roles in the
proofs keep one side's proof from being replayed as the other's, and fresh
nonces on both sides keep an old exchange from being replayed at all. Whoever
runs a `Handshake` closes the connection when it raises `HandshakeError`, and
bounds how long the peer may take (the shells: `proxy.pool.socketcalls`,
`replica.data_socket`).

The secret is 32 random bytes the replica makes at start and hands out only
in its `DataAddress` over Ray; nothing here prints it (`DataAddress`'s repr
leaves it out, `HandshakeError`s never carry it). The handshake authenticates
a connection; it does not encrypt it — like Ray's own traffic without TLS,
the frames are readable on the wire, so the cluster's network must be trusted
as it must be for Ray.

Pure: bytes in, bytes out; no sockets here.
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import secrets


__all__ = [
    "Role",
    "Handshake",
    "HandshakeError",
    "new_secret",
    "MAGIC",
    "NONCE_BYTES",
    "HELLO_BYTES",
    "PROOF_BYTES",
    "SECRET_BYTES",
]

MAGIC = b"RGDFRM1\n"  # ray-gitops frames, handshake version 1
NONCE_BYTES = 32
HELLO_BYTES = len(MAGIC) + NONCE_BYTES
PROOF_BYTES = hashlib.sha256().digest_size
SECRET_BYTES = 32
_LABEL = b"ray-gitops data path v1 proof of "


def new_secret() -> bytes:
    """A fresh TCP listener secret."""
    return secrets.token_bytes(SECRET_BYTES)


class Role(enum.Enum):
    PROXY = b"proxy"
    REPLICA = b"replica"


class HandshakeError(Exception):
    """The peer did not prove it knows the secret: close the connection, decode nothing."""


def _proof(secret: bytes, role: Role, proxy_nonce: bytes, replica_nonce: bytes) -> bytes:
    return hmac.new(secret, _LABEL + role.value + b"\0" + proxy_nonce + replica_nonce, hashlib.sha256).digest()


class Handshake:
    """One side of one connection's handshake, sans I/O.

    Write `greeting()` on connect; give `feed` every byte the peer sends and
    write what it answers, until it answers the bytes that came after the
    peer's proof (the first frames): then the peer is proven.
    """

    def __init__(self, role: Role, secret: bytes, nonce: bytes | None = None) -> None:
        if len(secret) < 16:
            raise ValueError("a data path secret needs at least 16 bytes")
        self._role = role
        self._secret = secret
        self._nonce = nonce if nonce is not None else secrets.token_bytes(NONCE_BYTES)
        if len(self._nonce) != NONCE_BYTES:
            raise ValueError(f"a nonce has {NONCE_BYTES} bytes")
        self._peer_nonce: bytes | None = None
        self._buffer = b""
        self.done = False

    def __repr__(self) -> str:
        return f"Handshake({self._role.name}, done={self.done})"

    def greeting(self) -> bytes:
        return MAGIC + self._nonce

    def feed(self, data: bytes) -> tuple[bytes, bytes | None]:
        """What to write now, and, once the peer has proven itself, what it
        sent after its proof (else None). Raises `HandshakeError`."""
        if self.done:
            raise HandshakeError("the handshake is over")
        buffer = self._buffer + data
        out = b""
        if self._peer_nonce is None:
            # Judged as soon as the magic could be: garbage never waits for more.
            if buffer[: len(MAGIC)] != MAGIC[: len(buffer)]:
                self._buffer = b""
                raise HandshakeError("the peer did not open with the data path's handshake")
            if len(buffer) < HELLO_BYTES:
                self._buffer = buffer
                return out, None
            nonce = buffer[len(MAGIC) : HELLO_BYTES]
            if hmac.compare_digest(nonce, self._nonce):
                raise HandshakeError("the peer sent our own nonce back")
            self._peer_nonce = nonce
            buffer = buffer[HELLO_BYTES:]
            out = self._proof_of(self._role)
        if len(buffer) < PROOF_BYTES:
            self._buffer = buffer
            return out, None
        peer_role = Role.REPLICA if self._role is Role.PROXY else Role.PROXY
        self._buffer = b""
        if not hmac.compare_digest(buffer[:PROOF_BYTES], self._proof_of(peer_role)):
            raise HandshakeError("the peer's proof does not match: it does not know this replica's secret")
        self.done = True
        return out, buffer[PROOF_BYTES:]

    def _proof_of(self, role: Role) -> bytes:
        assert self._peer_nonce is not None
        if self._role is Role.PROXY:
            proxy_nonce, replica_nonce = self._nonce, self._peer_nonce
        else:
            proxy_nonce, replica_nonce = self._peer_nonce, self._nonce
        return _proof(self._secret, role, proxy_nonce, replica_nonce)
