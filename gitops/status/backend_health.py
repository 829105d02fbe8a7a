"""How each backend served over the last minute, and which ones answer 5xx.

`Serving` is a backend's (or an endpoint's) requests over the last minute as
the controller counted them from the proxies' reports: rate, 5xx share, p99.
A backend errs (`erring_message`, the `BackendErrors` reason of the status)
when at least `ERROR_SHARE` of its answers in that minute were 5xx: a
handler that raised, or one that answered a 5xx status itself; the message
carries the share and the replicas' latest exception (`Type: message at
file:line`). `ErrorLog` decides when the agent's log says so: when a backend
starts to err or its latest exception changes, and otherwise at most once a
minute per backend. Pure; the clock is passed in.
"""

from __future__ import annotations

from typing import Mapping, Protocol

from pydantic import BaseModel, ConfigDict

from vocabulary.control.request_stats import RequestStats

__all__ = ["BACKEND_ERRORS", "ERROR_SHARE", "Serving", "erring", "erring_message", "ErrorLog"]

BACKEND_ERRORS = "BackendErrors"
ERROR_SHARE = 0.01  # of a backend's answers in the last minute, 5xx, before it shows as erring
_LOG_EVERY_S = 60.0


class Serving(BaseModel):
    """Requests answered over the last `window_s` seconds (up to a minute)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    window_s: float = 0.0
    requests: int = 0
    errors: int = 0  # 5xx answers
    p99_s: float = 0.0  # the upper bound of the latency bucket holding the 99th percentile

    @classmethod
    def of(cls, stats: RequestStats, window_s: float) -> Serving:
        return cls(window_s=round(window_s, 1), requests=stats.requests, errors=stats.errors,
                   p99_s=stats.quantile(0.99))

    def rate(self) -> float:
        """Requests per second."""
        return self.requests / self.window_s if self.window_s > 0 else 0.0

    def error_share(self) -> float:
        return self.errors / self.requests if self.requests else 0.0


class _Backend(Protocol):
    @property
    def serving(self) -> Serving: ...

    @property
    def latest_exception(self) -> str | None: ...


def erring(backends: Mapping[str, _Backend]) -> dict[str, str]:
    """Backend -> what it answers, for every backend whose 5xx share is at least `ERROR_SHARE`."""
    return {
        name: _describe(backend)
        for name, backend in sorted(backends.items())
        if backend.serving.errors and backend.serving.error_share() >= ERROR_SHARE
    }


def erring_message(backends: Mapping[str, _Backend]) -> str:
    """One message for every erring backend ("" when none errs)."""
    return "; ".join(f"{name}: {text}" for name, text in erring(backends).items())


def _describe(backend: _Backend) -> str:
    serving = backend.serving
    text = (f"{serving.error_share():.0%} of {serving.requests} answers were 5xx "
            f"in the last {serving.window_s:.0f}s")
    return f"{text}; latest exception {backend.latest_exception}" if backend.latest_exception else text


class ErrorLog:
    """When the agent's log says a backend answers 5xx: at once when it starts or its
    latest exception changes, then at most once every `every_s` seconds."""

    def __init__(self, every_s: float = _LOG_EVERY_S) -> None:
        self._every_s = every_s
        self._said: dict[str, tuple[float, str | None]] = {}  # backend -> (when, its latest exception then)

    def lines(self, backends: Mapping[str, _Backend], now: float) -> list[str]:
        now_erring = erring(backends)
        lines = []
        for name, text in now_erring.items():
            exception = backends[name].latest_exception
            said = self._said.get(name)
            if said is None or said[1] != exception or now - said[0] >= self._every_s:
                self._said[name] = (now, exception)
                lines.append(f"backend {name} answers 5xx: {text}")
        for name in set(self._said) - set(now_erring):
            del self._said[name]  # it recovered: a new streak is news again
        return lines
