"""Capture records sent to an S3(-compatible) store in batched objects, with obstore.

Owns the `s3://BUCKET/PREFIX` capture sink: records (JSON lines, already
redacted by `proxy.observability.redacting`) gather per sink and leave as one object,
`PREFIX/<worker>-<YYYYmmddTHHMMSS>-<n>.jsonl`, once a batch holds
`MAX_RECORDS` records or `MAX_BYTES` bytes, once its oldest record waited
`MAX_AGE_S`, and when the writer stops. Credentials, region and endpoint
are the node's standard `AWS_*` variables (`AWS_ACCESS_KEY_ID`,
`AWS_SECRET_ACCESS_KEY`, `AWS_REGION`, `AWS_ENDPOINT_URL`), read by obstore
as the models' fetches read them (`replica.fetching.sources`), never from the
spec. Runs on the capture writer's thread only (`proxy.observability.capture`): a slow or
failing store delays no answer; a batch that cannot be sent is dropped and
its records counted as dropped (logged once per sink). An I/O shell.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Callable
from urllib.parse import unquote, urlsplit

if TYPE_CHECKING:
    from obstore.store import S3Store

__all__ = ["S3Batches", "MAX_RECORDS", "MAX_BYTES", "MAX_AGE_S"]

logger = logging.getLogger(__name__)

MAX_RECORDS = 1000  # records in one object at most
MAX_BYTES = 4 * 1024 * 1024  # bytes in one object, about
MAX_AGE_S = 10.0  # a record waits at most this long for its object to leave
_RETRIES = {
    "max_retries": 2,
    "backoff": {"init_backoff": timedelta(milliseconds=100), "max_backoff": timedelta(seconds=1), "base": 2.0},
}
Counted = Callable[[str], None]  # "written" or "dropped", once per record
StoreFor = Callable[[str], Any]  # bucket -> an obstore store


def _store(bucket: str) -> S3Store:
    """The bucket's store as the models' fetches make it: obstore reads the AWS_* variables.
    obstore (about 4 MB of a worker's memory) is loaded here, by a worker's first s3:// batch."""
    from obstore.store import S3Store

    options: dict[str, Any] = {"timeout": timedelta(seconds=10), "connect_timeout": timedelta(seconds=5)}
    if os.environ.get("AWS_ENDPOINT_URL", "").startswith("http://"):
        options["allow_http"] = True  # an S3-compatible server on loopback, as for models (docs/guides/models.md)
    return S3Store(bucket, client_options=options, retry_config=_RETRIES)  # type: ignore[arg-type]  # obstore's TypedDicts


@dataclass
class _Batch:
    opened_at: float
    lines: list[bytes] = field(default_factory=list)
    size: int = 0


class S3Batches:
    """One proxy worker's pending S3 objects, one per sink."""

    def __init__(self, worker: str, counted: Counted, store_for: StoreFor = _store) -> None:
        self._worker = worker
        self._counted = counted
        self._store_for = store_for
        self._stores: dict[str, Any] = {}
        self._batches: dict[str, _Batch] = {}
        self._sent = 0
        self._failed: set[str] = set()

    def add(self, sink: str, line: bytes, now: float) -> None:
        """Queue one record's line for `sink`; the batch leaves once it is full."""
        batch = self._batches.get(sink)
        if batch is None:
            batch = self._batches[sink] = _Batch(now)
        batch.lines.append(line)
        batch.size += len(line) + 1
        if len(batch.lines) >= MAX_RECORDS or batch.size >= MAX_BYTES:
            self._send(sink, self._batches.pop(sink))

    def wait_s(self, now: float) -> float | None:
        """How long until the oldest batch is due (None: nothing waits)."""
        if not self._batches:
            return None
        return max(0.0, min(batch.opened_at for batch in self._batches.values()) + MAX_AGE_S - now)

    def send_due(self, now: float, everything: bool = False) -> None:
        """Send the batches whose oldest record waited MAX_AGE_S (`everything`: all of them)."""
        for sink in [s for s, b in self._batches.items() if everything or now - b.opened_at >= MAX_AGE_S]:
            self._send(sink, self._batches.pop(sink))

    def _send(self, sink: str, batch: _Batch) -> None:
        parts = urlsplit(sink)
        prefix = unquote(parts.path).strip("/")
        self._sent += 1
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
        key = "/".join(p for p in (prefix, f"{self._worker}-{stamp}-{self._sent}.jsonl") if p)
        try:
            import obstore  # loaded by `_store` already, or by the test's `store_for`

            store = self._stores.get(parts.netloc)
            if store is None:
                store = self._stores[parts.netloc] = self._store_for(parts.netloc)
            obstore.put(store, key, b"".join(line + b"\n" for line in batch.lines))
        except Exception as error:  # noqa: BLE001 — obstore's errors: the batch is dropped, counted and logged
            if sink not in self._failed:
                self._failed.add(sink)
                text = " ".join(str(error).split("Debug source:")[0].split())[:300]
                logger.error("capture: cannot send records to %s: %s", sink, text or type(error).__name__)
            for _ in batch.lines:
                self._counted("dropped")
            return
        self._failed.discard(sink)
        for _ in batch.lines:
            self._counted("written")
