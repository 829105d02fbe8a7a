"""Roles, single sign-on, attribution and no token anywhere, with a real agent (issue 47).

A `gitops run` with `--admin-tokens-file` (a viewer, an operator, an admin,
digests only) beside the old `--admin-token-file`:

- over real HTTP, each of the three tokens gets exactly its role's rights on
  every route of the role table (`gitops.admin.auth.roles.ROUTES`): 403 where the
  role is too low, never 401 or 403 where it reaches;
- the operator's `gitops rollback --reason` is in `gitops history --actor`
  and in the admin's `gitops audit` export with its name, address and reason;
- a JWT from the test's loopback OIDC issuer (keys made here) whose group
  maps to operator rolls back through the CLI and is named by its subject;
  one expired, one for another audience and one with `alg: none` cannot;
- no token (nor the old one) appears in the agent's log, `/status`,
  `/history`, the status page, the audit export, the ledger's file, the CLI's
  output, a capture record of a request that carried one, or any file of
  Ray's session directory (the proxies' and replicas' logs).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import httpx
import pytest
import ray

from gitops.admin.auth.roles import ROUTES, Role
from tests.conftest import GitRepo
from tests.support.agents import commit_versioned_echo
from tests.support.oidc import Issuer, unsigned
from tests.support.stack import AgentProcess, gitops_cli as gitops

pytestmark = pytest.mark.real

TOKENS = {
    "vera": ("viewer", "tok-viewer-6b1d0c2e9f"),
    "otto": ("operator", "tok-operator-2f7a91c4d3"),
    "ada": ("admin", "tok-admin-8e3c55a1b0"),
}
OLD_TOKEN = "tok-old-single-0d9e7c6b5a"

SPEC = '''
[backends.echo]
import_path = "deployments.echo:Echo"
init_args = ["{version}"]
ray_actor_options = {{ num_cpus = 0.01 }}
graceful_shutdown_timeout_s = 1

[endpoints.echo]
route = "/echo"
traffic = {{ echo = 1.0 }}
capture = {{ sample = 1.0, sink = "file://{sink}" }}
'''


def write(repo: GitRepo, version: str, sink: Path) -> str:
    return commit_versioned_echo(repo, SPEC.format(version=version, sink=sink), version)


def gitops_with(bearer: str, *args: str, cwd: Path):
    """The CLI with `GITOPS_TOKEN` set, as a user holding a JWT runs it."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "GITOPS_AGENT"}
    return subprocess.run([sys.executable, "-m", "gitops", *args], cwd=cwd, env={**env, "GITOPS_TOKEN": bearer},
                          capture_output=True, text=True, timeout=120)


def token_files(tmp_path: Path) -> tuple[Path, Path, dict[str, Path]]:
    table = tmp_path / "admin-tokens"
    table.write_text("".join(f"{name} {role} {hashlib.sha256(tok.encode()).hexdigest()}\n"
                             for name, (role, tok) in TOKENS.items()))
    old = tmp_path / "admin-token"
    old.write_text(OLD_TOKEN + "\n")
    each = {}
    for name, (_, tok) in TOKENS.items():
        each[name] = tmp_path / f"{name}.token"
        each[name].write_text(tok + "\n")
    for path in (table, old, *each.values()):
        path.chmod(0o600)
    return table, old, each


