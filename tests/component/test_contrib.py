"""contrib/ray-gitops.service runs a `gitops run` the parser accepts, on the state dir systemd creates."""

from __future__ import annotations

import configparser
import shlex

from docgen import ROOT
from gitops.cli import build_parser


def unit() -> configparser.ConfigParser:
    parser = configparser.ConfigParser(interpolation=None, strict=True)
    parser.optionxform = str  # systemd keys are case-sensitive
    parser.read(ROOT / "contrib" / "ray-gitops.service")
    return parser


def test_exec_start_is_a_gitops_run_the_parser_accepts() -> None:
    service = unit()["Service"]
    argv = [word for word in shlex.split(service["ExecStart"]) if word != "$GITOPS_ARGS"]
    argv = [word.replace("${GITOPS_REPO}", "https://example.invalid/specs.git") for word in argv]
    assert argv[0].endswith("/bin/gitops")
    args = build_parser().parse_args(argv[1:])
    assert args.verb == "run" and args.state_dir == f"/var/lib/{service['StateDirectory']}"


def test_the_state_dir_systemd_creates_is_private() -> None:
    assert unit()["Service"]["StateDirectoryMode"] == "0700"
