"""The bounds of one HTTP listener, as a plain value (no HTTP server imported).

Pure, so settings values (`proxy.settings`) can carry them; `httpedge.server`
applies them at the socket.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["EdgeLimits", "KIB"]

KIB = 1024


@dataclass(frozen=True)
class EdgeLimits:
    """Every value shrinkable in tests. Header bytes count the request line and headers."""

    max_header_bytes: int = 64 * KIB
    header_timeout_s: float = 10.0
    body_timeout_s: float = 30.0
    max_connections: int = 4096
    retry_after_s: int = 1
    # Longer than clients' and load balancers' idle timeouts (httpx 5 s,
    # cloud load balancers 60 s): the client closes an idle connection first,
    # so a request never races the server's close and meets a reset.
    keep_alive_s: float = 75.0
