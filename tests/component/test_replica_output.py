"""`gitops logs`: a replica reads its own output files back; the admin API and the CLI carry it."""

from __future__ import annotations

from pathlib import Path

import pytest

from gitops.admin.auth.access import AccessPolicy
from gitops.admin.api import build_app
from gitops.cli import main
from gitops.commands.remote import parse_duration
from gitops.errors import UsageError
from gitops.redaction import MASK, register_secret
from replica.own_output import TAIL_BYTES, OwnOutput
from tests.support.admin import FakeAgent
from tests.support.listeners import serving
from vocabulary.replicas.replica_output import OutputCursor, ReplicaOutput


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path]:
    out, err = tmp_path / "worker.out", tmp_path / "worker.err"
    out.write_text(":job_id:01000000\n:actor_name:Replica\nloading model\n")
    err.write_text(":job_id:01000000\n:actor_name:Replica\n")
    return out, err


def test_a_read_has_the_users_lines_without_rays_markers_and_a_cursor_to_go_on_from(files) -> None:
    out, err = files
    own = OwnOutput(str(out), str(err))
    first = own.read("boom#1", "node", None, None)
    assert (first.out, first.err) == (("loading model",), ())
    with err.open("a") as file:
        file.write("Traceback (most recent call last):\nZeroDivisionError: division by zero\nhalf a li")
    later = own.read("boom#1", "node", None, first.cursor)
    assert later.err == ("Traceback (most recent call last):", "ZeroDivisionError: division by zero")
    assert own.read("boom#1", "node", None, later.cursor).err == ()  # the unfinished line waits


def test_since_starts_where_the_files_ended_at_the_last_mark_before_it(files) -> None:
    out, err = files
    own = OwnOutput(str(out), str(err))
    own.mark(100.0)
    with out.open("a") as file:
        file.write("served a request\n")
    own.mark(110.0)
    assert own.read("r", "n", 105.0, None).out == ("served a request",)
    assert own.read("r", "n", 50.0, None).out == ("loading model", "served a request")


def test_without_a_cursor_or_a_time_a_read_is_the_last_whole_lines(files) -> None:
    out, err = files
    out.write_text("".join(f"line {i}\n" for i in range(5000)))
    lines = OwnOutput(str(out), str(err)).read("r", "n", None, None).out
    assert lines[-1] == "line 4999" and lines[0].startswith("line ") and len("\n".join(lines)) < TAIL_BYTES


def test_output_that_goes_to_no_file_says_so() -> None:
    found = OwnOutput(None, None)
    found._out = found._err = None  # as under a terminal or a pipe
    assert found.read("r", "n", None, None).missing == "its output goes to no file"


@pytest.mark.parametrize(("text", "seconds"), [("90", 90.0), ("30s", 30.0), ("5m", 300.0), ("2h", 7200.0)])
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


def test_a_bad_duration_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="not a duration"):
        parse_duration("soon")


