"""Structured logs: one line per event, as text for people or JSON for machines.

Owned here: the two line formats behind `gitops run --log-format text|json`
and how an event carries fields. Fields are passed with the standard
`extra=` argument (or bound once with `with_fields`), e.g.

    log.info("3f2a9c1 applied in 4.81s", extra={"commit": "3f2a9c1", "result": "applied"})

and every non-standard attribute of the record becomes a field. Not here:
what is logged when (each module logs its own events).

Text is the console people read: `HH:MM:SS message`, so the message must
say everything a person needs; the fields are for machines and are left
out, except `errors`, shown as indented lines under the event (as docs/guides/agent.md
shows them). Warnings and errors say their level, and events of other libraries
their logger. JSON is one object per line with every field; even an
exception stays on its line (text escapes the traceback's newlines, JSON
carries it in the `exc` field). Every record passes `RedactingFilter`
first, so no line carries a URL's credentials or a registered secret, and
both formats escape control characters and undecodable bytes
(`gitops.printable`): a key or file name from a repository never reaches
the terminal raw.
"""

from __future__ import annotations

import enum
import json
import logging
import sys
import time
from datetime import datetime, UTC
from typing import Any, MutableMapping, TextIO

from gitops.printable import printable, printable_json
from gitops.redaction import redact

__all__ = ["LogFormat", "RedactingFilter", "configure_logging", "with_fields", "event_fields", "TextFormatter", "JsonFormatter"]

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
    moment = datetime.fromtimestamp(record.created, tz=UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


class TextFormatter(logging.Formatter):
    """`HH:MM:SS [level: ][logger: ]message`, then `errors` as indented lines."""

    def format(self, record: logging.LogRecord) -> str:
        line = f"{_clock(record)} {_level_prefix(record)}{_logger_prefix(record)}{record.getMessage()}"
        line = printable(line)
        if record.exc_info or record.exc_text:
            line += " " + printable(_exception(self, record))
        errors = getattr(record, "errors", ())
        details = [errors] if isinstance(errors, str) else list(errors or ())
        return "\n".join([line, *(f"    {printable(str(error))}" for error in details)])


def _exception(formatter: logging.Formatter, record: logging.LogRecord) -> str:
    # The text `RedactingFilter` left, else the exception formatted here.
    return record.exc_text or formatter.formatException(record.exc_info)  # type: ignore[arg-type]  # exc_info is set whenever exc_text is not


def _clock(record: logging.LogRecord) -> str:
    # Local time, as on a wall clock: the console is read by the person at it.
    return time.strftime("%H:%M:%S", time.localtime(record.created))


def _level_prefix(record: logging.LogRecord) -> str:
    return f"{record.levelname.lower()}: " if record.levelno >= logging.WARNING else ""


def _logger_prefix(record: logging.LogRecord) -> str:
    # The project's own events speak for themselves; a library's say whose they are.
    own = record.name == "gitops" or record.name.startswith("gitops.")
    return "" if own else f"{record.name}: "


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
        if record.exc_info or record.exc_text:
            event["exc"] = _exception(self, record)
        return printable_json(json.dumps(event, default=str, ensure_ascii=False))


def configure_logging(
    fmt: str = LogFormat.TEXT, level: int | str = logging.INFO, stream: TextIO | None = None
) -> logging.Handler:
    """Send every log record of the process to `stream` (default stderr) in `fmt`.

    Replaces the root logger's handlers, so calling it twice does not print
    each event twice. Returns the handler (tests read or remove it).
    """
    formatter = JsonFormatter() if LogFormat(fmt) is LogFormat.JSON else TextFormatter()
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(formatter)
    handler.addFilter(RedactingFilter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    return handler


class RedactingFilter(logging.Filter):
    """Redacts a record's message, its string fields and its exception text in place."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.msg = redact(record.getMessage())
        record.args = None
        for key, value in event_fields(record).items():
            if isinstance(value, str):
                setattr(record, key, redact(value))
            elif isinstance(value, (list, tuple)):
                setattr(record, key, [redact(item) if isinstance(item, str) else item for item in value])
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact(record.exc_text)
        return True


class _FieldsAdapter(logging.LoggerAdapter):
    """Adds bound fields to every event; fields given per call win."""

    def process(self, msg: Any, kwargs: MutableMapping[str, Any]) -> tuple[Any, MutableMapping[str, Any]]:
        kwargs["extra"] = {**(self.extra or {}), **(kwargs.get("extra") or {})}
        return msg, kwargs


def with_fields(logger: logging.Logger, **fields: Any) -> logging.LoggerAdapter:
    """A logger whose every event carries `fields` (e.g. commit=..., backend=...)."""
    return _FieldsAdapter(logger, fields)
