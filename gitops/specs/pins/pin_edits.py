"""A model's new pin written into the spec file that declares it, keeping every comment and the layout.

Artifact automation (`gitops.loop.automation`, docs/guides/automation.md)
moves a `[models.NAME]` table's `sha256` (and its `source`, when that
changes) to a new pin. The file is never re-serialised: each value's
string literal is found where it is written (`gitops.specs.locating`:
`[models.NAME]`, `models.NAME.sha256 = …` or an inline table alike) and
replaced in place, on its line, by a basic string (`"…"`). The result is
parsed again and must differ from the original in exactly the keys set,
to exactly the values asked for; anything else (a value that is not a
single-line string, a model the file does not declare) is a `PinEditError`
and nothing is written.

Also `declared_model`: a file's `[models.NAME]` table as written (source,
sha256, include, exclude), or None. Pure: text in, text out.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from typing import Any

from gitops.specs.locating import locate

__all__ = ["DeclaredModel", "PinEditError", "declared_model", "edit_pin"]


class PinEditError(ValueError):
    """The pin cannot be written into the file as asked; the message says why."""


@dataclass(frozen=True)
class DeclaredModel:
    """A `[models.NAME]` table as one spec file writes it."""

    name: str
    path: str  # the file, from the repository root
    source: str
    sha256: str
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()


def declared_model(path: str, text: str, name: str) -> DeclaredModel | None:
    """`[models.NAME]` of the file at `path`, when it declares one with a string source and sha256."""
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        return None
    table = _model_table(document, name)
    if table is None or not isinstance(table.get("source"), str) or not isinstance(table.get("sha256"), str):
        return None
    globs = {key: tuple(str(item) for item in table.get(key, ()) if isinstance(item, str)) for key in ("include", "exclude")}
    return DeclaredModel(name, path, table["source"], table["sha256"], globs["include"], globs["exclude"])


def edit_pin(text: str, name: str, values: dict[str, str]) -> str:
    """`text` with `[models.NAME]`'s keys in `values` (sha256, source) set, each on its own line; PinEditError else."""
    try:
        before = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise PinEditError(f"the file is not valid TOML ({error})") from None
    table = _model_table(before, name)
    if table is None:
        raise PinEditError(f"the file declares no [models.{name}]")
    changed = {key: value for key, value in values.items() if table.get(key) != value}
    if not changed:
        return text
    locations = locate(text)
    lines = text.splitlines(keepends=True)
    for key, value in changed.items():
        if not isinstance(table.get(key), str):
            raise PinEditError(f"models.{name}.{key} is not a string in the file; write it as one first")
        path = ("models", name, key)
        if path not in locations.values:
            raise PinEditError(f"models.{name}.{key}: cannot find where its value is written")
        line, column = locations.values[path]
        lines[line - 1] = _replaced(lines[line - 1], column - 1, value, f"models.{name}.{key}")
    edited = "".join(lines)
    _check(before, edited, name, changed)
    return edited


def _model_table(document: dict[str, Any], name: str) -> dict[str, Any] | None:
    models = document.get("models")
    table = models.get(name) if isinstance(models, dict) else None
    return table if isinstance(table, dict) else None


def _replaced(line: str, start: int, value: str, where: str) -> str:
    """`line` with the one-line string literal starting at `start` replaced by `value` as a basic string."""
    quote = line[start : start + 1]
    if quote not in ('"', "'") or line.startswith(quote * 3, start):
        raise PinEditError(f"{where}: only a one-line string literal is rewritten")
    end = start + 1
    while end < len(line) and line[end] != quote:
        end += 2 if quote == '"' and line[end] == "\\" else 1
    if end >= len(line):
        raise PinEditError(f"{where}: its string does not end on its line")
    return f"{line[:start]}{_basic_string(value)}{line[end + 1 :]}"


def _basic_string(value: str) -> str:
    if any(ord(char) < 0x20 or char == "\x7f" for char in value):
        raise PinEditError("a pin holds no control characters")
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _check(before: dict[str, Any], edited: str, name: str, changed: dict[str, str]) -> None:
    """The edited file parses, and differs from `before` in exactly `changed`."""
    try:
        after = tomllib.loads(edited)
    except tomllib.TOMLDecodeError as error:
        raise PinEditError(f"the edit would not parse ({error}); nothing written") from None
    expected = {**before, "models": {**before["models"], name: {**before["models"][name], **changed}}}
    if after != expected:
        raise PinEditError(f"the edit would change more than models.{name}'s {', '.join(sorted(changed))}; nothing written")
