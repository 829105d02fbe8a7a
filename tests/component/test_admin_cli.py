"""The admin verbs of the command line against a real admin server on loopback."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import threading
from collections.abc import Iterator

import pytest
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route

from gitops.admin import build_app, server
from gitops.cli import main
from tests.component.test_admin import FakeAgent


@contextlib.contextmanager
def serving(app: Starlette) -> Iterator[str]:
    """`app` on a real loopback port, for as long as the block runs; yields its URL."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    uvicorn_server = server(app, "127.0.0.1", 0)
    thread = threading.Thread(target=lambda: asyncio.run(uvicorn_server.serve(sockets=[sock])), daemon=True)
    thread.start()
    try:
        while not uvicorn_server.started:
            thread.join(0.01)
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        uvicorn_server.should_exit = True
        thread.join(5)
        sock.close()


@pytest.fixture
def agent_url():
    agent = FakeAgent()
    app = build_app(agent, sync=lambda: None, webhook_fetch=lambda: None, metrics=lambda: (b"", "text/plain"))
    with serving(app) as url:
        yield url, agent


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


def test_a_status_answer_that_is_no_agent_status_is_a_one_line_error(capsys) -> None:
    async def not_a_status(request):
        return JSONResponse({"status": "Fine", "conditions": "none"})

    with serving(Starlette(routes=[Route("/status", not_a_status)])) as url:
        assert main(["status", "--agent", url]) == 1
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "not an agent status" in err
