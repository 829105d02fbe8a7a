"""The admin verbs in scripts: finding the agent without flags, exit codes, waiting, closed pipes."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from gitops.admin import address as agent_address
from gitops.admin.auth.access import AccessPolicy
from gitops.admin.api import build_app, server
from gitops.cli import main
from gitops.reconcile.outcomes import HistoryEntry, Outcome
from gitops.status.rollup import StatusFacts, roll_up
from tests.support.admin import FakeAgent
from tests.support.listeners import serving

APPLIED = HistoryEntry(commit="c" * 40, branch="main", author_time=1.0, summary="s", started_at=2.0,
                       finished_at=3.0, result=Outcome.APPLIED)
FAILED = HistoryEntry(commit="d" * 40, branch="main", author_time=1.0, summary="s", started_at=2.0,
                      finished_at=3.0, result=Outcome.INVALID, errors=("deployments/a.toml:1:1: bad",))


class SettableAgent(FakeAgent):
    """An agent whose last attempt the test sets: None (first reconcile pending), applied, or invalid."""

    def __init__(self) -> None:
        super().__init__()
        self.last: HistoryEntry | None = None

    def status(self):
        applied = self.last if self.last is not None and self.last.result is Outcome.APPLIED else None
        return roll_up(StatusFacts(repo="/r", branch="main", path="deployments", suspended=self.suspended,
                                   last_attempt=self.last, last_applied=applied))


@pytest.fixture
def agent():
    fake = SettableAgent()
    app = build_app(fake, sync=lambda: None, webhook_fetch=lambda: None, metrics=lambda: (b"", "text/plain"),
                    policy=AccessPolicy.build(None, "127.0.0.1"))
    with serving(app) as port:
        yield f"http://127.0.0.1:{port}", fake


@pytest.fixture
def nowhere(monkeypatch, tmp_path: Path) -> Path:
    """No GITOPS_AGENT and a working directory with no agent address above it."""
    monkeypatch.delenv("GITOPS_AGENT", raising=False)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def free_url() -> str:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    return f"http://127.0.0.1:{port}"


# --- finding the agent ------------------------------------------------------------


def test_gitops_agent_names_the_agent_for_every_client_command(agent, nowhere, monkeypatch, capsys) -> None:
    url, fake = agent
    monkeypatch.setenv("GITOPS_AGENT", url)
    assert main(["suspend"]) == 0 and fake.suspended
    assert main(["status"]) == 0
    assert "Status:     Suspended" in capsys.readouterr().out


def test_the_agent_flag_wins_over_gitops_agent(agent, nowhere, monkeypatch) -> None:
    url, fake = agent
    monkeypatch.setenv("GITOPS_AGENT", free_url())
    assert main(["suspend", "--agent", url]) == 0 and fake.suspended


def test_inside_the_repository_the_address_the_agent_wrote_is_found_from_any_subdirectory(
    agent, nowhere, monkeypatch
) -> None:
    url, fake = agent
    state = nowhere / ".gitops-state"
    state.mkdir(mode=0o700)
    agent_address.write(state, url)
    (nowhere / "deployments" / "apps").mkdir(parents=True)
    monkeypatch.chdir(nowhere / "deployments" / "apps")
    assert main(["suspend"]) == 0 and fake.suspended


def test_an_address_file_others_may_write_is_not_trusted(agent, nowhere) -> None:
    url, _ = agent
    state = nowhere / ".gitops-state"
    state.mkdir()
    agent_address.write(state, url)
    state.chmod(0o777)  # as a checkout carrying such a file might have it
    found = agent_address.resolve(None, {}, nowhere)
    assert found == agent_address.AgentAddress(agent_address.DEFAULT_AGENT, "the default")


def test_the_address_file_holds_the_url_only_and_is_private(tmp_path: Path) -> None:
    path = agent_address.write(tmp_path, "http://127.0.0.1:18001")
    assert path.read_text() == "http://127.0.0.1:18001\n"
    assert os.stat(path).st_mode & 0o077 == 0


def test_a_wildcard_admin_host_is_dialled_on_loopback() -> None:
    assert agent_address.connectable_url("0.0.0.0", 18001) == "http://127.0.0.1:18001"
    assert agent_address.connectable_url("::", 18001) == "http://[::1]:18001"
    assert agent_address.connectable_url("10.0.0.5", 8001) == "http://10.0.0.5:8001"


def test_no_agent_answering_names_the_flag_the_variable_and_where_the_address_came_from(
    nowhere, monkeypatch, capsys
) -> None:
    monkeypatch.setenv("GITOPS_AGENT", free_url())
    assert main(["history"]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "from $GITOPS_AGENT" in err and "--agent URL or GITOPS_AGENT=URL" in err


# --- status --exit-code ------------------------------------------------------------


def test_status_exit_code_is_0_when_synced_and_2_otherwise(agent, capsys) -> None:
    url, fake = agent
    assert main(["status", "--agent", url, "--exit-code"]) == 2  # waiting for the first reconcile
    fake.last = APPLIED
    assert main(["status", "--agent", url, "--exit-code"]) == 0
    fake.last = FAILED
    assert main(["status", "--agent", url, "--exit-code"]) == 2
    assert main(["status", "--agent", url]) == 0  # without the flag, a status shown is a success
    assert "Failed (ValidationFailed" in capsys.readouterr().out


def test_status_exit_code_is_1_when_no_agent_answers(nowhere) -> None:
    assert main(["status", "--agent", free_url(), "--exit-code"]) == 1


# --- wait ---------------------------------------------------------------------------


def test_wait_returns_once_the_agent_is_synced(agent, capsys) -> None:
    url, fake = agent
    timer = threading.Timer(0.6, lambda: setattr(fake, "last", APPLIED))
    timer.start()
    started = time.monotonic()
    try:
        assert main(["wait", "--agent", url, "--timeout", "20"]) == 0
    finally:
        timer.cancel()
    assert 0.5 <= time.monotonic() - started < 10
    assert capsys.readouterr().out.startswith("Synced (ReconciliationSucceeded")


def test_wait_gives_up_after_its_timeout_with_exit_2_and_the_status_it_saw(agent, capsys) -> None:
    url, _ = agent
    assert main(["wait", "--agent", url, "--timeout", "0.3"]) == 2
    err = capsys.readouterr().err
    assert "not Synced after 0.3s: Progressing" in err


def test_wait_stops_at_once_when_only_a_new_commit_can_help(agent, capsys) -> None:
    url, fake = agent
    fake.last = FAILED
    started = time.monotonic()
    assert main(["wait", "--agent", url, "--timeout", "60"]) == 2
    assert time.monotonic() - started < 5
    assert "only a new commit changes that" in capsys.readouterr().err


def test_wait_for_another_status(agent, capsys) -> None:
    url, fake = agent
    fake.suspended = True
    assert main(["wait", "--agent", url, "--for", "suspended", "--timeout", "5"]) == 0


def test_wait_for_an_unknown_status_is_a_usage_error(agent, capsys) -> None:
    url, _ = agent
    assert main(["wait", "--agent", url, "--for", "happy"]) == 2
    assert "--for happy: not a status the agent shows" in capsys.readouterr().err


def test_wait_waits_for_an_agent_that_is_not_up_yet(nowhere) -> None:
    fake = SettableAgent()
    fake.last = APPLIED
    app = build_app(fake, sync=lambda: None, webhook_fetch=lambda: None, metrics=lambda: (b"", "text/plain"),
                    policy=AccessPolicy.build(None, "127.0.0.1"))
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))  # bound, not listening yet: connections are refused
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    late = server(app, "127.0.0.1", 0)

    def start_late() -> None:
        time.sleep(1.0)
        sock.listen()
        asyncio.run(late.serve(sockets=[sock]))

    threading.Thread(target=start_late, daemon=True).start()
    try:
        assert main(["wait", "--agent", url, "--timeout", "30"]) == 0
    finally:
        late.should_exit = True
        time.sleep(0.2)
        sock.close()


def test_wait_for_an_agent_that_never_comes_is_the_one_line_connection_error(nowhere, capsys) -> None:
    assert main(["wait", "--agent", free_url(), "--timeout", "0.5"]) == 1
    assert "is `gitops run` running?" in capsys.readouterr().err


# --- pipes --------------------------------------------------------------------------


def test_output_to_a_closed_pipe_ends_quietly(agent) -> None:
    url, _ = agent
    code = "import sys; from gitops.cli import main; sys.exit(main(sys.argv[1:]))"
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader has gone, as `head -1` goes after its line
    try:
        writer = subprocess.run([sys.executable, "-c", code, "history", "--agent", url], stdout=write_end,
                                stderr=subprocess.PIPE, timeout=60)
    finally:
        os.close(write_end)
    assert writer.stderr == b""
    assert writer.returncode == 141


def test_wait_for_a_revision_waits_until_that_commit_is_applied(agent, capsys) -> None:
    url, fake = agent
    fake.last = APPLIED  # Synced, but with another commit than the one asked for
    newer = HistoryEntry(commit="e" * 40, branch="main", author_time=1.0, summary="s", started_at=2.0,
                         finished_at=3.0, result=Outcome.APPLIED)
    assert main(["wait", "--agent", url, "--revision", "eeeeeee", "--timeout", "0.5"]) == 2
    assert "not Synced with eeeeeee applied after 0.5s" in capsys.readouterr().err
    timer = threading.Timer(0.5, lambda: setattr(fake, "last", newer))
    timer.start()
    try:
        assert main(["wait", "--agent", url, "--revision", "eeeeeee", "--timeout", "20"]) == 0
    finally:
        timer.cancel()
