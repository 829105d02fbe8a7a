"""Control characters and undecodable bytes from a repository never reach a
terminal raw (row 13): spec errors, the CLI and both log formats escape them;
a file name that is not UTF-8 gets its error like any other file."""

from __future__ import annotations

import json
import logging
import os
import re
from pathlib import Path

import pytest

from gitops.cli import main
from gitops.process.logs import JsonFormatter, TextFormatter
from gitops.sources.trees import MemoryTree
from gitops.specs.loading import Loader
from tests.conftest import GitRepo

ECHO_PY = "class Echo:\n    def __call__(self, request):\n        return 'hi'\n"
# What a terminal must never receive from a repository: C0/C1 controls, DEL,
# bidi overrides and isolates, line separators, lone surrogates.
RAW = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\u2028\u2029\ud800-\udfff]")


def spec_errors(toml: str) -> list[str]:
    tree = MemoryTree({"apps/echo.py": ECHO_PY, "deployments/echo.toml": toml})
    return [str(error) for error in Loader().load_tree(tree).errors]


def test_an_escape_sequence_in_a_key_is_shown_escaped() -> None:
    toml = '[backends.echo]\nimport_path = "apps.echo:Echo"\n"x\\u001b[2J\\u001b[31m" = 1\n'
    assert spec_errors(toml) == ["deployments/echo.toml:3:1: backends.echo: unknown key 'x\\x1b[2J\\x1b[31m'"]


def test_a_bidi_override_and_a_newline_in_a_backend_name_are_shown_escaped() -> None:
    toml = (
        '[backends.echo]\nimport_path = "apps.echo:Echo"\n\n'
        '[endpoints.e]\nroute = "/e"\ntraffic = { "echo\\u202e\\nFORGED" = 1.0 }\n'
    )
    lines = spec_errors(toml)
    assert "deployments/echo.toml:6:13: endpoints.e.traffic: backend 'echo\\u202e\\nFORGED' is not defined" in lines
    assert not any(RAW.search(line) for line in lines)


def record(message: str, **fields: object) -> logging.LogRecord:
    event = logging.LogRecord("gitops.agent", logging.ERROR, __file__, 1, message, (), None)
    event.__dict__.update(fields)
    return event


def test_the_text_log_escapes_messages_and_error_lines() -> None:
    event = record("c0ffee1 invalid \x1b]0;owned\x07", errors=["deployments/\udcff.toml:1:1: key 'a\u202eb'"])
    lines = TextFormatter().format(event).split("\n")
    assert lines[0].endswith("error: c0ffee1 invalid \\x1b]0;owned\\x07")
    assert lines[1] == "    deployments/\\xff.toml:1:1: key 'a\\u202eb'"


def test_the_json_log_stays_valid_keeps_the_values_and_escapes_every_unsafe_character() -> None:
    message, error = "invalid \x1b[2J\u2028next", "deployments/\udcff.toml: \x9b"
    line = JsonFormatter().format(record(message, errors=[error]))
    assert not RAW.search(line)
    event = json.loads(line)
    assert (event["msg"], event["errors"]) == (message, [error])
    line.encode("utf-8")  # printable on any UTF-8 stream


def test_validate_reports_a_file_whose_name_is_not_utf8(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "deployments").mkdir()
    with open(os.path.join(os.fsencode(tmp_path), b"deployments", b"bad\xff.toml"), "w") as file:
        file.write("[backends.x]\nimport_path = 1\n")
    code = main(["validate", str(tmp_path / "deployments"), "--root", str(tmp_path)])
    captured = capsys.readouterr()
    assert code == 1
    assert captured.err.splitlines() == ["deployments/bad\\xff.toml:2:15: backends.x.import_path: must be a string (got 1)"]


def test_a_usage_error_naming_a_path_with_control_characters_is_escaped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "dep\x1b[2Jloyments"
    assert main(["validate", str(missing), "--root", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "dep\\x1b[2Jloyments does not exist" in err and not RAW.search(err.rstrip("\n"))


def test_an_error_line_escaped_once_is_logged_unchanged() -> None:
    [line] = spec_errors('[backends.echo]\nimport_path = "apps.echo:Echo"\n"x\\u001b" = 1\n')
    logged = TextFormatter().format(record("c0ffee1 invalid", errors=[line])).split("\n")[1]
    assert logged == f"    {line}"


def test_row10_gitops_plan_escapes_values_from_the_repository(
    repo: GitRepo, capsys: pytest.CaptureFixture[str]
) -> None:
    # JSON keeps C1 controls and bidi marks as they are; the plan's text must not.
    repo.write("apps/__init__.py", "")
    repo.write("apps/echo.py", ECHO_PY)
    spec = '[backends.echo]\nimport_path = "apps.echo:Echo"\nuser_config = {{ banner = "{}" }}\n'
    repo.write("deployments/echo.toml", spec.format("plain"))
    before = repo.commit("plain user_config")
    repo.write("deployments/echo.toml", spec.format("\\u009b2J\\u202eevil"))
    head = repo.commit("hostile user_config")
    assert main(["plan", "--from", before, "--to", head, "--repo", str(repo.root)]) in (0, 2)
    out = capsys.readouterr().out
    assert "banner" in out and not RAW.search(out.replace("\n", "")), out
    assert "\\x9b2J\\u202eevil" in out
