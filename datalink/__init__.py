"""ray-gitops datalink: the proxy <-> replica data connection, both ends of it.

Ray stays the control plane and the fallback; a proxy sends a replica its
requests as frames over one persistent connection — the replica's private
Unix socket on the same node, authenticated TCP from another. This package
is what both ends share; it imports only `vocabulary` (the `vocabulary.request_path.wire`
tuples the frames carry), and only `proxy` and `replica` import it.

- `frames`: the frame format (length, kind, call id, pickled payload), the
  kinds and their payloads, stream windows; pure.
- `handshake`: where a replica serves frames (`DataAddress`) and the
  HMAC handshake that opens its TCP listener to a proxy; pure.
- `peers`: who is at the other end of a Unix socket (SO_PEERCRED) and the
  TCP socket options; the only system calls besides the connection's.
- `private_dirs`: the per-user private directory (0700, opened once) that a
  node's data-plane files live under: a replica's socket, the proxy
  workers' port claims and shared metrics.
- `collector`: the cyclic garbage collector in a process at either end,
  once it has started (what start-up made frozen, full collections rare).
- `connection`: `FrameConnection`, the asyncio protocol both ends build on
  (handshake first, then frames in order, one write per loop iteration).
"""
