"""A handler's exception as the status shows it: type, message and the innermost frame of the user's code."""

from __future__ import annotations

import json
import os

from vocabulary.control.status import HandlerError


def raise_from_library() -> None:
    json.loads("{not json")


def test_the_innermost_frame_under_the_working_dir_is_named_relative_to_it() -> None:
    try:
        raise_from_library()
    except ValueError as error:
        found = HandlerError.of(error, "echo#1", 5.0, os.path.dirname(os.path.dirname(__file__)))
    line = raise_from_library.__code__.co_firstlineno + 1
    assert found.where == f"pure/test_handler_errors.py:{line}"  # not json's own frames
    assert found.type == "JSONDecodeError" and found.message.startswith("Expecting property name")
    assert found.describe() == f"JSONDecodeError: {found.message} at pure/test_handler_errors.py:{line}"


def test_outside_the_working_dir_the_innermost_frame_is_named_as_it_is() -> None:
    try:
        raise_from_library()
    except ValueError as error:
        found = HandlerError.of(error, "echo#1", 5.0, "/nowhere")
    assert found.where.endswith(".py:" + found.where.rsplit(":", 1)[1]) and "json" in found.where
