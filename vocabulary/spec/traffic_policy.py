"""An endpoint's policy for failing replicas: `[retries]`, `[outliers]` and `[circuit]`.

Which outcomes are tried again on another replica, how often, for which
methods, and the budget that keeps retries from multiplying the load on a
backend that is failing as a whole (Envoy's retry budget). Which replicas
answer so much worse than their backend's others that they leave routing for
a while (Envoy's outlier detection: consecutive errors, a success rate below
the others'), and how many ejections make the controller replace one
(`OutliersConfig`). How many requests may wait for a backend's replicas, and
how many retries be in flight to it, before requests are turned away with
503 (`CircuitConfig`, Envoy's circuit breakers). Values only; the proxy
applies them in `proxy.pool.sending` (its rules in `proxy.pool.retrying`,
`proxy.pool.outliers` and `proxy.pool.circuit`).
"""

from __future__ import annotations

from typing import Annotated, Any, Sequence

from pydantic import AfterValidator, Field, model_validator

from vocabulary.spec.base import Value

__all__ = [
    "RetriesConfig", "OutliersConfig", "RETRY_OUTCOMES", "IDEMPOTENT_METHODS", "DEFAULT_RETRY_ON", "retry_status",
    "retries_consistent", "CircuitConfig",
]


# What can go wrong with one try that a retry may fix, besides an answer's 5xx status code.
RETRY_OUTCOMES = frozenset({"replica-died", "replica-stalled"})
# RFC 9110's idempotent methods: sending one twice has the effect of sending it once.
IDEMPOTENT_METHODS = ("GET", "HEAD", "OPTIONS", "PUT", "DELETE")
DEFAULT_RETRY_ON = ("replica-died", "replica-stalled", "502", "503", "504")
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


def retry_status(outcome: str) -> int | None:
    """The status code a `retry_on` entry names (500 to 599), or None for a named outcome."""
    if len(outcome) == 3 and outcome.isdigit() and outcome[0] == "5":
        return int(outcome)
    return None


def _outcomes(values: Sequence[str]) -> Sequence[str]:
    if not values:
        raise ValueError("must name at least one outcome")
    for value in values:
        if value not in RETRY_OUTCOMES and retry_status(value) is None:
            raise ValueError(
                f"{value!r} is not an outcome to retry: one of {', '.join(sorted(RETRY_OUTCOMES))}, "
                "or a status code from '500' to '599' as a string"
            )
    if len(set(values)) != len(values):
        raise ValueError("must not list an outcome twice")
    return values


def _methods(values: Sequence[str]) -> Sequence[str]:
    if not values:
        raise ValueError("must not be empty")
    for value in values:
        if value not in _METHODS:
            raise ValueError(f"{value!r} is not an HTTP method in upper case (one of {', '.join(sorted(_METHODS))})")
    if len(set(values)) != len(values):
        raise ValueError("must not list a method twice")
    return values


def retries_consistent(config: Any) -> Any:
    """A non-idempotent method is retried only when the table says so, and the backoff's ceiling is
    above its start; the spec table (`gitops.specs.models`) applies this rule too."""
    unsafe = [method for method in config.methods if method not in IDEMPOTENT_METHODS]
    if unsafe and not config.non_idempotent:
        raise ValueError(
            f"methods lists {unsafe[0]}, which is not idempotent: a retry may run it twice; "
            "set non_idempotent = true if the handler tolerates that"
        )
    if config.max_backoff_s < config.backoff_s:
        raise ValueError("max_backoff_s must be at least backoff_s")
    return config


