"""docs/reference/cli.md from the argument parser: every command and subcommand, every flag, its help and default."""

from __future__ import annotations

import argparse

__all__ = ["render_cli"]

HEADER = "<!-- Generated from gitops/cli.py by `make docs`; edit the parser, not this file. -->\n"


def render_cli(parser: argparse.ArgumentParser) -> str:
    lines = [
        HEADER,
        "# Command line",
        "",
        f"`{parser.prog}`: {parser.description} Every command exits 0 on success, 1 on an error "
        "(one line on stderr, never a traceback) and 2 on a usage error.",
        "",
        "| command | what |",
        "| --- | --- |",
        *(f"| [`{parser.prog} {name}`](#{parser.prog}-{name}) | {sub.description} |"
          for name, sub in _subcommands(parser).items()),
        "",
        "`gitops --version` prints the installed version; `gitops COMMAND --help` prints what follows.",
    ]
    for sub in _subcommands(parser).values():
        lines += _command(sub, "##")
    return "\n".join(lines) + "\n"


def _command(parser: argparse.ArgumentParser, heading: str) -> list[str]:
    """A command's section, then one a level down for each of its own subcommands (`secret keygen`)."""
    about = (parser.description or "").rstrip(".")
    lines = ["", f"{heading} {parser.prog}", "", f"{about[:1].upper()}{about[1:]}.", "", "```", _usage(parser), "```"]
    rows = [_row(action) for action in parser._actions if not isinstance(action, argparse._HelpAction)]
    if rows:
        lines += ["", "| argument | what | default |", "| --- | --- | --- |", *rows]
    for sub in _subcommands(parser).values():
        lines += _command(sub, heading + "#")
    return lines


def _usage(parser: argparse.ArgumentParser) -> str:
    """The usage line at a fixed width, so the page does not depend on the terminal."""
    formatter = argparse.HelpFormatter(prog=parser.prog, width=100)
    formatter.add_usage(parser.usage, parser._actions, parser._mutually_exclusive_groups)
    return formatter.format_help().strip()


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _row(action: argparse.Action) -> str:
    return f"| {_name(action)} | {_cell(action.help or '')} | {_default(action)} |"


def _name(action: argparse.Action) -> str:
    if not action.option_strings:
        return f"`{action.metavar or action.dest.upper()}` (optional)" if action.nargs == "?" else f"`{action.dest}`"
    flag = ", ".join(action.option_strings)
    if action.nargs == 0:
        return f"`{flag}`"
    value = "{" + ",".join(action.choices) + "}" if action.choices else (action.metavar or action.dest.upper())
    return f"`{flag} {value}`"


def _default(action: argparse.Action) -> str:
    # By identity: a default of 0 is a value to show, though 0 == False.
    if action.default is None or action.default is False or action.default is argparse.SUPPRESS or action.nargs == 0:
        return "-"
    return f"`{action.default}`"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")
