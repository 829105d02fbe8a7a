"""The admin verbs of the command line against a real admin server on loopback."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route

from gitops.admin.auth.access import AccessPolicy
from gitops.admin.api import build_app
from gitops.cli import main
from tests.support.admin import FakeAgent
from tests.support.listeners import serving

TOKEN = "cli-admin-token"


def agent_at(policy: AccessPolicy):
    agent = FakeAgent()
    app = build_app(agent, sync=lambda: None, webhook_fetch=lambda: None, metrics=lambda: (b"", "text/plain"),
                    policy=policy)
    with serving(app) as port:
        yield f"http://127.0.0.1:{port}", agent


@pytest.fixture
def agent_url():
    yield from agent_at(AccessPolicy.build(None, "127.0.0.1"))


@pytest.fixture
def guarded_agent_url():
    yield from agent_at(AccessPolicy.build(TOKEN.encode(), "127.0.0.1"))


def test_status_prints_a_table(agent_url, capsys) -> None:
    url, _ = agent_url
    assert main(["status", "--agent", url]) == 0
    assert capsys.readouterr().out.startswith("Status:     Progressing")


def test_status_json_is_the_api_answer(agent_url, capsys) -> None:
    url, _ = agent_url
    assert main(["status", "--agent", url, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["branch"] == "main"


def test_suspend_then_sync_is_a_one_line_error(agent_url, capsys) -> None:
    url, agent = agent_url
    assert main(["suspend", "--agent", url]) == 0 and agent.suspended
    assert main(["sync", "--agent", url]) == 1
    assert capsys.readouterr().err.strip().endswith("reconciliation is suspended; resume it first")


def test_rollback_says_where_it_goes_and_what_it_holds(agent_url, capsys) -> None:
    url, _ = agent_url
    assert main(["rollback", "--agent", url, "a" * 40]) == 0
    assert capsys.readouterr().out.strip() == "rolling back to aaaaaaa; holding ccccccc until a newer commit"
    assert main(["rollback", "--agent", url, "0000000"]) == 1
    assert capsys.readouterr().err.strip().endswith("commit 0000000 was never applied here")


def test_history_prints_the_ledger(agent_url, capsys) -> None:
    url, _ = agent_url
    assert main(["history", "--agent", url]) == 0
    assert "c" * 7 in capsys.readouterr().out


def test_no_agent_running_is_a_one_line_error(capsys) -> None:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    assert main(["status", "--agent", f"http://127.0.0.1:{port}"]) == 1
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "is `gitops run` running?" in err


def test_the_token_file_is_sent_as_a_bearer_token(guarded_agent_url, tmp_path: Path) -> None:
    url, agent = guarded_agent_url
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    assert main(["suspend", "--agent", url, "--token-file", str(token_file)]) == 0 and agent.suspended


def test_gitops_token_is_sent_as_a_bearer_token(guarded_agent_url, monkeypatch, capsys) -> None:
    url, _ = guarded_agent_url
    monkeypatch.setenv("GITOPS_TOKEN", TOKEN)
    assert main(["status", "--agent", url, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["branch"] == "main"


def test_without_the_token_is_a_one_line_error_naming_where_it_comes_from(guarded_agent_url, monkeypatch, capsys) -> None:
    url, agent = guarded_agent_url
    monkeypatch.delenv("GITOPS_TOKEN", raising=False)
    assert main(["suspend", "--agent", url]) == 1
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "--token-file or GITOPS_TOKEN" in err
    assert not agent.suspended


def test_a_missing_token_file_is_a_one_line_error(agent_url, tmp_path: Path, capsys) -> None:
    url, _ = agent_url
    assert main(["status", "--agent", url, "--token-file", str(tmp_path / "nope")]) == 1
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "--token-file" in err and "nope" in err


def test_a_status_answer_that_is_no_agent_status_is_a_one_line_error(capsys) -> None:
    async def not_a_status(request):
        return JSONResponse({"status": "Fine", "conditions": "none"})

    with serving(Starlette(routes=[Route("/status", not_a_status)])) as port:
        assert main(["status", "--agent", f"http://127.0.0.1:{port}"]) == 1
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "not an agent status" in err