class RetriesConfig(Value):
    """Try a failed request again on another replica, within a budget; never once a byte of the answer
    reached the client (a streamed answer or a WebSocket is never tried again once started)."""

    attempts: int = Field(
        default=2, ge=1, le=5,
        description="Tries in all, the first included (1: never again); each further try goes to another "
        "replica than the ones that failed when the backend has one.",
    )
    retry_on: Annotated[tuple[str, ...], AfterValidator(_outcomes)] = Field(
        default=DEFAULT_RETRY_ON,
        description="The outcomes tried again: 'replica-died' (the replica died or could not be reached), "
        "'replica-stalled' (found hung, `proxy.pool.stalls`) and answers' status codes from '500' to '599' "
        "('500' includes a handler that raised).",
    )
    methods: Annotated[tuple[str, ...], AfterValidator(_methods)] = Field(
        default=IDEMPOTENT_METHODS,
        description="The methods whose requests are tried again; a method that is not idempotent "
        "(POST, PATCH) needs `non_idempotent = true`.",
    )
    non_idempotent: bool = Field(
        default=False,
        description="Allow `methods` to list POST or PATCH: the endpoint's handler tolerates a request "
        "run twice.",
    )
    budget_percent: float = Field(
        default=20.0, ge=0, le=100,
        description="Retries each proxy worker sends a backend, at most this share of its requests over "
        "the last 10 s (beyond `min_retries`): a backend failing as a whole gets at most 1 + this share of "
        "its offered load.",
    )
    min_retries: int = Field(
        default=3, ge=0, le=1000,
        description="Retries allowed over any 10 s whatever the budget, so a quiet endpoint still retries.",
    )
    backoff_s: float = Field(
        default=0.025, ge=0, le=10,
        description="The wait before the first retry, doubling with each; each wait is drawn at random "
        "between 0 and it (jitter), and a retry with no time left before the deadline is not sent.",
    )
    max_backoff_s: float = Field(
        default=0.25, ge=0, le=60, description="The longest wait before one retry."
    )

    _checked = model_validator(mode="after")(retries_consistent)


class OutliersConfig(Value):
    """Take a replica that fails far more than its backend's others out of routing for a while (outlier
    ejection, per proxy worker): after `consecutive_errors` errors in a row (a 5xx answer, a handler that
    raised, a call that ran out the endpoint's timeout), or when its success rate over `interval_s` falls
    `success_rate_stdev` standard deviations below the mean of its backend's replicas."""

    consecutive_errors: int = Field(
        default=5, ge=0, le=1000,
        description="Errors in a row (5xx answers, handlers that raised, calls past the timeout) that eject "
        "a replica; 0: this detector is off.",
    )
    success_rate_stdev: float = Field(
        default=1.9, ge=0, le=10,
        description="Eject a replica whose success rate over `interval_s` is more than this many standard "
        "deviations below the mean of its backend's replicas (each with `success_rate_min_requests`), and by more "
        "than chance (3 standard errors of its count); 0: this detector is off. One replica of n is at most "
        "(n-1)/sqrt(n) deviations below the others (1.15 for 3, 2.04 for 6): with few replicas "
        "`consecutive_errors` is the detector that acts.",
    )
    success_rate_min_requests: int = Field(
        default=50, ge=1, le=100_000,
        description="Requests a replica must have answered over `interval_s` for its success rate to count.",
    )
    success_rate_min_replicas: int = Field(
        default=5, ge=2, le=1000,
        description="Replicas with `success_rate_min_requests` needed before success rates are compared.",
    )
    interval_s: float = Field(
        default=10.0, gt=0, le=600,
        description="The window success rates are measured over, and how often they are compared.",
    )
    base_ejection_s: float = Field(
        default=30.0, gt=0, le=3600,
        description="How long an ejection lasts, times the replica's ejections so far (30 s, 60 s, 90 s...).",
    )
    max_ejection_percent: float = Field(
        default=50.0, ge=0, le=100,
        description="At most this share of a backend's replicas ejected at once (at least one when above 0), "
        "and never its last routable replica.",
    )
    replace_after: int = Field(
        default=3, ge=0, le=100,
        description="Ejections after which the controller replaces the replica, as it does a stalled one; "
        "0: never.",
    )


class CircuitConfig(Value):
    """Turn requests away with 503 and `Retry-After` before a backend is asked to hold too much (circuit limits,
    per proxy worker and backend): requests waiting for a replica slot, and retries in flight to it."""

    max_pending_requests: int = Field(
        default=100, ge=0, le=100_000,
        description="Requests that may wait for a replica slot of the backend (every replica full); one more "
        "is answered 503 with `Retry-After` at once (0: none waits).",
    )
    max_retries: int = Field(
        default=3, ge=0, le=100_000,
        description="Retries in flight to the backend at once; a request whose retry would be one more is "
        "answered 503 with `Retry-After` instead (0: no retry is sent).",
    )
