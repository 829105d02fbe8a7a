"""Capture: sampled request/response records written to a file sink, never delaying an answer.

Owns the request path's side of `[endpoints.NAME.capture]` and the writing.
On the request path: one draw against the endpoint's `sample` (`draw`),
and, once the answer went out, one `put_nowait` of the raw `Exchange` on
this worker's bounded queue (`offer`); when the queue is full the record is
dropped and counted, never waited for. On the writer's own thread, in
batches (what queued up, then a pause of `BATCH_PAUSE_S`, so that it takes
the GIL from the request path as seldom as it can): the
record is built and redacted (`proxy.observability.redacting`), so nothing unredacted
leaves the process, then appended as one JSON line to
`DIR/<worker>-<YYYYMMDDHH>.jsonl` (UTC): one file per proxy worker per hour,
a new one each hour; or, for an `s3://BUCKET/PREFIX` sink, gathered into
batched objects (`proxy.observability.capture_s3`). Counted: `gitops_capture_records_total{result=written|dropped}`
(a record that cannot be written, e.g. an unwritable directory or a store
that refuses or cannot be reached, counts as dropped and is logged once per
sink).
"""

from __future__ import annotations

import json
import logging
import os
import queue
import threading
import time
from datetime import datetime, UTC
from typing import IO, Any, Callable
from urllib.parse import unquote, urlsplit

import orjson

from proxy.observability.capture_s3 import S3Batches, StoreFor
from proxy.observability.redacting import Exchange, Redaction, capture_record
from vocabulary.request_path.choosing import Random
from vocabulary.spec.endpoints import CaptureConfig
from vocabulary.request_path.wire import WireRequest

__all__ = ["CaptureWriter", "encoded", "sink_directory", "DEFAULT_CAPACITY"]

logger = logging.getLogger(__name__)

DEFAULT_CAPACITY = 1024  # records waiting to be written, per worker
BATCH_PAUSE_S = 0.05  # the writer writes what queued up, then rests this long
Counted = Callable[[str], None]  # "written" or "dropped"


def sink_directory(sink: str) -> str:
    """The directory of a `file:///DIR` sink."""
    return unquote(urlsplit(sink).path)


def encoded(record: dict[str, Any]) -> bytes:
    """One record as a JSON line (UTF-8), with orjson: the writer's thread holds the GIL
    about 25 times shorter than with `json.dumps` (1 KiB bodies), which the request path feels."""
    try:
        return orjson.dumps(record)
    except TypeError:  # an integer beyond 64 bits: the standard library writes any
        return json.dumps(record, ensure_ascii=False, separators=(",", ":")).encode()


class CaptureWriter:
    """One proxy worker's capture: the draws, the bounded queue and the writer thread."""

    def __init__(
        self, worker: str, rng: Random, counted: Counted | None = None, capacity: int = DEFAULT_CAPACITY,
        store_for: StoreFor | None = None,
    ) -> None:
        """`store_for`: a bucket's object store for `s3://` sinks (default: obstore's S3 with the AWS_* variables)."""
        self._worker = "".join(c if c.isalnum() or c in "-_" else "_" for c in worker)
        self._rng = rng
        self._counted = counted or (lambda result: None)
        self._queue: queue.Queue[Exchange | None] = queue.Queue(capacity)
        self._thread: threading.Thread | None = None
        self._redactions: dict[int, tuple[CaptureConfig, Redaction, str]] = {}
        self._files: dict[str, tuple[str, IO[bytes]]] = {}  # directory -> (hour, open file)
        self._failed: set[str] = set()
        self._s3 = S3Batches(self._worker, self._counted) if store_for is None else S3Batches(
            self._worker, self._counted, store_for
        )

    # --- the request path --------------------------------------------------------

    def draw(
        self, config: CaptureConfig, endpoint: str, backend: str, request: WireRequest, rollout_step: int = 0
    ) -> Exchange | None:
        """An exchange to fill in when this request is sampled, else None; `rollout_step`:
        the progressive rollout's 1-based step whose weights chose `backend` (0: none)."""
        if self._rng.random() >= config.sample:
            return None
        held = self._redactions.get(id(config))
        if held is None or held[0] is not config:  # once per config: its rules and where its records go
            sink = config.sink if config.sink.startswith("s3://") else sink_directory(config.sink)
            held = self._redactions[id(config)] = (config, Redaction.of(config), sink)
        return Exchange(endpoint, backend, request, time.time(), held[1], held[2], rollout_step=rollout_step)

    def offer(self, exchange: Exchange) -> None:
        """Hand a finished exchange to the writer; dropped (and counted) when the queue is full."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._write_forever, name="gitops-capture", daemon=True)
            self._thread.start()
        try:
            self._queue.put_nowait(exchange)
        except queue.Full:
            self._counted("dropped")

    # --- the writer's thread ------------------------------------------------------

    def _write_forever(self) -> None:
        stopping = False
        while not stopping:
            try:  # an S3 batch waiting to leave wakes the thread in time; else nothing does
                exchange: Exchange | None = self._queue.get(timeout=self._s3.wait_s(time.monotonic()))
                idle = False
            except queue.Empty:
                exchange, idle = None, True
            while exchange is not None:  # everything queued, in one go
                self._write(exchange)
                try:
                    exchange = self._queue.get_nowait()
                except queue.Empty:
                    break
            else:
                stopping = not idle  # None is the stop sign
            for _, file in self._files.values():
                file.flush()
            self._s3.send_due(time.monotonic(), everything=stopping)
            if not stopping and not idle:
                # Woken at most this often: each wake-up takes the GIL from the request path.
                time.sleep(BATCH_PAUSE_S)
        for _, file in self._files.values():
            file.close()
        self._files.clear()

    def _write(self, exchange: Exchange) -> None:
        line = encoded(capture_record(exchange, self._worker))
        if exchange.sink.startswith("s3://"):
            self._s3.add(exchange.sink, line, time.monotonic())  # counted once its object is sent
            return
        try:
            self._file(exchange.sink).write(line + b"\n")
        except OSError as error:
            if exchange.sink not in self._failed:
                self._failed.add(exchange.sink)
                logger.error("capture: cannot write to %s: %s", exchange.sink, error)
            self._counted("dropped")
            return
        self._counted("written")

    def _file(self, directory: str) -> IO[bytes]:
        hour = datetime.now(UTC).strftime("%Y%m%d%H")
        held = self._files.get(directory)
        if held is not None and held[0] == hour:
            return held[1]
        if held is not None:
            held[1].close()
        os.makedirs(directory, exist_ok=True)
        file = open(os.path.join(directory, f"{self._worker}-{hour}.jsonl"), "ab")
        self._files[directory] = (hour, file)
        return file

    def close(self, timeout_s: float = 5.0) -> None:
        """Write what is queued, then stop the thread (at most `timeout_s`)."""
        if self._thread is None:
            return
        try:
            self._queue.put(None, timeout=timeout_s)
        except queue.Full:
            return
        self._thread.join(timeout_s)
