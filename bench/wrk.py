"""HTTP load from `wrk` on loopback, and the figures parsed from its output.

Owns: how a closed-loop HTTP load is run (threads, connections, warm-up, the
Lua script that makes each request a POST with a body) and read (req/s, p50,
p99, requests, non-2xx, socket errors). `parse` and `post_script` are pure.
"""

from __future__ import annotations

import math
import re
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx

_UNITS = {"us": 1e-3, "ms": 1.0, "s": 1e3}


def run(url: str, duration_s: float, connections: int, warmup_s: float = 1.0,
        script: Path | None = None) -> dict[str, float]:
    """Warm up, then load `url` for `duration_s` with `connections` connections (each request
    shaped by the Lua `script` when given, see `post_script`)."""
    if warmup_s > 0:
        warm_up(url, warmup_s, connections, script)
    done = subprocess.run(
        ["wrk", _threads(connections), f"-c{connections}", f"-d{_seconds(duration_s)}", "--timeout", "10s", "--latency",
         *_script(script), url],
        capture_output=True, text=True, check=True,
    )
    return parse(done.stdout)


def warm_up(url: str, duration_s: float, connections: int, script: Path | None = None) -> None:
    """Load `url` for `duration_s` and throw the figures away."""
    subprocess.run(["wrk", _threads(connections), f"-c{connections}", f"-d{_seconds(duration_s)}", *_script(script),
                    url], capture_output=True, check=True)


def post_script(body_bytes: int) -> str:
    """A wrk Lua script making every request a POST of `body_bytes` bytes (wrk sends no body by itself)."""
    return ('wrk.method = "POST"\n'
            'wrk.headers["Content-Type"] = "application/octet-stream"\n'
            f'wrk.body = string.rep("x", {int(body_bytes)})\n')


def _script(script: Path | None) -> list[str]:
    return ["-s", str(script)] if script is not None else []


def _threads(connections: int) -> str:
    return f"-t{min(2, connections)}"  # wrk needs a connection per thread


def parse(text: str) -> dict[str, float]:
    """req/s, p50 and p99 in ms, non-2xx answers and socket errors from wrk's output."""
    def latency(percent: str) -> float:
        match = re.search(rf"^\s+{percent}%\s+([\d.]+)(us|ms|s)\s*$", text, re.M)
        return float(match.group(1)) * _UNITS[match.group(2)] if match else math.nan

    rps = re.search(r"Requests/sec:\s+([\d.]+)", text)
    requests = re.search(r"^\s*(\d+) requests in", text, re.M)
    non_2xx = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", text)
    socket = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", text)
    return {
        "rps": float(rps.group(1)) if rps else 0.0,
        "requests": float(requests.group(1)) if requests else 0.0,
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
