"""Credentials reach git, and only the remote's host, off every command line (issue 27 rows 5, 6, 8).

Real git against a real git HTTP server on 127.0.0.1 (`git http-backend`
behind basic auth). Each fetch runs `GitSource` in a child Python process,
traced with `strace -f -e execve`, so the argv of every process it starts
(git, git-remote-http, the credential helper's shell, askpass) is seen in
full, however short-lived. Where strace cannot run, every process's
/proc/PID/cmdline is sampled instead, against a server slow enough for
the fetch's git processes to be seen: weaker (a process of a few
milliseconds, as askpass was, can be missed), so run it where strace works. A redirect to another port of 127.0.0.1 poses as
another host: git's credential matching compares scheme, host and port.
Row 8 runs git over a fake `ssh` (a script that records its arguments and
runs the remote command locally) picked the way docs/guides/security.md says, with
`GIT_SSH_COMMAND`.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import GitRepo
from tests.support.gitserver import CommandLines, serving

pytestmark = pytest.mark.real

TOKEN = "ghp-token-5c0e19a7b3d2"
PASSWORD = "pass-word-e41f7a0b9c83"

# Run one GitSource fetch; print {"sha": ...} or {"error": ...} as the last line.
# The URL comes in the environment: on this process's argv it would be in the trace.
_FETCH = """
import json, os, sys
from pathlib import Path
from gitops.errors import SourceError
from gitops.sources.repos import GitSource
try:
    source = GitSource(os.environ.pop("FETCH_URL"), "main", Path(sys.argv[1]), fetch_timeout_s=30)
    print(json.dumps({"sha": source.newest().sha}))
except SourceError as error:
    print(json.dumps({"error": str(error)}))
"""


class Fetched:
    def __init__(self, result: dict[str, str], argvs: list[str]) -> None:
        self.result = result
        self.argvs = argvs  # every execve's argv as strace printed it, or every command line sampled


def fetch(url: str, cache: Path, env: dict[str, str] | None = None, trace: Path | None = None) -> Fetched:
    """One fetch in a child process; with `trace`, the command lines of everything it ran."""
    command = [sys.executable, "-c", _FETCH, str(cache)]
    traced = trace is not None and strace_works()
    if trace is not None and traced:
        command = ["strace", "-f", "-qq", "-e", "trace=execve", "-s", "65536", "-o", str(trace), *command]
    sampler = CommandLines() if trace is not None and not traced else None
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=120,
                              env={**os.environ, **(env or {}), "FETCH_URL": url},
                              cwd=Path(__file__).resolve().parents[2])
    finally:
        sampled = sorted(sampler.stop()) if sampler is not None else []
    assert done.returncode == 0, done.stderr
    argvs = [line for line in trace.read_text().splitlines() if "execve(" in line] if traced and trace else sampled
    return Fetched(json.loads(done.stdout.strip().splitlines()[-1]), argvs)


def strace_works() -> bool:
    return shutil.which("strace") is not None and subprocess.run(
        ["strace", "-o", "/dev/null", "true"], capture_output=True).returncode == 0


@pytest.fixture
def served(tmp_path: Path) -> tuple[Path, str]:
    work = GitRepo(tmp_path / "work")
    work.write("deployments/empty.toml", "")
    head = work.commit("nothing to serve")
    (tmp_path / "served").mkdir()
    subprocess.run(["git", "clone", "-q", "--bare", str(work.root), str(tmp_path / "served" / "specs.git")],
                   check=True)
    return tmp_path / "served", head


@pytest.mark.parametrize("userinfo, username, password", [
    (TOKEN, TOKEN, ""),                                  # https://TOKEN@host: the token is the user name
    (f"{TOKEN}:x-oauth-basic", TOKEN, "x-oauth-basic"),  # GitHub's documented form
    (f"deploy:{PASSWORD}", "deploy", PASSWORD),
])
def test_row5_no_process_argv_carries_the_url_credentials(
    tmp_path: Path, served: tuple[Path, str], userinfo: str, username: str, password: str
) -> None:
    root, head = served
    # Sampling /proc needs the fetch's processes to live a while; strace sees everything.
    with serving(root, password, username=username, delay_s=0.0 if strace_works() else 0.3) as server:
        fetched = fetch(server.url("specs.git", userinfo), tmp_path / "cache", trace=tmp_path / "trace")
    assert fetched.result == {"sha": head}, fetched.result
    assert any("git-remote-http" in argv for argv in fetched.argvs), "no fetch was traced: the trace proves nothing"
    secrets = [TOKEN, PASSWORD] if username == TOKEN else [PASSWORD]
    for argv in fetched.argvs:
        for secret in secrets:
            assert secret not in argv, f"{secret} is on a command line: {argv}"


def test_row6_a_redirect_to_another_host_gets_no_credentials(tmp_path: Path, served: tuple[Path, str]) -> None:
    root, _ = served
    with serving(root, PASSWORD, delay_s=0.0) as other, serving(root, PASSWORD, delay_s=0.0) as remote:
        remote.redirect_to = f"http://127.0.0.1:{other.port}"
        fetched = fetch(remote.url("specs.git", f"deploy:{PASSWORD}"), tmp_path / "cache")
        assert "error" in fetched.result, fetched.result
        assert other.requests, "git never followed the redirect: the test proves nothing"
        assert other.authorizations == [], f"the other host was sent credentials: {other.authorizations}"
        assert PASSWORD not in fetched.result["error"]


def test_row6_the_user_s_own_askpass_answers_no_one(tmp_path: Path, served: tuple[Path, str]) -> None:
    """GIT_ASKPASS of the agent's environment does not answer the other host either."""
    root, _ = served
    askpass = tmp_path / "askpass"
    askpass.write_text(f"#!/bin/sh\necho {PASSWORD}\n")
    askpass.chmod(0o700)
    with serving(root, PASSWORD, delay_s=0.0) as other, serving(root, PASSWORD, delay_s=0.0) as remote:
        remote.redirect_to = f"http://127.0.0.1:{other.port}"
        fetch(remote.url("specs.git", f"deploy:{PASSWORD}"), tmp_path / "cache",
              env={"GIT_ASKPASS": str(askpass), "SSH_ASKPASS": str(askpass)})
        assert other.requests
        assert other.authorizations == []