class Replicas:
    """Stands in for the controller: two replicas, one of which cannot answer."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, float | None, dict[str, OutputCursor]]] = []

    async def __call__(self, backend: str, since: float | None, cursors: dict[str, OutputCursor]):
        self.asked.append((backend, since, cursors))
        if backend != "boom":
            raise ValueError(f"unknown backend {backend!r}")
        offset = cursors.get("boom#1", OutputCursor()).err
        err = ("Traceback (most recent call last):", "token=s3cr3t-logs-token") if offset == 0 else ()
        return [
            ReplicaOutput(replica_id="boom#1", node_id="n1", out=("hello",) if offset == 0 else (), err=err,
                          cursor=OutputCursor(out=6, err=60)),
            ReplicaOutput(replica_id="boom#2", missing="ActorDiedError: the actor died"),
        ]


@pytest.fixture
def logs_agent():
    replicas = Replicas()
    app = build_app(FakeAgent(), sync=lambda: None, webhook_fetch=lambda: None, metrics=lambda: (b"", "text/plain"),
                    policy=AccessPolicy.build(None, "127.0.0.1"), replica_output=replicas)
    with serving(app) as port:
        yield f"http://127.0.0.1:{port}", replicas


def test_logs_prints_each_replicas_lines_after_its_id_redacted_and_says_which_could_not_answer(
    logs_agent, capsys
) -> None:
    url, replicas = logs_agent
    register_secret("s3cr3t-logs-token")
    assert main(["logs", "boom", "--agent", url]) == 0
    printed = capsys.readouterr()
    assert printed.out.splitlines() == [
        "boom#1 | hello", "boom#1 | Traceback (most recent call last):", f"boom#1 | token={MASK}",
    ]
    assert printed.err.strip() == "gitops logs: boom#2: ActorDiedError: the actor died"
    assert replicas.asked == [("boom", None, {})]


def test_logs_since_asks_for_what_was_written_in_that_time(logs_agent, capsys) -> None:
    url, replicas = logs_agent
    assert main(["logs", "boom", "--since", "5m", "--agent", url]) == 0
    since = replicas.asked[0][1]
    assert since is not None


def test_logs_of_an_unknown_backend_is_a_one_line_error(logs_agent, capsys) -> None:
    url, _ = logs_agent
    assert main(["logs", "nope", "--agent", url]) == 1
    assert "unknown backend 'nope'" in capsys.readouterr().err


def test_follow_asks_again_from_where_each_replica_left_off(logs_agent, capsys) -> None:
    from gitops.cli import build_parser
    from gitops.commands.remote import logs_command

    url, replicas = logs_agent
    naps: list[float] = []

    def sleep(seconds: float) -> None:
        naps.append(seconds)
        if len(naps) == 2:
            raise KeyboardInterrupt  # Ctrl-C ends following quietly

    assert logs_command(build_parser().parse_args(["logs", "boom", "-f", "--agent", url]), sleep=sleep) == 0
    assert [cursors for _, _, cursors in replicas.asked[1:]] == [{"boom#1": OutputCursor(out=6, err=60)}]
    assert all(since is not None for _, since, _ in replicas.asked[1:])  # new replicas: since following began
    assert capsys.readouterr().out.count("boom#1 | hello") == 1


class Failing:
    """Stands in for the controller of issue 49 row 3: `hello-v1` has one replica running and
    quiet, and two replaced (one failed to start, one died); `gone` was deleted after its replicas
    failed to start; `idle` has no replica."""

    async def __call__(self, backend: str, since: float | None, cursors: dict[str, OutputCursor]):
        start_failed = ReplicaOutput(replica_id="r2", ended="failed to start", err=(
            "RuntimeError: model weights: sha256 mismatch (deployments/hello.py:12)",))
        died = ReplicaOutput(replica_id="r1", ended="died", err=("exit SIGKILL",))
        start_failed = start_failed.model_copy(update={"last_output": (
            "fetching weights with token=s3cr3t-previous-token", "Traceback (most recent call last):")})
        if backend == "hello-v1":
            return [ReplicaOutput(replica_id="r3", node_id="n1"), died, start_failed]
        if backend == "gone":
            return [start_failed]
        if backend == "idle":
            return []
        raise ValueError(f"unknown backend {backend!r}")


@pytest.fixture
def failing_agent():
    app = build_app(FakeAgent(), sync=lambda: None, webhook_fetch=lambda: None, metrics=lambda: (b"", "text/plain"),
                    policy=AccessPolicy.build(None, "127.0.0.1"), replica_output=Failing())
    with serving(app) as port:
        yield f"http://127.0.0.1:{port}"


def test_logs_shows_the_replicas_that_failed_to_start_with_their_errors(failing_agent, capsys) -> None:
    assert main(["logs", "hello-v1", "--since", "5m", "--agent", failing_agent]) == 0
    printed = capsys.readouterr()
    assert printed.out.splitlines() == [
        "r2 | failed to start: RuntimeError: model weights: sha256 mismatch (deployments/hello.py:12)"
    ]
    assert main(["logs", "gone", "--agent", failing_agent]) == 0  # deleted since its commit failed
    assert capsys.readouterr().out.startswith("r2 | failed to start: RuntimeError")


def test_logs_previous_shows_how_each_replaced_replica_ended_and_its_last_lines_redacted(
    failing_agent, capsys
) -> None:
    register_secret("s3cr3t-previous-token")
    assert main(["logs", "hello-v1", "--previous", "--agent", failing_agent]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "r1 | died: exit SIGKILL",  # its process was gone: no last lines were read
        "r2 | failed to start: RuntimeError: model weights: sha256 mismatch (deployments/hello.py:12)",
        f"r2 | fetching weights with token={MASK}",
        "r2 | Traceback (most recent call last):",
    ]


def test_an_empty_answer_says_why(failing_agent, capsys) -> None:
    assert main(["logs", "idle", "--since", "5m", "--agent", failing_agent]) == 1
    printed = capsys.readouterr()
    assert (printed.out, printed.err.strip()) == (
        "", "gitops logs: no replica of idle has run since the controller started (scaled to zero, or none "
        "started yet)",
    )
    assert main(["logs", "idle", "--previous", "--agent", failing_agent]) == 0
    assert capsys.readouterr().err.strip() == (
        "gitops logs: no replica of idle was replaced since the controller started (it keeps the last 100 "
        "replaced); without --previous: the replicas running now"
    )


def test_quiet_replicas_say_so_with_the_window(capsys) -> None:
    async def quiet(backend: str, since: float | None, cursors: dict[str, OutputCursor]):
        return [ReplicaOutput(replica_id="r3", node_id="n1"), ReplicaOutput(replica_id="r4", node_id="n1")]

    app = build_app(FakeAgent(), sync=lambda: None, webhook_fetch=lambda: None, metrics=lambda: (b"", "text/plain"),
                    policy=AccessPolicy.build(None, "127.0.0.1"), replica_output=quiet)
    with serving(app) as port:
        assert main(["logs", "hello-v1", "--since", "5m", "--agent", f"http://127.0.0.1:{port}"]) == 0
    assert capsys.readouterr().err.strip() == "gitops logs: hello-v1: its 2 replicas wrote nothing in the last 5m"
