"""`gitops status` and `gitops history` escape remote text (issue 27 row 10).

A replica's exception text, a git error and a history entry's error come
from code and remotes a committer controls: printed raw, an escape sequence
would retitle (`ESC ] 0 ;`) or clear (`ESC [ 2 J`, the C1 `CSI`) the
operator's terminal. A real admin-shaped server on loopback answers with
such text; the CLI's tables must show it escaped, and `--json` stays JSON.
"""

from __future__ import annotations

import json
from typing import Any, Iterator

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from gitops.cli import main
from gitops.status.rollup import StatusFacts, roll_up
from tests.support.listeners import serving

RETITLE = "\x1b]0;owned\x07"
CLEAR = "\x1b[2J\x9b3J"
HOSTILE = f"ValueError: boom{RETITLE}{CLEAR}\u202eevil"
RAW = ("\x1b", "\x07", "\x9b", "\u202e")


def _status() -> dict[str, Any]:
    data = roll_up(StatusFacts(repo="/r", branch="main", path="deployments")).model_dump(mode="json")
    data["errors"] = [f"git: {HOSTILE}", f"first line\nsecond{RETITLE}"]
    data["backends"] = {"echo": {"version": "v" * 12, "target_replicas": 1, "ready": 0,
                                 "replicas": {"FAILED": 1}, "last_error": f"Traceback\n  {HOSTILE}"}}
    return data


def _history() -> dict[str, Any]:
    return {"entries": [{"commit": "c" * 40, "started_at": 2.0, "result": "failed", "duration_s": 1.0,
                         "plan_summary": f"1 to create{CLEAR}", "errors": [HOSTILE]}]}


@pytest.fixture
def hostile_agent() -> Iterator[str]:
    async def status(request: Request) -> JSONResponse:
        return JSONResponse(_status())

    async def history(request: Request) -> JSONResponse:
        return JSONResponse(_history())

    with serving(Starlette(routes=[Route("/status", status), Route("/history", history)])) as port:
        yield f"http://127.0.0.1:{port}"


def assert_escaped(out: str) -> None:
    for char in RAW:
        assert char not in out, f"{char!r} reached the terminal raw"
    assert "\\x1b]0;owned\\x07" in out and "\\x9b3J" in out and "\\u202eevil" in out


def test_row10_status_escapes_replica_exceptions_and_errors(hostile_agent: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["status", "--agent", hostile_agent]) == 0
    out = capsys.readouterr().out
    assert_escaped(out)
    assert "echo" in out and "Traceback" in out


def test_row10_a_multi_line_error_keeps_its_lines(hostile_agent: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["status", "--agent", hostile_agent]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "  first line" in lines and "  second\\x1b]0;owned\\x07" in lines


def test_row10_history_escapes_entry_errors(hostile_agent: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["history", "--agent", hostile_agent]) == 0
    out = capsys.readouterr().out
    assert_escaped(out)
    assert "c" * 7 in out


def test_row10_json_output_stays_json_and_escaped(hostile_agent: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["status", "--agent", hostile_agent, "--json"]) == 0
    out = capsys.readouterr().out
    for char in RAW:
        assert char not in out
    assert json.loads(out)["errors"][0] == f"git: {HOSTILE}"
