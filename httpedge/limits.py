"""The bounds of one HTTP listener, as a plain value (no HTTP server imported).

Pure, so settings values (`proxy.settings`) can carry them; `httpedge.bounds`
applies them to a uvicorn server.
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
    keep_alive_s: float = 5.0
