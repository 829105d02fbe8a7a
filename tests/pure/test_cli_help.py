"""`gitops <verb> --help` explains every flag and shows its default."""

from __future__ import annotations

import argparse

import pytest

from gitops.cli import build_parser


def _verbs() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def _flags(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in parser._actions if not isinstance(a, argparse._HelpAction)]


@pytest.mark.parametrize("verb", sorted(_verbs()))
def test_every_flag_has_help(verb: str) -> None:
    missing = [a.dest for a in _flags(_verbs()[verb]) if not a.help]
    assert missing == []


@pytest.mark.parametrize("verb", sorted(_verbs()))
def test_every_flag_with_a_default_shows_it(verb: str) -> None:
    parser = _verbs()[verb]
    text = parser.format_help()
    for action in _flags(parser):
        if action.default not in (None, False, ""):
            assert f"(default: {action.default})" in " ".join(text.split()), action.dest


def test_run_help_names_the_state_dir_default() -> None:
    text = " ".join(_verbs()["run"].format_help().split())
    assert "--state-dir STATE_DIR history, clone cache and code exports (created 0700) (default: .gitops-state)" in text


def test_init_is_a_command() -> None:
    assert build_parser().parse_args(["init", "somewhere"]).dir == "somewhere"


@pytest.mark.parametrize("verb", ["run", "plan", "reset-controller"])
def test_a_verbs_namespace_is_the_flag_else_gitops_namespace_else_ray_gitops(verb: str) -> None:
    from vocabulary.control.goal_api import namespace_of

    assert _verbs()[verb].parse_args(["--ray-address", "head:6379"] if verb == "reset-controller" else []).namespace is None
    assert namespace_of("team-a", {"GITOPS_NAMESPACE": "team-b"}) == "team-a"
    assert namespace_of(None, {"GITOPS_NAMESPACE": "team-b"}) == "team-b"
    assert namespace_of(None, {}) == "ray-gitops"
