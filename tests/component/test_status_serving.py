"""Status says how backends serve: the last minute's rate, 5xx share and p99, and
BackendErrors with the replicas' latest exception when a backend answers 5xx."""

from __future__ import annotations

from dataclasses import replace

from gitops.commands.remote import render_status
from gitops.status.backend_health import ErrorLog, Serving
from gitops.status.rollup import SyncStatus, roll_up
from tests.support.status import BASE, cluster
from vocabulary.control.request_stats import RequestStats, bucket_of
from vocabulary.control.status import HandlerError

RAISED = HandlerError(type="ZeroDivisionError", message="division by zero", where="deployments/boom.py:7",
                      at=100.0, replica_id="echo#1")


def stats(requests: int, errors: int, latency_s: float = 0.02) -> RequestStats:
    buckets = [0] * len(RequestStats().buckets)
    buckets[bucket_of(latency_s)] = requests
    return RequestStats(requests=requests, errors=errors, buckets=tuple(buckets))


def serving(requests: int, errors: int, latest: HandlerError | None = RAISED):
    observed = cluster()
    backend = observed.backends["echo"].model_copy(update={"latest_error": latest})
    return replace(BASE, cluster=observed.model_copy(update={
        "backends": {"echo": backend}, "serving": {"echo": stats(requests, errors)}, "serving_window_s": 60.0,
        "endpoint_serving": {"echo": stats(requests, errors)},
    }))


def test_a_backend_answering_5xx_is_degraded_with_backend_errors_its_share_and_latest_exception() -> None:
    status = roll_up(serving(40, 10))
    assert status.status is SyncStatus.DEGRADED
    ready = status.condition("Ready")
    assert ready is not None and ready.reason == "BackendErrors"
    assert ready.message == ("echo: 25% of 40 answers were 5xx in the last 60s; latest exception "
                             "ZeroDivisionError: division by zero at deployments/boom.py:7")
    degraded = status.condition("Degraded")
    assert degraded is not None and degraded.status and degraded.reason == "BackendErrors"


def test_a_backend_answering_5xx_by_status_is_degraded_without_an_exception() -> None:
    status = roll_up(serving(10, 10, latest=None))
    assert status.status is SyncStatus.DEGRADED
    assert status.condition("Ready").message == "echo: 100% of 10 answers were 5xx in the last 60s"


def test_a_backend_serving_well_is_synced_and_says_how_it_serves() -> None:
    status = roll_up(serving(600, 0))
    assert status.status is SyncStatus.SYNCED and status.condition("Degraded") is None
    backend = status.backends["echo"]
    assert backend.serving == Serving(window_s=60.0, requests=600, errors=0, p99_s=0.025)
    assert backend.serving.rate() == 10.0
    assert status.endpoints["echo"].serving == backend.serving


def test_a_backend_counted_since_its_new_version_says_so_and_its_rate_is_over_those_seconds() -> None:
    observed = serving(50, 1)
    fresh = replace(observed, cluster=observed.cluster.model_copy(update={"serving_windows": {"echo": 5.0}}))
    status = roll_up(fresh)
    assert status.backends["echo"].serving.window_s == 5.0 and status.backends["echo"].serving.rate() == 10.0
    assert status.condition("Ready").message == ("echo: 2% of 50 answers were 5xx in the last 5s; latest exception "
                                                 "ZeroDivisionError: division by zero at deployments/boom.py:7")


def test_the_table_labels_each_rows_window_so_a_backend_and_its_endpoint_can_differ() -> None:
    """Issue 49 row 9: a backend at 69% 5xx beside its endpoint at 9%, with no word that the windows differ."""
    observed = serving(50, 1)
    fresh = replace(observed, cluster=observed.cluster.model_copy(update={"serving_windows": {"echo": 5.0}}))
    lines = render_status(roll_up(fresh)).splitlines()
    for table in ("BACKEND", "ENDPOINT"):
        header = next(line for line in lines if line.startswith(table))
        assert header.split()[-3 if table == "BACKEND" else -1] == "WINDOW", header  # BACKEND ends LAST ERROR
    backend = next(line for line in lines if line.startswith("echo ") and "v1" in line)
    endpoint = next(line for line in lines if line.startswith("echo ") and "/echo" in line)
    assert backend.split()[-1] == "5s" and endpoint.split()[-1] == "60s", (backend, endpoint)


def test_the_table_shows_the_whole_version_as_plan_and_json_do() -> None:
    observed = serving(50, 1)
    versioned = {"echo": observed.cluster.backends["echo"].model_copy(update={"version": "a1669410361a+mfcaf984a"})}
    status = roll_up(replace(observed, cluster=observed.cluster.model_copy(update={"backends": versioned})))
    row = next(line for line in render_status(status).splitlines() if line.startswith("echo ") and "+m" in line)
    assert row.split()[1] == "a1669410361a+mfcaf984a" == status.backends["echo"].version


def test_a_rare_5xx_below_the_share_is_no_degradation() -> None:
    assert roll_up(serving(1000, 5)).status is SyncStatus.SYNCED


def test_backend_errors_show_while_a_commit_applies_too() -> None:
    status = roll_up(replace(serving(10, 10), applying="b" * 40))
    assert status.status is SyncStatus.PROGRESSING
    assert status.condition("Degraded") is not None


def test_the_status_table_shows_rate_errors_p99_and_the_latest_exception() -> None:
    text = render_status(roll_up(serving(40, 10)))
    assert "Status:     Degraded (BackendErrors: echo: 25% of 40 answers" in text
    header = next(line for line in text.splitlines() if line.startswith("BACKEND"))
    assert "REQ/S" in header and "5XX" in header and "P99" in header
    row = next(line for line in text.splitlines() if line.startswith("echo ") and "v1" in line)
    assert "0.7" in row and "25%" in row and "25ms" in row
    assert "Latest exception of echo: ZeroDivisionError: division by zero at deployments/boom.py:7" in text


def test_the_error_log_says_a_streak_once_then_once_a_minute_and_a_new_exception_at_once() -> None:
    log = ErrorLog(every_s=60.0)
    erring = roll_up(serving(40, 10)).backends
    assert log.lines(erring, now=0.0) == [
        "backend echo answers 5xx: 25% of 40 answers were 5xx in the last 60s; latest exception "
        "ZeroDivisionError: division by zero at deployments/boom.py:7"
    ]
    assert log.lines(erring, now=30.0) == []
    other = HandlerError(type="KeyError", message="'x'", where="deployments/boom.py:9", at=101.0)
    assert len(log.lines(roll_up(serving(40, 10, latest=other)).backends, now=31.0)) == 1
    assert log.lines(roll_up(serving(40, 10, latest=other)).backends, now=50.0) == []
    assert len(log.lines(roll_up(serving(40, 10, latest=other)).backends, now=92.0)) == 1
    assert log.lines(roll_up(serving(40, 0)).backends, now=93.0) == []
    assert len(log.lines(roll_up(serving(40, 10, latest=other)).backends, now=94.0)) == 1  # a new streak
