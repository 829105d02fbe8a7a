"""Capture: sampled request/response records written to a file sink, never delaying an answer.

Owns the request path's side of `[endpoints.NAME.capture]` and the writing.
On the request path: one draw against the endpoint's `sample` (`draw`),
and, once the answer went out, the raw `Exchange`, its bodies cut to what
its record needs (`proxy.observability.redacting.kept`), put on this
worker's queue (`offer`), which is bounded in bytes (`DEFAULT_CAPACITY_BYTES`):
a record that does not fit is dropped and counted, never waited for. On the writer's own thread, in
batches (what queued up, then a pause of `BATCH_PAUSE_S`, so that it takes
the GIL from the request path as seldom as it can): the
record is built and redacted (`proxy.observability.redacting`), so nothing unredacted
leaves the process, then appended as one JSON line to
`DIR/<worker>-<YYYYMMDDHH>.jsonl` (UTC): one file per proxy worker per hour,
a new one each hour, 0600, in a directory created 0700 whatever the umask,
opened without following a link and refused unless this process's user
owns it (`private_file`); or, for an `s3://BUCKET/PREFIX` sink, gathered into
batched objects (`proxy.observability.capture_s3`). Counted: `gitops_capture_records_total{result=written|dropped}`
(a record that cannot be written, e.g. an unwritable directory or a store
that refuses or cannot be reached, counts as dropped and is logged once per
sink; so does any exception while a record is built or written: the writer
goes on with the next).
"""

from __future__ import annotations

import json
import logging
import os
import queue
import stat
import threading
import time
from datetime import datetime, UTC
from typing import IO, Any, Callable
from urllib.parse import unquote, urlsplit

import orjson

from proxy.observability.capture_s3 import S3Batches, StoreFor
from proxy.observability.redacting import Exchange, Redaction, capture_record, kept
from vocabulary.request_path.choosing import Random
from vocabulary.spec.endpoints import CaptureConfig
from vocabulary.request_path.wire import WireRequest

__all__ = ["CaptureWriter", "encoded", "private_file", "sink_directory", "DEFAULT_CAPACITY_BYTES"]

logger = logging.getLogger(__name__)

DEFAULT_CAPACITY_BYTES = 32 << 20  # bytes of records waiting to be written, per worker (bodies cut first)
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
        self, worker: str, rng: Random, counted: Counted | None = None, capacity_bytes: int = DEFAULT_CAPACITY_BYTES,
        store_for: StoreFor | None = None,
    ) -> None:
        """`capacity_bytes`: what the queue holds at most (`kept`'s sizes); `store_for`: a
        bucket's object store for `s3://` sinks (default: obstore's S3 with the AWS_* variables)."""
        self._worker = "".join(c if c.isalnum() or c in "-_" else "_" for c in worker)
        self._rng = rng
        self._counted = counted or (lambda result: None)
        self._queue: queue.Queue[tuple[Exchange, int] | None] = queue.Queue()
        self._capacity_bytes = capacity_bytes
        self._queued_bytes = 0
        self._lock = threading.Lock()
        self._failures: set[str] = set()  # kinds of exception already logged
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
        size = kept(exchange)
        with self._lock:
            if self._queued_bytes + size > self._capacity_bytes:
                full = True
            else:
                full, self._queued_bytes = False, self._queued_bytes + size
        if full:
            self._counted("dropped")
            return
        self._queue.put_nowait((exchange, size))

    @property
    def queued_bytes(self) -> int:
        """What the queue holds now, in `kept`'s bytes."""
        return self._queued_bytes

    # --- the writer's thread ------------------------------------------------------

    def _write_forever(self) -> None:
        stopping = False
        while not stopping:
            try:  # an S3 batch waiting to leave wakes the thread in time; else nothing does
                queued = self._queue.get(timeout=self._s3.wait_s(time.monotonic()))
                idle = False
            except queue.Empty:
                queued, idle = None, True
            while queued is not None:  # everything queued, in one go
                exchange, size = queued
                with self._lock:
                    self._queued_bytes -= size
                self._written_or_dropped(exchange)
                try:
                    queued = self._queue.get_nowait()
                except queue.Empty:
                    break
            else:
                stopping = not idle  # None is the stop sign
            try:
                for _, file in self._files.values():
                    file.flush()
                self._s3.send_due(time.monotonic(), everything=stopping)
            except Exception as error:  # noqa: BLE001 — the writer outlives whatever a sink does
                self._failed_once(error)
            if not stopping and not idle:
                # Woken at most this often: each wake-up takes the GIL from the request path.
                time.sleep(BATCH_PAUSE_S)
        for _, file in self._files.values():
            file.close()
        self._files.clear()

    def _written_or_dropped(self, exchange: Exchange) -> None:
        """`_write`, and any exception it raises counted as a drop (logged once per kind): never the writer's end."""
        try:
            self._write(exchange)
        except Exception as error:  # noqa: BLE001 — a record never takes the writer down
            self._failed_once(error)
            self._counted("dropped")

    def _failed_once(self, error: Exception) -> None:
        kind = type(error).__name__
        if kind not in self._failures:
            self._failures.add(kind)
            logger.error("capture: a record could not be built or written (%s: %s); counted as dropped", kind, error)

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
            del self._files[directory]
            held[1].close()
        file = private_file(directory, f"{self._worker}-{hour}.jsonl")
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


def private_file(directory: str, name: str) -> IO[bytes]:
    """`directory/name` opened to append: the directories missing on the way created 0700,
    the file 0600 (whatever the umask), neither followed if it is a link, and both refused
    (PermissionError) unless this process's user owns them."""
    missing = []
    path = os.path.abspath(directory)
    while not os.path.lexists(path):
        missing.append(path)
        path = os.path.dirname(path)
    for path in reversed(missing):
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            pass
    nofollow = os.O_NOFOLLOW | os.O_CLOEXEC
    folder = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | nofollow)
    try:
        _owned(folder, directory, stat.S_ISDIR)
        if missing:
            os.fchmod(folder, 0o700)
        fd = os.open(name, os.O_WRONLY | os.O_APPEND | os.O_CREAT | nofollow, 0o600, dir_fd=folder)
    finally:
        os.close(folder)
    try:
        if stat.S_IMODE(_owned(fd, os.path.join(directory, name), stat.S_ISREG).st_mode) != 0o600:
            os.fchmod(fd, 0o600)
        return os.fdopen(fd, "ab")
    except BaseException:
        os.close(fd)
        raise


def _owned(fd: int, path: str, kind: Callable[[int], bool]) -> os.stat_result:
    status = os.fstat(fd)
    if status.st_uid != os.geteuid() or not kind(status.st_mode):
        raise PermissionError(f"{path} is not this user's (uid {os.geteuid()}): owned by uid {status.st_uid}")
    return status