def test_three_tokens_rights_attribution_and_no_token_anywhere(ray_session: str, repo: GitRepo, tmp_path: Path) -> None:
    sink = tmp_path / "capture"
    sink.mkdir()
    table, old, each = token_files(tmp_path)
    first = write(repo, "v1", sink)
    state = repo.root / ".gitops-state"
    issuer = Issuer()
    agent = AgentProcess(repo.root, tmp_path, ray.get_runtime_context().gcs_address, extra_args=[
        "--admin-tokens-file", str(table), "--admin-token-file", str(old), "--state-dir", str(state),
        "--oidc-issuer", issuer.url, "--oidc-audience", "ray-gitops", "--oidc-group-role", "sre=operator",
    ])
    jwts = {
        "good": issuer.mint(sub="carol@example.com", groups=["sre"]),
        "expired": issuer.mint(sub="mallory", groups=["sre"], exp=1_000_000),
        "wrong aud": issuer.mint(sub="mallory", groups=["sre"], aud="another-app"),
        "alg none": unsigned({"alg": "none", "kid": issuer.keys[-1][0]}, issuer.claims(sub="mallory", groups=["sre"])),
    }
    http = httpx.Client(timeout=30)

    def as_(token: str | None, method: str, path: str) -> httpx.Response:
        """The answer, its body read unless it is a live stream (`/events`: its headers are enough)."""
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        with http.stream(method, agent.admin + path, headers=headers) as response:
            if not response.headers.get("content-type", "").startswith("text/event-stream"):
                response.read()
        return response

    inside = repo.root / "deployments"
    try:
        agent.wait("the agent answering", lambda: as_(OLD_TOKEN, "GET", "/status").status_code == 200)
        agent.wait("v1 applied", lambda: as_(OLD_TOKEN, "GET", "/status").json()["last_applied_revision"] == first)
        second = write(repo, "v2", sink)
        agent.wait("v2 applied", lambda: as_(OLD_TOKEN, "GET", "/status").json()["last_applied_revision"] == second)
        agent.wait("a capture record", lambda: httpx.get(
            agent.proxy + "/echo", headers={"Authorization": f"Bearer {TOKENS['ada'][1]}"}, timeout=10
        ).status_code == 200 and any(p.stat().st_size for p in sink.rglob("*.jsonl")))

        # The operator rolls back through the CLI, with a reason.
        rolled = gitops("rollback", "--reason", "v2 breaks checkout", "--token-file", str(each["otto"]), cwd=inside)
        assert rolled.returncode == 0, rolled.stderr
        mine = gitops("history", "--actor", "otto", "--token-file", str(each["vera"]), cwd=inside)
        assert mine.returncode == 0, mine.stderr
        assert "otto" in mine.stdout and "rollback (to " in mine.stdout and "v2 breaks checkout" in mine.stdout
        assert "127.0.0.1" in mine.stdout
        refused = gitops("audit", "--token-file", str(each["otto"]), cwd=inside)
        assert refused.returncode != 0 and "otto is operator; this needs admin" in refused.stderr
        exported = gitops("audit", "--token-file", str(each["ada"]), cwd=inside)
        assert exported.returncode == 0, exported.stderr
        rollback = json.loads(exported.stdout.splitlines()[0])
        assert (rollback["verb"], rollback["actor"], rollback["peer"], rollback["reason"]) == (
            "rollback", "otto", "127.0.0.1", "v2 breaks checkout")

        # Single sign-on: the issuer's JWT with the right group rolls back; bad ones cannot.
        for name in ("expired", "wrong aud", "alg none"):
            bad = gitops_with(jwts[name], "rollback", "--reason", "sso", cwd=inside)
            assert bad.returncode != 0, (name, bad.stdout)
            assert ("expired (exp)", "wrong audience (aud)", "algorithm 'none' is not allowed")[
                ("expired", "wrong aud", "alg none").index(name)] in bad.stderr, (name, bad.stderr)
        good = gitops_with(jwts["good"], "rollback", "--reason", "sso rollback", cwd=inside)
        assert good.returncode == 0, good.stderr
        by_carol = json.loads(gitops_with(jwts["good"], "history", "--actor", "carol@example.com", "--json",
                                          cwd=inside).stdout)["actions"]
        assert [(a["verb"], a["via"], a["reason"]) for a in by_carol] == [("rollback", "oidc", "sso rollback")]

        # Every route of the table, for each role.
        for name, (role_text, token) in TOKENS.items():
            role = Role.parse(role_text)
            for (method, path), rule in ROUTES.items():
                if path == "/hooks/git":
                    continue  # its signature guards it: no token of ours is asked
                status = as_(token, method, path.replace("{backend}", "echo")).status_code
                if rule.role is None or role >= rule.role:
                    assert status not in (401, 403), (name, method, path, status)
                else:
                    assert status == 403, (name, method, path, status)
                assert as_(None, method, path.replace("{backend}", "echo")).status_code == (
                    401 if rule.role is not None else status), (method, path)
        assert as_(OLD_TOKEN, "GET", "/shadow/mismatches").status_code == 200  # the old token is admin
        as_(OLD_TOKEN, "POST", "/resume")
        surfaces = {
            "/status": as_(OLD_TOKEN, "GET", "/status").text,
            "/history": as_(OLD_TOKEN, "GET", "/history").text,
            "status page": as_(OLD_TOKEN, "GET", "/").text,
            "/audit": as_(OLD_TOKEN, "GET", "/audit").text,
            "gitops history": gitops("history", "--token-file", str(each["ada"]), cwd=inside).stdout,
            "gitops status": gitops("status", "--token-file", str(each["ada"]), cwd=inside).stdout,
        }
    finally:
        http.close()
        agent.stop()
        issuer.close()
    surfaces["agent log"] = agent.log_path.read_text()
    assert "actions" in surfaces["/history"] and "otto" in surfaces["/audit"]
    secrets = [tok for _, tok in TOKENS.values()] + [OLD_TOKEN] + [jwt.split(".")[1] for jwt in jwts.values()]
    for where, text in surfaces.items():
        assert text, where
        for secret in secrets:
            assert secret not in text, f"{where} shows a token"
    # The proxy workers' and replicas' logs and every other file Ray writes (the capture request carried a token).
    session_dir = Path(ray._private.worker._global_node.get_session_dir_path())
    files = [p for p in [*state.rglob("*"), *sink.rglob("*"), *session_dir.rglob("*")]
             if p.is_file() and not p.is_symlink()]
    assert any(p.name == "history.db" for p in files) and any(p.suffix == ".jsonl" for p in files)
    for path in files:
        try:
            data = path.read_bytes()
        except OSError:
            continue  # a socket or a file gone meanwhile
        for secret in secrets:
            assert secret.encode() not in data, f"{path} holds a token"