def _fake_ssh(tmp_path: Path) -> tuple[Path, Path]:
    """An `ssh` that records its arguments and runs the remote command (its last argument) here."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    record = tmp_path / "ssh-argv"
    ssh = bin_dir / "ssh"
    ssh.write_text(f'#!/bin/sh\nprintf "%s\\n" "$*" >> {record}\nfor last; do :; done\nexec sh -c "$last"\n')
    ssh.chmod(0o700)
    return ssh, record


def test_row8_the_user_s_git_ssh_command_is_kept_with_batch_mode_added(
    tmp_path: Path, served: tuple[Path, str]
) -> None:
    root, head = served
    ssh, record = _fake_ssh(tmp_path)
    url = f"ssh://git@deploy.invalid{root / 'specs.git'}"
    fetched = fetch(url, tmp_path / "cache", env={"GIT_SSH_COMMAND": f"{ssh} -i /keys/deploy -o IdentitiesOnly=yes"})
    assert fetched.result == {"sha": head}, fetched.result
    calls = record.read_text().splitlines()
    assert calls, "the user's ssh command was never run"
    for call in calls:
        assert "-i /keys/deploy -o IdentitiesOnly=yes" in call and "-o BatchMode=yes" in call, call


def test_row8_core_ssh_command_of_the_user_s_config_is_kept_too(tmp_path: Path, served: tuple[Path, str]) -> None:
    root, head = served
    ssh, record = _fake_ssh(tmp_path)
    config = tmp_path / "gitconfig"
    config.write_text(f"[core]\n\tsshCommand = {ssh} -i /keys/other\n")
    url = f"ssh://git@deploy.invalid{root / 'specs.git'}"
    fetched = fetch(url, tmp_path / "cache", env={"GIT_CONFIG_GLOBAL": str(config), "GIT_SSH_COMMAND": ""})
    assert fetched.result == {"sha": head}, fetched.result
    calls = record.read_text().splitlines()
    assert calls and all("-i /keys/other" in call and "-o BatchMode=yes" in call for call in calls), calls


def test_without_credentials_of_its_own_the_user_s_credential_helper_answers(
    tmp_path: Path, served: tuple[Path, str]
) -> None:
    """A URL without userinfo leaves the agent user's git configuration (~/.git-credentials) in charge."""
    root, head = served
    with serving(root, PASSWORD, delay_s=0.0) as server:
        store = tmp_path / "git-credentials"
        store.write_text(f"http://deploy:{PASSWORD}@127.0.0.1:{server.port}\n")
        config = tmp_path / "gitconfig"
        config.write_text(f"[credential]\n\thelper = store --file {store}\n")
        fetched = fetch(server.url("specs.git"), tmp_path / "cache", env={"GIT_CONFIG_GLOBAL": str(config)})
    assert fetched.result == {"sha": head}, fetched.result
