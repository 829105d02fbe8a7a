"""An open-loop HTTP load at a fixed rate, for rollouts and faults.

Owns: sending one GET every 1/rate seconds whatever the answers (so a stall
shows up as failures or latency, not as fewer requests), over keep-alive
connections, and recording each answer. `summary` is pure.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import httpx

from bench import stats


@dataclass(frozen=True)
class Answer:
    sent_at: float  # time.monotonic()
    latency_s: float
    status: int  # 0: no HTTP answer at all (refused, reset, timed out)


class PacedLoad:
    """GET `url` `rate` times a second from a pool of keep-alive connections until stopped."""

    def __init__(self, url: str, rate: float, timeout_s: float = 10.0) -> None:
        self._url = url
        self._period = 1.0 / rate
        self._client = httpx.Client(timeout=timeout_s, limits=httpx.Limits(max_connections=64))
        self._pool = ThreadPoolExecutor(64)
        self._answers: list[Answer] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._pace, daemon=True)

    def __enter__(self) -> PacedLoad:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._pool.shutdown(wait=True)
        self._client.close()

    def answers(self) -> list[Answer]:
        with self._lock:
            return list(self._answers)

    def _pace(self) -> None:
        next_at = time.monotonic()
        while not self._stop.is_set():
            self._pool.submit(self._one)
            next_at += self._period
            self._stop.wait(max(0.0, next_at - time.monotonic()))

    def _one(self) -> None:
        sent = time.monotonic()
        try:
            status = self._client.get(self._url).status_code
        except httpx.HTTPError:
            status = 0
        with self._lock:
            self._answers.append(Answer(sent, time.monotonic() - sent, status))


def summary(answers: list[Answer]) -> dict[str, float]:
    """Requests, failed ones (anything but 200), and p50/p99 latency in ms."""
    latencies = sorted(a.latency_s * 1000 for a in answers)
    return {
        "requests": len(answers),
        "failed": sum(1 for a in answers if a.status != 200),
        "p50_ms": stats.quantile(latencies, 0.5),
        "p99_ms": stats.quantile(latencies, 0.99),
    }
