"""Logs are one line per event, with commit and backend fields, as text or JSON."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest

from gitops.logs import configure_logging, event_fields, with_fields


@pytest.fixture
def restore_root_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for handler in list(root.handlers):
        root.removeHandler(handler)
    for handler in handlers:
        root.addHandler(handler)
    root.setLevel(level)


def emit(fmt: str, log: logging.Logger | logging.LoggerAdapter | None = None, **kwargs) -> str:
    stream = io.StringIO()
    configure_logging(fmt, logging.INFO, stream=stream)
    (log or logging.getLogger("gitops.agent")).info("applied commit", **kwargs)
    return stream.getvalue()


def test_json_format_writes_one_object_per_event_with_its_fields(restore_root_logging) -> None:
    out = emit("json", extra={"commit": "abc123", "backend": "echo-v1"})
    event = json.loads(out)
    assert out.count("\n") == 1
    assert event["msg"] == "applied commit" and event["level"] == "info"
    assert event["commit"] == "abc123" and event["backend"] == "echo-v1"
    assert event["logger"] == "gitops.agent" and event["ts"].endswith("Z")


def test_text_format_shows_the_message_then_key_value_fields(restore_root_logging) -> None:
    out = emit("text", extra={"commit": "abc123", "backend": "echo-v1"})
    assert out.rstrip("\n").endswith("gitops.agent: applied commit commit=abc123 backend=echo-v1")
    assert " INFO " in out


def test_text_values_with_spaces_are_quoted_so_fields_stay_parseable(restore_root_logging) -> None:
    out = emit("text", extra={"error": "import failed: no module x"})
    assert 'error="import failed: no module x"' in out


def test_an_exception_stays_on_one_line_in_both_formats(restore_root_logging) -> None:
    for fmt in ["text", "json"]:
        stream = io.StringIO()
        configure_logging(fmt, logging.INFO, stream=stream)
        try:
            raise RuntimeError("boom\nsecond line")
        except RuntimeError:
            logging.getLogger("gitops.agent").exception("apply failed", extra={"commit": "c1"})
        out = stream.getvalue()
        assert out.count("\n") == 1, fmt
        assert "RuntimeError" in out and "c1" in out


def test_bound_fields_are_on_every_event_and_per_call_fields_win(restore_root_logging) -> None:
    log = with_fields(logging.getLogger("gitops.agent"), commit="abc", backend="b1")
    event = json.loads(emit("json", log, extra={"backend": "b2"}))
    assert event["commit"] == "abc" and event["backend"] == "b2"


def test_configuring_twice_prints_each_event_once(restore_root_logging) -> None:
    stream = io.StringIO()
    configure_logging("text", logging.INFO, stream=stream)
    configure_logging("text", logging.INFO, stream=stream)
    logging.getLogger("gitops").info("once")
    assert stream.getvalue().count("once") == 1


def test_an_unknown_format_is_refused() -> None:
    with pytest.raises(ValueError):
        configure_logging("xml")


def test_events_below_the_level_are_not_written(restore_root_logging) -> None:
    stream = io.StringIO()
    configure_logging("json", "WARNING", stream=stream)
    logging.getLogger("gitops").info("quiet")
    assert stream.getvalue() == ""


def test_private_attributes_added_by_libraries_are_not_event_fields() -> None:
    record = logging.LogRecord("gitops.agent", logging.INFO, __file__, 1, "applied", (), None)
    record._ray_timestamp_ns = 1  # what Ray's record factory adds
    record.commit = "abc123"
    assert event_fields(record) == {"commit": "abc123"}
