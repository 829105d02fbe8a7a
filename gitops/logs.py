"""Structured logs: one line per event, as text for people or JSON for machines.

Owned here: the two line formats behind `gitops run --log-format text|json`
and how an event carries fields. Fields are passed with the standard
`extra=` argument (or bound once with `with_fields`), e.g.

    log.info("applied", extra={"commit": sha, "backend": "echo-v1"})

and every non-standard attribute of the record becomes a field. Not here:
what is logged when (each module logs its own events).

One line per event holds even for exceptions: text escapes the traceback's
newlines, JSON carries it in the `exc` field.
"""

from __future__ import annotations

import enum
import json
import logging
import sys
from datetime import datetime, timezone
from typing import Any, MutableMapping, TextIO

__all__ = ["LogFormat", "configure_logging", "with_fields", "TextFormatter", "JsonFormatter"]

# Attributes every LogRecord has; anything else on a record came from `extra=`.
_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {
    "message",
    "asctime",
    "taskName",
}


class LogFormat(enum.StrEnum):
    TEXT = "text"
    JSON = "json"


def event_fields(record: logging.LogRecord) -> dict[str, Any]:
    """The fields an event was logged with, in the order they were given.

    Underscored attributes are left out: libraries add private ones to every
    record (Ray's log-record factory adds `_ray_timestamp_ns` once imported).
    """
    return {
        key: value
        for key, value in vars(record).items()
        if key not in _STANDARD and not key.startswith("_")
    }


def _timestamp(record: logging.LogRecord) -> str:
    moment = datetime.fromtimestamp(record.created, tz=timezone.utc)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _one_line(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r")


def _text_value(value: Any) -> str:
    text = _one_line(value if isinstance(value, str) else json.dumps(value, default=str))
    needs_quotes = not text or any(c in text for c in ' "=')
    return json.dumps(text) if needs_quotes else text


class TextFormatter(logging.Formatter):
    """`TIME LEVEL LOGGER: message key=value ...`, for reading in a terminal."""

    def format(self, record: logging.LogRecord) -> str:
        fields = " ".join(f"{k}={_text_value(v)}" for k, v in event_fields(record).items())
        line = f"{_timestamp(record)} {record.levelname:<7} {record.name}: {record.getMessage()}"
        line = _one_line(line) + (f" {fields}" if fields else "")
        if record.exc_info:
            line += " exc=" + json.dumps(_one_line(self.formatException(record.exc_info)))
        return line


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ts, level, logger, msg, the event's fields, exc."""

    def format(self, record: logging.LogRecord) -> str:
        event: dict[str, Any] = {
            "ts": _timestamp(record),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        event.update(event_fields(record))
        if record.exc_info:
            event["exc"] = self.formatException(record.exc_info)
        return json.dumps(event, default=str, ensure_ascii=False)


def configure_logging(
    fmt: str = LogFormat.TEXT, level: int | str = logging.INFO, stream: TextIO | None = None
) -> logging.Handler:
    """Send every log record of the process to `stream` (stderr) in `fmt`.

    Replaces the root logger's handlers, so calling it twice does not print
    each event twice. Returns the handler (tests read or remove it).
    """
    formatter = JsonFormatter() if LogFormat(fmt) is LogFormat.JSON else TextFormatter()
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    return handler


class _FieldsAdapter(logging.LoggerAdapter):
    """Adds bound fields to every event; fields given per call win."""

    def process(self, msg: Any, kwargs: MutableMapping[str, Any]) -> tuple[Any, MutableMapping[str, Any]]:
        kwargs["extra"] = {**(self.extra or {}), **(kwargs.get("extra") or {})}
        return msg, kwargs


def with_fields(logger: logging.Logger, **fields: Any) -> logging.LoggerAdapter:
    """A logger whose every event carries `fields` (e.g. commit=..., backend=...)."""
    return _FieldsAdapter(logger, fields)
