"""The `gitops` command line: argument parsing and dispatch, nothing else.

Each verb's behaviour lives in `gitops.commands.<verb>`; a command function
takes the parsed arguments and returns the exit code. This module guarantees
the contract every verb shares: usage errors exit 2 (argparse), a
`UserError` is one line on stderr and exit 1, and no traceback ever reaches
the user.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import Callable, Sequence

from gitops import __version__
from gitops.errors import UserError
from gitops.printable import printable
from gitops.specs.limits import DEFAULT_MAX_REPLICAS

__all__ = ["main", "build_parser"]

DEFAULT_AGENT = "http://127.0.0.1:8001"


def _command(module: str, function: str) -> Callable[[argparse.Namespace], int]:
    """Import a command lazily, so `gitops validate` never pays for Ray."""

    def run(args: argparse.Namespace) -> int:
        return getattr(importlib.import_module(f"gitops.commands.{module}"), function)(args)

    return run


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gitops", description="Run HTTP and model-serving backends on Ray from git."
    )
    parser.add_argument("--version", action="version", version=f"gitops {__version__}")
    verbs = parser.add_subparsers(dest="verb", required=True, metavar="COMMAND")

    run = verbs.add_parser("run", help="the agent: watch git and reconcile the cluster")
    run.add_argument("--repo", default=".", help="repository path or URL (default: .)")
    run.add_argument("--branch", default=None, help="branch to watch (default: current)")
    run.add_argument("--path", default="deployments", help="spec path in the repo")
    run.add_argument("--ray-address", default=None, help="join this Ray cluster")
    run.add_argument("--proxy-host", default="127.0.0.1")
    run.add_argument("--proxy-port", type=int, default=8000)
    run.add_argument(
        "--proxy-metrics-port", type=int, default=8002, help="each proxy's /metrics port (Prometheus)"
    )
    run.add_argument("--admin-host", default="127.0.0.1")
    run.add_argument("--admin-port", type=int, default=8001)
    run.add_argument("--admin-token-file", default=None, help="bearer token the admin API requires")
    run.add_argument("--admin-allowed-hosts", default="", help="more Host names the admin API answers, comma-separated")
    run.add_argument("--webhook-host", default="127.0.0.1", help="the webhook's own listener (with --webhook-port)")
    run.add_argument("--webhook-port", type=int, default=None, help="serve /hooks/git alone on this port")
    run.add_argument("--interval", type=float, default=30.0, help="poll interval, s")
    run.add_argument("--resync-interval", type=float, default=60.0, help="drift check, s")
    run.add_argument("--state-dir", default=".gitops-state")
    run.add_argument("--webhook-secret-file", default=None)
    run.add_argument("--log-format", choices=["text", "json"], default="text")
    run.add_argument("--notify", default=None, metavar="FILE", help="notification providers (TOML, see README)")
    run.add_argument("--public-url", default=None, help="where people reach this agent's status page")
    run.add_argument("--commit-url-template", default=None, help="e.g. https://github.com/you/specs/commit/{sha}")
    _max_replicas_flag(run)
    run.set_defaults(func=_command("run", "run_command"))

    validate = verbs.add_parser("validate", help="validate specs offline")
    validate.add_argument("path", nargs="?", default="deployments")
    validate.add_argument("--rev", default=None, help="validate this commit instead")
    validate.add_argument("--root", default=None, help="where import paths resolve from")
    validate.add_argument("--format", choices=["text", "json", "github"], default="text", help="how errors are printed")
    _max_replicas_flag(validate)
    validate.set_defaults(func=_command("validate", "validate_command"))

    plan = verbs.add_parser("plan", help="the changes between two commits' desired states")
    plan.add_argument("--repo", default=".")
    plan.add_argument("--path", default="deployments")
    plan.add_argument("--from", dest="from_rev", default=None)
    plan.add_argument("--to", dest="to_rev", default="HEAD")
    plan.add_argument("--live", action="store_true", help="against the running controller")
    plan.add_argument("--ray-address", default="auto")
    plan.add_argument("--json", action="store_true")
    plan.add_argument("--format", choices=["text", "json", "markdown"], default=None, help="markdown: a PR comment")
    plan.add_argument("--exit-code", action="store_true", help="exit 0 no change, 2 changes, 1 errors")
    plan.set_defaults(func=_command("plan", "plan_command"))

    schema = verbs.add_parser("schema", help="the JSON Schema of the spec format, for editors")
    schema.set_defaults(func=_command("schema", "schema_command"))

    for verb, help_text in [
        ("status", "sync status of the running agent"),
        ("history", "the applied-commit ledger"),
        ("sync", "reconcile now"),
        ("suspend", "pause reconciliation"),
        ("resume", "resume reconciliation"),
    ]:
        admin = verbs.add_parser(verb, help=help_text)
        admin.add_argument("--agent", default=DEFAULT_AGENT, help="agent admin URL")
        admin.add_argument("--json", action="store_true")
        admin.add_argument("--token-file", default=None, help="the admin token (default: $GITOPS_TOKEN)")
        admin.set_defaults(func=_command("admin", f"{verb}_command"))
    return parser


def _max_replicas_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--max-replicas",
        type=int,
        default=DEFAULT_MAX_REPLICAS,
        help=f"most replicas a backend may ask for (num_replicas, autoscaling.max_replicas; default {DEFAULT_MAX_REPLICAS})",
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except UserError as error:
        print(printable(f"gitops {args.verb}: {error}"), file=sys.stderr)
        return error.exit_code
    except KeyboardInterrupt:
        return 130
    except Exception as error:  # noqa: BLE001 — the last line of defence
        print(printable(f"gitops {args.verb}: internal error: {type(error).__name__}: {error}"), file=sys.stderr)
        return 1
