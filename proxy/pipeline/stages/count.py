"""The counting stage, and the `Recorder` every outcome is reported to (the one place metrics hook in).

Always on, last: every answer is reported (`Recorder.request_done`, and a
client that left as 499) and counted for rollout checks and the status
(`proxy.observability.request_stats.RequestCounter`; a client that left a
stream is not counted there, its replica's answer being unknown).
`NullRecorder` records nothing: a proxy started without a metrics port.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Iterable, Protocol, Sequence

from proxy.observability.request_stats import RequestCounter
from proxy.observability.bodies import BodyView
from proxy.pipeline.stage import Headers, Stage
from proxy.pipeline.transit import CLIENT_LEFT, Transit
from proxy.routes.snapshot import ServedEndpoint

if TYPE_CHECKING:  # its values are the shadow stage's to give
    from proxy.observability.metrics import ShadowResult

__all__ = ["Counting", "Recorder", "NullRecorder"]


class Recorder(Protocol):
    """Where the outcome of every request and shadow copy is reported (`proxy.observability.metrics.ProxyMetrics`)."""

    def request_done(self, endpoint: str, backend: str, code: int, duration_s: float) -> None: ...

    def shadow_done(self, endpoint: str, backend: str, result: ShadowResult) -> None: ...

    def shadow_compared(self, endpoint: str, backend: str, matched: bool) -> None: ...

    def first_byte(self, endpoint: str, backend: str, seconds: float) -> None:
        """A streamed answer's time to its first chunk, or a WebSocket's to its accept."""

    def session_done(self, endpoint: str, backend: str, code: int) -> None:
        """A WebSocket session ended (`proxy.pipeline.websockets` says with which code)."""

    def rate_limited(self, endpoint: str) -> None:
        """A request was refused (429): its tenant was over the endpoint's limit."""

    def tokens_admitted(self, endpoint: str, tenant: str, tokens: int) -> None:
        """A request was admitted on `tokens` estimated tokens of its tenant's budget (tenant: its label)."""

    def tokens_charged(self, endpoint: str, tenant: str, tokens: int) -> None:
        """An answer's `usage` said `tokens`, charged to its tenant's budget."""

    def token_limited(self, endpoint: str, tenant: str) -> None:
        """A request was refused (429): its tenant was over the endpoint's tokens_per_minute."""

    def gap_observer(self, endpoint: str, backend: str) -> Callable[[float], None]:
        """Where a streamed answer's gap before each chunk after its head goes (seconds), as it comes."""

    def stream_done(self, endpoint: str, backend: str, chunks: int) -> None:
        """A streamed answer ended after `chunks` chunks, its head's included."""

    def replica_stalled(self, backend: str) -> None:
        """A replica of `backend` was found stalled (`proxy.pool.stalls`) and taken out of routing."""

    def retried(self, backend: str, outcome: str) -> None:
        """A failed try of a request to `backend` was sent again (`outcome`: 'replica-died', '503', ...)."""

    def retry_budget_spent(self, backend: str) -> None:
        """A retry to `backend` was due but not sent: its retry budget was spent."""

    def replica_ejected(self, backend: str) -> None:
        """A replica of `backend` was ejected as an outlier (`proxy.pool.outliers`)."""

    def circuit_open(self, backend: str, limit: str) -> None:
        """A request to `backend` was turned away by a circuit limit ('pending', 'retries': `proxy.pool.circuit`)."""

    def deadline_exceeded(self, endpoint: str, when: str) -> None:
        """A request to `endpoint` was answered 504 because its deadline passed: 'not-started' (before a
        replica call began: none was made), 'expired' (while it waited for a replica or a replica ran it:
        the call was cancelled, and an answer that comes after is dropped)."""

    def model_served(self, backend: str, model: str, loaded: bool, evicted: Sequence[str]) -> None:
        """A multiplexed backend answered a request for `model`: whether its replica loaded
        it for this request, and the models it evicted to make room."""


def _ignore(seconds: float) -> None:
    """A gap between a stream's chunks, recorded nowhere."""


class NullRecorder:
    """Records nothing: a proxy started without a metrics port."""

    def request_done(self, endpoint: str, backend: str, code: int, duration_s: float) -> None:
        pass

    def shadow_done(self, endpoint: str, backend: str, result: ShadowResult) -> None:
        pass

    def shadow_compared(self, endpoint: str, backend: str, matched: bool) -> None:
        pass

    def first_byte(self, endpoint: str, backend: str, seconds: float) -> None:
        pass

    def session_done(self, endpoint: str, backend: str, code: int) -> None:
        pass

    def rate_limited(self, endpoint: str) -> None:
        pass

    def tokens_admitted(self, endpoint: str, tenant: str, tokens: int) -> None:
        pass

    def tokens_charged(self, endpoint: str, tenant: str, tokens: int) -> None:
        pass

    def token_limited(self, endpoint: str, tenant: str) -> None:
        pass

    def gap_observer(self, endpoint: str, backend: str) -> Callable[[float], None]:
        return _ignore

    def stream_done(self, endpoint: str, backend: str, chunks: int) -> None:
        pass

    def replica_stalled(self, backend: str) -> None:
        pass

    def retried(self, backend: str, outcome: str) -> None:
        pass

    def retry_budget_spent(self, backend: str) -> None:
        pass

    def replica_ejected(self, backend: str) -> None:
        pass

    def circuit_open(self, backend: str, limit: str) -> None:
        pass

    def deadline_exceeded(self, endpoint: str, when: str) -> None:
        pass

    def model_served(self, backend: str, model: str, loaded: bool, evicted: Sequence[str]) -> None:
        pass


class Counting(Stage):
    """Reports and counts every answer."""

    reads_answers = False  # its status and time, not its body

    def __init__(self, recorder: Recorder, counts: RequestCounter) -> None:
        self._recorder = recorder
        self._counts = counts

    def hooks(self, served: ServedEndpoint) -> Iterable[str]:
        return ("answered", "left")

    def answered(self, transit: Transit, status: int, headers: Headers, payload: BodyView) -> None:
        name, backend, duration_s = transit.served.name, transit.backend, transit.duration_s
        self._recorder.request_done(name, backend, status, duration_s)
        if status != CLIENT_LEFT or transit.held is None:
            self._counts.record(backend, status, duration_s, name)

    def left(self, transit: Transit) -> None:
        self._recorder.request_done(transit.served.name, transit.backend, CLIENT_LEFT, transit.duration_s)
