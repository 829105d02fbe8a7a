"""HTTP load from `wrk` on loopback, and the figures parsed from its output.

Owns: how a closed-loop HTTP load is run (threads, connections, warm-up) and
read (req/s, p50, p99, non-2xx, socket errors). `parse` is pure.
"""

from __future__ import annotations

import math
import re
import subprocess
import time
from typing import Any

import httpx

_UNITS = {"us": 1e-3, "ms": 1.0, "s": 1e3}


def run(url: str, duration_s: float, connections: int, warmup_s: float = 1.0) -> dict[str, float]:
    """Warm up, then load `url` for `duration_s` with `connections` connections."""
    if warmup_s > 0:
        warm_up(url, warmup_s, connections)
    done = subprocess.run(
        ["wrk", _threads(connections), f"-c{connections}", f"-d{_seconds(duration_s)}", "--timeout", "10s", "--latency", url],
        capture_output=True, text=True, check=True,
    )
    return parse(done.stdout)


def warm_up(url: str, duration_s: float, connections: int) -> None:
    """Load `url` for `duration_s` and throw the figures away."""
    subprocess.run(["wrk", _threads(connections), f"-c{connections}", f"-d{_seconds(duration_s)}", url],
                   capture_output=True, check=True)


def _threads(connections: int) -> str:
    return f"-t{min(2, connections)}"  # wrk needs a connection per thread


def parse(text: str) -> dict[str, float]:
    """req/s, p50 and p99 in ms, non-2xx answers and socket errors from wrk's output."""
    def latency(percent: str) -> float:
        match = re.search(rf"^\s+{percent}%\s+([\d.]+)(us|ms|s)\s*$", text, re.M)
        return float(match.group(1)) * _UNITS[match.group(2)] if match else math.nan

    rps = re.search(r"Requests/sec:\s+([\d.]+)", text)
    non_2xx = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", text)
    socket = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", text)
    return {
        "rps": float(rps.group(1)) if rps else 0.0,
        "p50_ms": latency("50"),
        "p99_ms": latency("99"),
        "non_2xx": float(non_2xx.group(1)) if non_2xx else 0.0,
        "socket_errors": float(sum(int(n) for n in socket.groups())) if socket else 0.0,
    }


def wait_for_http(url: str, timeout_s: float = 120.0, ok: Any = None) -> None:
    """Poll `url` until it answers 200 (and `ok(response)` when given)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            response = httpx.get(url, timeout=2)
            if response.status_code == 200 and (ok is None or ok(response)):
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    raise RuntimeError(f"{url} never answered 200 within {timeout_s:.0f} s")


def _seconds(value: float) -> str:
    return f"{max(1, round(value))}s"
