"""Where each key of a TOML document is written: key path -> line and column.

`tomllib` parses without positions, so errors found after parsing are
located by scanning the text once more for table headers (`[a.b]`,
`[[a]]`), keys (bare, quoted, dotted) and the keys and elements of inline
tables and arrays. The scanner only runs on text tomllib has accepted, so it
can be lenient; it never raises, and a path it cannot find falls back to its
nearest written parent.

Key paths are tuples like `("backends", "echo-v1", "autoscaling")`, with
integer indexes for array elements, matching pydantic's error locations.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

__all__ = ["Position", "Locations", "locate"]

Position = tuple[int, int]  # 1-based line and column
_Path = tuple[str | int, ...]
_BARE = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")


@dataclass(frozen=True)
class Locations:
    """The first place each key path is written in one document."""

    positions: dict[_Path, Position] = field(default_factory=dict)

    def find(self, path: _Path) -> Position:
        """The position of `path`, or of its nearest written parent, or 1:1."""
        for end in range(len(path), 0, -1):
            found = self.positions.get(tuple(path[:end]))
            if found is not None:
                return found
        return (1, 1)


def locate(text: str) -> Locations:
    scanner = _Scanner(text)
    try:
        scanner.document()
    except (IndexError, ValueError, RecursionError):
        pass  # lenient by design: keep what was found before the surprise
    return Locations(scanner.found)


class _Scanner:
    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0
        self.found: dict[_Path, Position] = {}
        self.array_tables: dict[_Path, int] = {}
        self.line_starts = [0] + [i + 1 for i, char in enumerate(text) if char == "\n"]

    # --- positions ---------------------------------------------------------

    def position(self, offset: int) -> Position:
        line = bisect.bisect_right(self.line_starts, offset)
        return line, offset - self.line_starts[line - 1] + 1

    def record(self, path: _Path, offset: int) -> None:
        for end in range(1, len(path) + 1):
            self.found.setdefault(tuple(path[:end]), self.position(offset))

    # --- reading -------------------------------------------------------------

    def peek(self, length: int = 1) -> str:
        return self.text[self.pos : self.pos + length]

    def skip_blank(self, newlines: bool) -> None:
        while self.pos < len(self.text):
            char = self.text[self.pos]
            if char == "#":
                while self.pos < len(self.text) and self.text[self.pos] != "\n":
                    self.pos += 1
            elif char in " \t\r" or (newlines and char == "\n"):
                self.pos += 1
            else:
                return

    def document(self) -> None:
        table: _Path = ()
        while True:
            self.skip_blank(newlines=True)
            if self.pos >= len(self.text):
                return
            if self.peek() == "[":
                table = self.header()
            else:
                self.key_value(table)

    def header(self) -> _Path:
        start = self.pos
        is_array = self.peek(2) == "[["
        self.pos += 2 if is_array else 1
        path = self.key_path()
        self.pos += 2 if is_array else 1
        if is_array:
            index = self.array_tables.get(path, -1) + 1
            self.array_tables[path] = index
            path = (*path, index)
        self.record(path, start)
        return path

    def key_path(self) -> _Path:
        parts: list[str] = []
        while True:
            self.skip_blank(newlines=False)
            parts.append(self.key_part())
            self.skip_blank(newlines=False)
            if self.peek() != ".":
                return tuple(parts)
            self.pos += 1

    def key_part(self) -> str:
        quote = self.peek()
        if quote in "\"'":
            return self.string()
        start = self.pos
        while self.pos < len(self.text) and self.text[self.pos] in _BARE:
            self.pos += 1
        if self.pos == start:
            raise ValueError("not a key")
        return self.text[start : self.pos]

    def key_value(self, table: _Path) -> None:
        self.skip_blank(newlines=False)
        start = self.pos
        path = (*table, *self.key_path())
        self.record(path, start)
        self.skip_blank(newlines=False)
        self.pos += 1  # '='
        self.skip_blank(newlines=False)
        self.value(path)

    def value(self, path: _Path) -> None:
        char = self.peek()
        if char == "{":
            self.inline_table(path)
        elif char == "[":
            self.array(path)
        elif char in "\"'":
            self.string()
        else:
            while self.pos < len(self.text) and self.text[self.pos] not in ",]}\n#":
                self.pos += 1

    def inline_table(self, path: _Path) -> None:
        self.pos += 1
        while True:
            self.skip_blank(newlines=True)
            if self.peek() in ("}", ""):
                self.pos += 1
                return
            if self.peek() == ",":
                self.pos += 1
                continue
            self.key_value(path)

    def array(self, path: _Path) -> None:
        self.pos += 1
        index = 0
        while True:
            self.skip_blank(newlines=True)
            if self.peek() in ("]", ""):
                self.pos += 1
                return
            if self.peek() == ",":
                self.pos += 1
                continue
            self.record((*path, index), self.pos)
            self.value((*path, index))
            index += 1

    def string(self) -> str:
        """Skip a string of any TOML kind; return its raw contents."""
        quote = self.peek()
        delimiter = quote * 3 if self.peek(3) == quote * 3 else quote
        self.pos += len(delimiter)
        start = self.pos
        while self.pos < len(self.text):
            if quote == '"' and self.text[self.pos] == "\\":
                self.pos += 2
                continue
            if self.text.startswith(delimiter, self.pos):
                # A multi-line string may end with up to two extra quotes.
                while len(delimiter) == 3 and self.text.startswith(quote * 4, self.pos):
                    self.pos += 1
                end = self.pos
                self.pos += len(delimiter)
                return _unescape(self.text[start:end]) if quote == '"' else self.text[start:end]
            self.pos += 1
        raise ValueError("unterminated string")


def _unescape(raw: str) -> str:
    """Decode a basic string's escapes well enough to compare key names."""
    if "\\" not in raw:
        return raw
    try:
        return raw.encode("utf-8").decode("unicode_escape").encode("latin-1").decode("utf-8")
    except (UnicodeDecodeError, UnicodeEncodeError):
        return raw
