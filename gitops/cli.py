"""The `gitops` command line: argument parsing and dispatch, nothing else.

Each verb's behaviour lives in `gitops.commands.<verb>`; a command function
takes the parsed arguments and returns the exit code. This module guarantees
the contract every verb shares: usage errors exit 2 (argparse), a
`GitopsError` (`UserError`, `SourceError`, whatever its kind) is one line on
stderr and exit 1, no traceback ever reaches the user, and output to a
closed pipe (`gitops history | head -1`) ends quietly with status 141.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
from typing import Callable, Sequence

from vocabulary.control.proxy_workers import (
    DEFAULT_MAX_CONNECTIONS,
    DEFAULT_WORKERS_CAP,
    MAX_CONNECTIONS_CEILING,
    MAX_PROXY_WORKERS,
)
from gitops import __version__
from gitops.errors import GitopsError
from gitops.printable import printable
from gitops.specs.limits import DEFAULT_MAX_REPLICAS
from gitops.admin.address import AGENT_ADDRESS_HINT, DEFAULT_AGENT, DEFAULT_STATE_DIR
from gitops.process.supervising import ARGV_ENV
from vocabulary.control.goal_api import DEFAULT_NAMESPACE, NAMESPACE_ENV, namespace_of

__all__ = ["main", "build_parser"]

_NAMESPACE_DEFAULT = f"(default: ${NAMESPACE_ENV}, else {DEFAULT_NAMESPACE})"



def _command(module: str, function: str) -> Callable[[argparse.Namespace], int]:
    """Import a command lazily, so `gitops validate` never pays for Ray."""

    def run(args: argparse.Namespace) -> int:
        return getattr(importlib.import_module(f"gitops.commands.{module}"), function)(args)

    return run


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Every flag's help ends with its default; a flag whose default is
    "not given" (None, empty, or off for a switch) says in its help what that means."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default is None or action.default is False or action.default == "":
            return action.help
        return super()._get_help_string(action)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gitops",
        description="Run HTTP and model-serving backends on Ray from git.",
        formatter_class=_HelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"gitops {__version__}")
    verbs = parser.add_subparsers(dest="verb", required=True, metavar="COMMAND")

    def verb(name: str, help_text: str) -> argparse.ArgumentParser:
        return verbs.add_parser(name, help=help_text, description=help_text, formatter_class=_HelpFormatter)

    init = verb("init", "scaffold deployments/ with an example spec and its app")
    init.add_argument(
        "dir", nargs="?", default=None,
        help="directory to scaffold in (default: the top level of the git repository holding the current "
        "directory, else the current directory)",
    )
    init.add_argument(
        "--example", nargs="?", const="", default=None, metavar="NAME",
        help="write a working example instead: models, multiplexing, llm, secrets or environments "
        "(without NAME: list them)",
    )
    init.set_defaults(func=_command("init", "init_command"))

    run = verb("run", "the agent: watch git and reconcile the cluster")
    run.add_argument("--repo", default=".", help="repository path or URL (file://, https://, ssh://)")
    run.add_argument("--git-token-file", default=None, help="password or token for an https --repo (not in argv)")
    run.add_argument("--branch", default=None, help="branch to watch (default: the current or the remote's default)")
    run.add_argument("--path", default="deployments", help="spec path inside the repository")
    run.add_argument(
        "--ray-address", default=None, help="join this Ray cluster (default: start an embedded local Ray)"
    )
    run.add_argument(
        "--ray-port", type=int, default=None, metavar="PORT",
        help="the embedded Ray's GCS port, where other nodes would join it (1024..65535; default: Ray picks a free "
        "one; not with --ray-address)",
    )
    run.add_argument(
        "--ray-min-worker-port", type=int, default=None, metavar="PORT",
        help="lowest port of the embedded Ray's worker processes (controller, proxies, replicas: one each), with "
        "--ray-max-worker-port, a range of at least 16 (default: Ray picks free ones)",
    )
    run.add_argument(
        "--ray-max-worker-port", type=int, default=None, metavar="PORT",
        help="highest port of the embedded Ray's worker processes, with --ray-min-worker-port (default: Ray picks "
        "free ones)",
    )
    run.add_argument(
        "--replica-env", default=None, metavar="NAMES",
        help="more environment variables an embedded Ray's replicas inherit, comma-separated; PREFIX_* for a "
        "prefix (default: only the allow-list of docs/guides/security.md; GITOPS_* never)",
    )
    run.add_argument(
        "--namespace", default=None, help=f"Ray namespace of this agent's controller, one agent each {_NAMESPACE_DEFAULT}"
    )
    run.add_argument(
        "--verify-commits", action="store_true",
        help="apply only commits with an SSH signature by a key in --allowed-signers "
        "(GPG- and X.509-signed commits are refused)",
    )
    run.add_argument(
        "--allowed-signers", default=None, metavar="FILE",
        help="SSH allowed-signers file (git's format: 'ops@example.com ssh-ed25519 AAAA...')",
    )
    run.add_argument("--take-over", action="store_true", help="take the namespace over from the agent owning it")
    run.add_argument(
        "--proxy-host", default="127.0.0.1",
        help="address the HTTP proxy listens on; 'node-ip': each node's own address as Ray knows it",
    )
    run.add_argument("--proxy-port", type=int, default=8000, help="port of the HTTP proxy on every node")
    run.add_argument(
        "--proxy-metrics-port", type=int, default=8002,
        help="each node's proxy /metrics port (Prometheus), shared by its proxy workers",
    )
    run.add_argument(
        "--grpc-port", type=int, default=None, metavar="PORT",
        help="also serve gRPC on this port of every node, at --proxy-host: calls go to the endpoint whose "
        "grpc_service names their service (docs/guides/grpc.md; default: no gRPC)",
    )
    run.add_argument(
        "--proxy-workers", type=int, default=0, metavar="N",
        help=f"proxy processes per node, sharing --proxy-port (1..{MAX_PROXY_WORKERS}; "
        f"0: the node's CPUs, at most {DEFAULT_WORKERS_CAP})",
    )
    run.add_argument(
        "--proxy-max-connections", type=int, default=DEFAULT_MAX_CONNECTIONS, metavar="N",
        help="open connections each proxy worker holds; past it, 503 with Retry-After (1.."
        f"{MAX_CONNECTIONS_CEILING}; raise it for thousands of open streams)",
    )
    run.add_argument(
        "--prometheus-url", default=None, metavar="URL",
        help="Prometheus asked the rollouts' [[rollout.metrics]] PromQL checks (default: none; such a step holds)",
    )
    run.add_argument(
        "--otlp-endpoint", default=None, metavar="URL",
        help="export traces of the proxies, replicas and applies there, over OTLP/HTTP protobuf "
        "(http://HOST:4318; default: $OTEL_EXPORTER_OTLP_ENDPOINT, else no tracing)",
    )
    run.add_argument("--admin-host", default="127.0.0.1", help="address of the admin API, status page and /metrics")
    run.add_argument("--admin-port", type=int, default=8001, help="port of the admin API")
    run.add_argument(
        "--admin-token-file", default=None, help="file holding the bearer token the admin API requires (default: none)"
    )
    run.add_argument(
        "--admin-tokens-file", default=None, metavar="FILE",
        help="named admin tokens with roles, one `NAME ROLE SHA256 [SCOPE]` a line, read again when it changes "
        "(docs/guides/security.md; default: none)",
    )
    run.add_argument(
        "--oidc-issuer", default=None, metavar="URL",
        help="accept OIDC bearer tokens (JWTs) from this issuer on the admin API: https, or http to loopback "
        "(docs/guides/security.md; default: none)",
    )
    run.add_argument("--oidc-audience", default=None, metavar="AUD",
                     help="the `aud` the issuer's tokens must carry (required with --oidc-issuer)")
    run.add_argument("--oidc-group-role", action="append", default=[], metavar="GROUP=ROLE",
                     help="a group of the token's groups claim and the role it gives (viewer, operator, admin); "
                     "repeat for several")
    run.add_argument("--oidc-groups-claim", default="groups", metavar="CLAIM",
                     help="the claim holding the token's groups (default: groups)")
    run.add_argument("--oidc-client-id", default=None, metavar="ID",
                     help="the status page's client id at the issuer, for its login (authorization code + PKCE; "
                     "default: no login)")
    run.add_argument(
        "--admin-allowed-hosts", default="", help="more Host names the admin API answers, comma-separated (default: none)"
    )
    run.add_argument(
        "--webhook-host", default="127.0.0.1", help="address of the webhook's own listener (with --webhook-port)"
    )
    run.add_argument(
        "--webhook-port", type=int, default=None, help="serve /hooks/git alone on this port (default: on the admin port)"
    )
    run.add_argument("--interval", type=float, default=30.0, help="seconds between git polls (with jitter)")
    run.add_argument(
        "--fetch-timeout", type=float, default=60.0, help="seconds a git fetch may take before it is abandoned and retried"
    )
    run.add_argument(
        "--resync-interval", type=float, default=60.0, help="seconds between drift checks against the controller"
    )
    run.add_argument(
        "--state-dir", default=DEFAULT_STATE_DIR, help="history, clone cache and code exports (created 0700)"
    )
    run.add_argument(
        "--model-cache-dir", default=None, metavar="DIR",
        help="each node's model cache ([models.NAME], docs/guides/models.md), a node-local path (default: "
        "STATE_DIR/models with the embedded Ray, else ray-gitops-models in the nodes' temporary directory)",
    )
    run.add_argument(
        "--model-cache-size", type=_byte_size, default=None, metavar="SIZE",
        help="cap of each node's model cache, like 50GB or 800MiB; least recently used models no replica "
        "uses are evicted (default: no cap)",
    )
    run.add_argument(
        "--webhook-secret-file", default=None, help="file holding the push webhook's secret (default: webhook off)"
    )
    run.add_argument("--log-format", choices=["text", "json"], default="text", help="console log format")
    run.add_argument(
        "--ready-file", default=None, metavar="PATH",
        help="write the admin URL to PATH once the first reconcile is done (default: none; "
        "the log line 'gitops: ready' says the same)",
    )
    run.add_argument(
        "--notify", default=None, metavar="FILE",
        help="notification providers, a TOML file (default: none; see docs/guides/notifications.md)",
    )
    run.add_argument(
        "--public-url", default=None, help="where people reach this agent's status page, for notification links"
    )
    run.add_argument(
        "--commit-url-template", default=None, help="link to a commit, e.g. https://github.com/you/specs/commit/{sha}"
    )
    run.add_argument(
        "--auto-revert", action="store_true",
        help="after a failed apply or an aborted rollout, go back to the last applied commit "
        "and hold the newer ones back until a newer commit arrives",
    )
    _environment_flag(run)
    run.add_argument(
        "--promote-token-file", default=None, metavar="FILE",
        help="credential for promoting to the next environment ([promotion] of the environment file): "
        "a git token for push, an API token for pull_request (default: none; the agent never writes to git)",
    )
    run.add_argument(
        "--promote-api-url", action="append", default=None, metavar="URL",
        help="a forge API the promotion or automation token may be sent to (repeatable); an api_url in the "
        "environment file or automation.toml must be one of them (default: only https://api.github.com and "
        "https://gitlab.com/api/v4)",
    )
    run.add_argument(
        "--automation-token-file", default=None, metavar="FILE",
        help="credential for artifact automation (automation.toml): the git password of its pushes and the API "
        "token of its pull requests (default: none; commit mode pushes with the repository's own credentials, "
        "pull_request mode reports an error)",
    )
    run.add_argument(
        "--signing-key", default=None, metavar="FILE",
        help="SSH private key (no passphrase, mode 600) that signs every commit the agent writes (artifact "
        "automation's pins); with --verify-commits, list its public key in --allowed-signers or the agent refuses "
        "its own commits (default: unsigned commits)",
    )
    run.add_argument(
        "--automation-registry-token-file", default=None, metavar="FILE",
        help="USER:PASSWORD for the OCI registries artifact automation watches (oci:// in automation.toml; "
        "default: anonymous pulls)",
    )
    _max_replicas_flag(run)
    _age_identity_flag(run, "decrypts the secrets ([secrets.NAME]) the replicas receive")
    run.set_defaults(func=_command("run", "run_command"))

    validate = verb("validate", "validate specs offline")
    validate.add_argument(
        "path", nargs="?", default=None,
        help="spec directory (default: deployments at the top level of the git repository holding the current "
        "directory, else ./deployments)",
    )
    validate.add_argument("--rev", default=None, help="validate this commit instead of the working tree")
    validate.add_argument(
        "--root", default=None, help="where import paths resolve from (default: the repository's top level)"
    )
    validate.add_argument("--format", choices=["text", "json", "github"], default="text", help="how errors are printed")
    _environment_flag(validate, "check this environment only (default: the tree, and the tree with each environment file)")
    _max_replicas_flag(validate)
    _age_identity_flag(validate, "also decrypt every secret (without it: files and names are checked)")
    validate.set_defaults(func=_command("validate", "validate_command"))

    secret = verb("secret", "encrypt or edit an age-encrypted secret file (docs/guides/secrets.md)")
    secret_verbs = secret.add_subparsers(
        dest="secret_verb", metavar="{keygen,encrypt,edit}", required=True,
        help="keygen: a new age identity; encrypt: a new age file; edit: change one",
    )
    keygen = secret_verbs.add_parser(
        "keygen", help="make an age identity (the key that decrypts) and print its recipient (the public key)",
        description="make an age identity in a new 0600 file and print its recipient (age1...) on stdout; "
        "the secret key itself is printed only with --output -",
    )
    keygen.add_argument(
        "--output", "-o", default=None, metavar="FILE",
        help="the new identity file, created 0600 in a directory made 0700 (an existing file is never "
        "overwritten); '-' prints the identity on stdout and the recipient on stderr (default: "
        "$XDG_CONFIG_HOME/gitops/age-identity.txt, else ~/.config/gitops/age-identity.txt)",
    )
    encrypt = secret_verbs.add_parser(
        "encrypt", help="encrypt IN (default: stdin) to the recipients; the age file goes to stdout",
        description="encrypt IN (default: stdin) to the recipients; the age file goes to stdout",
    )
    encrypt.add_argument("input", nargs="?", default=None, metavar="IN", help="file to encrypt (default: stdin)")
    _recipients_flag(encrypt)
    edit = secret_verbs.add_parser(
        "edit", help="decrypt FILE into $EDITOR (in a private tmpfs file), then encrypt it again in place",
        description="decrypt FILE into $EDITOR (in a private tmpfs file), then encrypt it again in place",
    )
    edit.add_argument("file", metavar="FILE", help="the age file (a new one is created)")
    _recipients_flag(edit)
    _age_identity_flag(edit, "opens FILE (needed when it exists)")
    secret.set_defaults(func=_command("secret", "secret_command"))

    models = verb("models", "help with [models.NAME] tables (docs/guides/models.md)")
    model_verbs = models.add_subparsers(
        dest="models_verb", metavar="{digest,resolve}", required=True,
        help="digest: the sha256 to commit; resolve: the pin of a moving reference"
    )
    digest = model_verbs.add_parser(
        "digest", help="print the sha256 of a model file, or of a directory's manifest",
        description="print the sha256 of a model file, or of a directory's manifest, to commit as [models.NAME] sha256",
    )
    digest.add_argument(
        "target", metavar="PATH|URL",
        help="a local file or directory, file:///…, s3://bucket/key, s3://bucket/prefix/ or https://host/file "
        "(S3 with the AWS_* variables)",
    )
    resolve = model_verbs.add_parser(
        "resolve", help="print the pinned source and sha256 of a moving reference (an hf:// branch or tag, "
        "the model a rule picks under an s3:// prefix, or an OCI tag)",
        description="print the [models.NAME] source and sha256 that pin REF as it is today: for "
        "hf://ORG/NAME@BRANCH_OR_TAG, the commit the Hub names for it and the digest of the selected files "
        "(HF_ENDPOINT, or huggingface.co); for s3://BUCKET/PREFIX/, the file or directory under the prefix "
        "that --pick names, and its digest (the AWS_* variables); for oci://REGISTRY/REPO:TAG, the manifest "
        "digest the registry names for the tag and the digest of the model directory (a modelcar's /models, or "
        "an artifact's files).",
    )
    resolve.add_argument("reference", metavar="REF",
                         help="hf://ORG/NAME@REVISION (a branch, a tag or a commit), s3://BUCKET/PREFIX/, or "
                         "oci://REGISTRY/REPO:TAG")
    resolve.add_argument("--include", action="append", default=[], metavar="GLOB",
                         help="a glob of the files the model holds (repeatable; none: every file)")
    resolve.add_argument("--exclude", action="append", default=[], metavar="GLOB",
                         help="a glob of files left out (repeatable)")
    resolve.add_argument("--token-file", default=None, metavar="FILE",
                         help="a file holding the Hub token (default: HF_TOKEN, else the Hub's token file); for "
                         "oci://, the registry's USER:PASSWORD (default: an anonymous pull)")
    resolve.add_argument("--pick", choices=["newest", "highest-version", "semver"], default=None,
                         help="s3://: the entry last modified latest, or the one with the highest version number "
                         "in its name (v2 < v10, 1.9 < 1.10); oci://REGISTRY/REPO (no tag): semver, the tag with "
                         "the highest semantic version, or highest-version, the tag with the highest version number "
                         "(build-9 < build-10) (as artifact automation picks them)")
    resolve.add_argument("--match", default=None, metavar="REGEX",
                         help="s3://: only entries whose name (relative to the prefix; a directory's ends in /) "
                         "the regex is found in; its group 'version' (or first group) holds the version; "
                         "oci://: only tags it is found in (a pre-release only when it reaches past the '-')")
    resolve.add_argument("--kind", choices=["file", "directory"], default=None,
                         help="s3://: pick among the files, or the directories, directly under the prefix "
                         "(default: whichever the prefix holds)")
    models.set_defaults(func=_command("models.command", "models_command"))

    automation = verb("automation", "artifact automation: the [automation.NAME] tables of automation.toml "
                      "(docs/guides/automation.md)")
    automation_verbs = automation.add_subparsers(
        dest="automation_verb", metavar="{run}", required=True,
        help="run: look at each automation's moving reference once and propose the new pin",
    )
    automation_run = automation_verbs.add_parser(
        "run", help="look at each automation once: push a commit or open/update a pull request for a new pin",
        description="look at each [automation.NAME] of automation.toml (on --branch) once, as the agent does on "
        "its interval: resolve its reference (S3 prefix and rule, hf:// branch, oci:// tag, oci:// repository and "
        "rule) and, when it names another pin "
        "than [models.NAME] has, write the new pin into the spec file and push a commit or open (update) a pull "
        "request. A digest the agent's history records as failed (--state-dir) is not proposed again.",
        formatter_class=_HelpFormatter,
    )
    automation_run.add_argument("--repo", default=".", help="repository: a path (any directory inside it) or a URL")
    automation_run.add_argument("--branch", default=None, help="branch holding automation.toml and the specs "
                                "(default: the repository's current or default branch)")
    automation_run.add_argument("--path", default="deployments", help="spec path inside the repository")
    automation_run.add_argument("--name", action="append", default=[], metavar="NAME",
                                help="only this automation (repeatable; default: every one)")
    automation_run.add_argument("--dry-run", action="store_true",
                                help="print what would change, as a diff, and write nothing")
    automation_run.add_argument("--token-file", default=None, metavar="FILE",
                                help="the forge token: the git password of the push, the API token of the pull "
                                "request (default: none; pull_request mode then fails)")
    automation_run.add_argument("--registry-token-file", default=None, metavar="FILE",
                                help="USER:PASSWORD for the OCI registries the automations watch (oci://; "
                                "default: anonymous pulls)")
    automation_run.add_argument("--signing-key", default=None, metavar="FILE",
                                help="SSH private key (no passphrase, mode 600) that signs the commits written "
                                "(default: unsigned commits)")
    automation_run.add_argument("--api-url", action="append", default=None, metavar="URL",
                                help="a forge API the token may be sent to (repeatable; default: only "
                                "https://api.github.com and https://gitlab.com/api/v4)")
    automation_run.add_argument("--state-dir", default=DEFAULT_STATE_DIR,
                                help="the agent's state dir, whose history says which digests failed")
    automation.set_defaults(func=_command("automation", "automation_command"))

    plan = verb("plan", "the changes between two commits' desired states")
    plan.add_argument("--repo", default=".", help="repository path (any directory inside it)")
    plan.add_argument("--path", default="deployments", help="spec path inside the repository")
    plan.add_argument("--from", dest="from_rev", default=None, help="commit to plan from (default: nothing deployed)")
    plan.add_argument("--to", dest="to_rev", default="HEAD", help="commit to plan to")
    plan.add_argument("--live", action="store_true", help="plan from the running controller instead of --from")
    plan.add_argument("--ray-address", default="auto", help="Ray cluster of the running controller (with --live)")
    plan.add_argument(
        "--namespace", default=None, help=f"Ray namespace of the running controller (with --live) {_NAMESPACE_DEFAULT}"
    )
    plan.add_argument("--json", action="store_true", help="print the plan as JSON")
    plan.add_argument(
        "--format", choices=["text", "json", "markdown"], default=None,
        help="how the plan is printed; markdown makes a PR comment (default: text, or json with --json)",
    )
    plan.add_argument("--exit-code", action="store_true", help="exit 0 no change, 2 changes, 1 errors")
    _environment_flag(plan)
    plan.set_defaults(func=_command("plan", "plan_command"))

    reset = verb("reset-controller", "discard the controller's stored state (it is rebuilt from git)")
    reset.add_argument("--ray-address", required=True, help="the Ray cluster the controller ran on")
    reset.add_argument(
        "--namespace", default=None, help=f"Ray namespace of the controller whose state is discarded {_NAMESPACE_DEFAULT}"
    )
    reset.set_defaults(func=_command("reset", "reset_controller_command"))

    capture = verb("capture", "read the request/response records of a file capture sink")
    capture_verbs = capture.add_subparsers(
        dest="capture_verb", metavar="{tail,grep}", required=True,
        help="tail: an endpoint's newest records; grep: the records of a commit",
    )
    tail = capture_verbs.add_parser(
        "tail", help="the newest records of ENDPOINT, oldest first", description="the newest records of ENDPOINT",
    )
    tail.add_argument("endpoint", metavar="ENDPOINT", help="the endpoint's name")
    tail.add_argument("-n", "--lines", type=int, default=10, help="how many records (default 10)")
    grep = capture_verbs.add_parser(
        "grep", help="the records answered by a commit's replicas", description="the records of a commit",
    )
    grep.add_argument("--commit", required=True, metavar="SHA", help="the commit (4 or more hex digits)")
    grep.add_argument("--endpoint", default=None, help="only this endpoint's records")
    for reader in (tail, grep):
        reader.add_argument(
            "--sink", required=True, metavar="SINK",
            help="the endpoint's capture sink: file:///DIR (or DIR), as in its [capture] table",
        )
    capture.set_defaults(func=_command("capture", "capture_command"))

    schema = verb("schema", "the JSON Schema of the spec format, for editors")
    schema.set_defaults(func=_command("schema", "schema_command"))

    for name, help_text in [
        ("status", "sync status of the running agent"),
        ("history", "the applied-commit ledger"),
        ("sync", "reconcile now"),
        ("suspend", "pause reconciliation"),
        ("resume", "resume reconciliation"),
        ("rollback", "apply the last applied (or given) commit and hold the newer ones back"),
        ("promote", "move a running rollout's traffic to its target now, skipping its steps left"),
        ("abort", "stop a running rollout: its endpoint's traffic goes back to where it was"),
        ("trace", "the spans of a commit's apply (fetch, load, plan, apply, each goal), as the agent kept them"),
        ("audit", "the audit trail (every sync, suspend, resume, rollback, promote, abort: who, from where, why) as JSON lines"),
    ]:
        admin = verb(name, help_text)
        if name in ("sync", "suspend", "resume", "rollback", "promote", "abort"):
            admin.add_argument("--reason", default="", metavar="TEXT",
                               help="why, recorded in history with who asked (at most 500 characters)")
        if name == "history":
            admin.add_argument("--actor", default=None, metavar="NAME",
                               help="only the actions of NAME (a token's name or an OIDC subject)")
        if name == "audit":
            admin.add_argument("--after", type=int, default=0, metavar="ID", help="only actions after this id")
        if name == "rollback":
            admin.add_argument("commit", nargs="?", default=None, help="a commit applied before (default: the last)")
        if name == "trace":
            admin.add_argument("commit", metavar="COMMIT", help="the commit (4 or more hex digits)")
        if name in ("promote", "abort"):
            admin.add_argument("endpoint", metavar="ENDPOINT", help="the endpoint whose rollout runs")
        if name == "status":
            admin.add_argument(
                "--exit-code", action="store_true",
                help="exit 0 when Synced, 2 when not (Progressing, Degraded, Failed, Suspended...), 1 on errors",
            )
        if name == "sync":
            admin.add_argument(
                "--override-window", action="store_true",
                help="apply now even while a sync window holds new commits (recorded in history with the token's name)",
            )
        _agent_flags(admin)
        admin.add_argument("--json", action="store_true", help="print the admin API's JSON")
        admin.set_defaults(func=_command("remote", f"{name}_command"))

    wait = verb("wait", "wait until the running agent reaches a status (Synced by default)")
    wait.add_argument(
        "--for", dest="wanted", default="synced", metavar="STATUS",
        help="the status to wait for: synced, progressing, degraded, failed, suspended (any status the agent shows)",
    )
    wait.add_argument("--timeout", type=float, default=300.0, help="seconds to wait before giving up (exit 2)")
    wait.add_argument(
        "--revision", default=None, metavar="SHA",
        help="also wait until this commit is the applied one, e.g. $(git rev-parse HEAD) right after a commit "
        "(default: any)",
    )
    _agent_flags(wait)
    wait.set_defaults(func=_command("remote", "wait_command"))

    logs = verb(
        "logs", "a backend's replicas' own output and tracebacks, from every node, and the errors of those that "
        "failed to start",
    )
    logs.add_argument("backend", help="the backend whose replicas' output is printed")
    logs.add_argument("--follow", "-f", action="store_true", help="keep printing what the replicas write")
    logs.add_argument(
        "--previous", "-p", action="store_true",
        help="the replicas replaced since the controller started (before a restart: died, failed to start, "
        "failed health checks), how each ended, its error and the last lines it wrote, instead of the running ones",
    )
    logs.add_argument(
        "--since", default=None, metavar="DURATION",
        help="what was written, and the replicas replaced, in the last DURATION (30s, 5m, 2h; default: "
        "each replica's last lines)",
    )
    _agent_flags(logs)
    logs.set_defaults(func=_command("remote", "logs_command"))
    return parser


def _age_identity_flag(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument(
        "--age-identity", action="append", default=[], metavar="FILE",
        help=f"an age identity file (0600; repeat for several) that {what}",
    )


def _recipients_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--recipients", default=None, metavar="FILE",
        help="age recipients, one public key a line (default: .gitops-recipients at the repository root)",
    )


def _agent_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--agent", default=None,
        help=f"the agent's admin URL (default: $GITOPS_AGENT, else the address a running agent wrote in "
        f"{AGENT_ADDRESS_HINT} of this repository, else {DEFAULT_AGENT})",
    )
    parser.add_argument("--token-file", default=None, help="file holding the admin token (default: $GITOPS_TOKEN)")


def _environment_flag(
    parser: argparse.ArgumentParser, help_text: str = "apply environments/NAME.toml on top of the spec tree (default: none)"
) -> None:
    parser.add_argument("--environment", default=None, metavar="NAME", help=help_text)


_SIZE_UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
               "KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40}


def _byte_size(text: str) -> int:
    """`50GB`, `800MiB` or a number of bytes."""
    number = text.strip().rstrip("bBiIkKmMgGtT ")
    unit = text.strip()[len(number):].strip().upper()
    try:
        value = float(number)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (like 50GB, 800MiB or bytes)") from None
    if unit not in _SIZE_UNITS or value <= 0:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (like 50GB, 800MiB or bytes)")
    return int(value * _SIZE_UNITS[unit])


def _max_replicas_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--max-replicas",
        type=int,
        default=DEFAULT_MAX_REPLICAS,
        help=f"most replicas a backend may ask for (num_replicas, autoscaling.max_replicas; default {DEFAULT_MAX_REPLICAS})",
    )


def main(argv: Sequence[str] | None = None) -> int:
    if argv is None and ARGV_ENV in os.environ:
        # A supervised agent: its true command line (credentials included) came
        # by environment, so that its visible argv could be redacted.
        argv = json.loads(os.environ.pop(ARGV_ENV))
    args = build_parser().parse_args(argv)
    if hasattr(args, "namespace"):
        args.namespace = namespace_of(args.namespace, os.environ)
    # The command line as given: `gitops run` re-runs it in a supervised child.
    args.argv = list(sys.argv[1:] if argv is None else argv)
    try:
        return args.func(args)
    except GitopsError as error:
        for line in (f"gitops {args.verb}: {error}", *error.details):
            print(printable(line), file=sys.stderr)
        return error.exit_code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return _closed_pipe()
    except Exception as error:  # noqa: BLE001 — the last line of defence
        print(printable(f"gitops {args.verb}: internal error: {type(error).__name__}: {error}"), file=sys.stderr)
        return 1


def _closed_pipe() -> int:
    """Output to a closed pipe (`gitops history | head -1`) ends quietly, as
    git's does: the exit status of a process killed by SIGPIPE, and stdout
    pointed at /dev/null so that the interpreter's last flush cannot fail again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    return 128 + 13
