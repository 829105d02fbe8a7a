"""Logs are one line per event, with commit and backend fields, as text or JSON."""

from __future__ import annotations

import io
import json
import logging
import re
from collections.abc import Iterator

import pytest

from gitops.loop.ticks import TickReport, Trigger, progress_line, reconcile_event
from gitops.process.logs import configure_logging, event_fields, with_fields
from gitops.reconcile.applying import ApplyResult, Progress, ProgressKind
from gitops.reconcile.outcomes import HistoryEntry, Outcome
from gitops.reconcile.plans import Action, ActionKind, Plan
from gitops.sources.source import Revision


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


def test_text_format_is_the_console_look_time_then_message(restore_root_logging) -> None:
    out = emit("text", extra={"commit": "abc123", "backend": "echo-v1"})
    assert re.fullmatch(r"\d\d:\d\d:\d\d applied commit\n", out)


def test_text_format_shows_errors_as_indented_lines_under_the_event(restore_root_logging) -> None:
    out = emit("text", extra={"errors": ["deployments/echo.toml:24:11: traffic names undefined backend 'x'"]})
    assert out.splitlines()[1] == "    deployments/echo.toml:24:11: traffic names undefined backend 'x'"


def test_text_format_names_the_level_of_warnings_and_the_logger_of_libraries(restore_root_logging) -> None:
    stream = io.StringIO()
    configure_logging("text", logging.INFO, stream=stream)
    logging.getLogger("gitops.agent").error("controller unavailable: gone")
    logging.getLogger("somelib.io").warning("slow")
    first, second = stream.getvalue().splitlines()
    assert first.endswith(" error: controller unavailable: gone")
    assert second.endswith(" warning: somelib.io: slow")


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
        assert "RuntimeError" in out


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


SHA = "3f2a9c1" + "0" * 33
REVISION = Revision(sha=SHA, tree="t" * 40, branch="main", commit_time=0.0, author_time=0.0, author="a", summary="s")


def entry(result: Outcome, *, actions: int = 0, plan: str = "No changes.", errors: tuple[str, ...] = ()) -> HistoryEntry:
    return HistoryEntry(commit=SHA, branch="main", author_time=0.0, summary="s", started_at=0.0, finished_at=1.0,
                        result=result, plan_summary=plan, actions=actions, errors=errors, id=1)


def action(name: str, kind: ActionKind = ActionKind.DELETE_BACKEND) -> Action:
    return Action(kind=kind, name=name)


def plan_of(*names: str) -> Plan:
    return Plan(actions=tuple(action(n) for n in names))


def report(duration_s: float, plan: Plan | None = None, failed: Action | None = None) -> TickReport:
    applied = None
    if failed is not None:
        applied = ApplyResult(Outcome.FAILED, failed_action=failed, error="x")
    return TickReport(triggers=frozenset({Trigger.POLL}), full=False, started_at=0.0, duration_s=duration_s,
                      revision=REVISION, attempted=True, plan=plan, applied=applied)


def test_reconcile_line_reads_commit_result_duration_and_plan() -> None:
    text, fields = reconcile_event(report(4.8123, plan_of("echo-v1")),
                                   entry(Outcome.APPLIED, actions=1, plan="Plan: 0 to delete."))
    assert text == "3f2a9c1 applied in 4.81s — Plan: 0 to delete."
    assert fields == {"commit": "3f2a9c1", "result": "applied", "duration_s": 4.812, "plan": "Plan: 0 to delete.",
                      "actions": 1, "backend": "echo-v1"}


def test_reconcile_event_without_changes_carries_no_plan_or_backend() -> None:
    text, fields = reconcile_event(report(0.02), entry(Outcome.NOOP))
    assert text == "3f2a9c1 noop in 0.02s"
    assert fields == {"commit": "3f2a9c1", "result": "noop", "duration_s": 0.02}


def test_a_failed_apply_names_the_backend_whose_action_failed() -> None:
    error = "update backend echo-v2 (rolling restart): replica failed: create backend echo-v1 raised"
    failed = action("echo-v2", ActionKind.UPDATE_BACKEND)
    _, fields = reconcile_event(report(3.0, plan_of("echo-v1", "echo-v2"), failed=failed),
                                entry(Outcome.FAILED, actions=2, plan="p", errors=(error,)))
    assert fields["backend"] == "echo-v2" and fields["errors"] == [error]


def test_a_failed_endpoint_action_names_the_backends_changed() -> None:
    failed = action("e", ActionKind.UPDATE_ENDPOINT)
    _, fields = reconcile_event(report(3.0, plan_of("b"), failed=failed),
                                entry(Outcome.FAILED, actions=2, plan="p", errors=("update endpoint e: x",)))
    assert fields["backend"] == "b"


def test_a_reconcile_changing_several_backends_lists_them() -> None:
    _, fields = reconcile_event(report(1.0, plan_of("b", "a")), entry(Outcome.APPLIED, actions=2, plan="p"))
    assert fields["backends"] == ["a", "b"] and "backend" not in fields


def test_progress_lines_carry_the_commit_and_the_backends_waited_for() -> None:
    waiting = Progress(ProgressKind.WAITING, (Action(kind=ActionKind.UPDATE_BACKEND, name="echo-v2", restarts=True),))
    text, fields = progress_line("3f2a9c1", waiting)
    assert text == "3f2a9c1 … waiting for update backend echo-v2 (rolling restart)"
    assert fields == {"commit": "3f2a9c1", "backend": "echo-v2"}
    two = Progress(ProgressKind.WAITING, (action("a", ActionKind.CREATE_BACKEND), action("b", ActionKind.CREATE_BACKEND)))
    _, several = progress_line("3f2a9c1", two)
    assert several["backends"] == ["a", "b"]


def test_a_progress_line_for_a_slow_goal_says_how_long_it_took() -> None:
    done = Progress(ProgressKind.DONE, (action("a", ActionKind.CREATE_BACKEND),), elapsed_s=12.34)
    assert progress_line("3f2a9c1", done) == ("3f2a9c1 … create backend a: done in 12.3 s",
                                              {"commit": "3f2a9c1", "backend": "a"})


def test_a_reconcile_event_in_json_is_one_object_with_its_fields(restore_root_logging) -> None:
    stream = io.StringIO()
    configure_logging("json", logging.INFO, stream=stream)
    text, fields = reconcile_event(report(0.04), entry(Outcome.INVALID, errors=("a.toml:1:1: bad",)))
    logging.getLogger("gitops.agent").info(text, extra=fields)
    event = json.loads(stream.getvalue())
    assert (event["commit"], event["result"], event["duration_s"]) == ("3f2a9c1", "invalid", 0.04)
    assert event["errors"] == ["a.toml:1:1: bad"]
