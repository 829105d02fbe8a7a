"""Where each key of a TOML document is written: key path -> line and column.

`tomllib` parses without positions, so errors found after parsing are
located by scanning the text once more for table headers (`[a.b]`,
`[[a]]`), keys (bare, quoted, dotted) and the keys and elements of inline
tables and arrays. The scanner is lenient: it never raises, and a path it
cannot find falls back to its nearest written parent.

It also runs before `tomllib`, as the nesting guard: it stops at the first
key path longer than `max_depth` (dotted keys, headers, arrays and inline
tables all count) and reports where, so `tomllib`, whose dotted keys cost
time quadratic in their length, never sees one. Its own cost is linear: a
key records only the prefixes not recorded before, and no path is longer
than `max_depth` + 1.

Most documents have no error to locate and nest far less than the limit,
so the scan is skipped for them: `cannot_nest_deeper` bounds every key
path's length by counting the characters a level needs ('.', '[', '{'),
and `locate_later` scans on the first `find` only.

Key paths are tuples like `("backends", "echo-v1", "autoscaling")`, with
integer indexes for array elements, matching pydantic's error locations.
Each key's value is located too (`find_value`): a wrong value is reported
where the value is written, a wrong or missing key where the key is.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass, field

from gitops.specs.limits import MAX_DEPTH

__all__ = ["Position", "Locations", "LazyLocations", "locate", "locate_later", "cannot_nest_deeper"]

Position = tuple[int, int]  # 1-based line and column
_Path = tuple[str | int, ...]
_BLANK = re.compile(r"[ \t\r]*")
_BLANK_LINES = re.compile(r"[ \t\r\n]*")
_NEWLINE = re.compile(r"\n")
_BARE_KEY = re.compile(r"[A-Za-z0-9_-]*")
_PLAIN_VALUE = re.compile(r"[^,\]}\n#]*")  # a number, boolean or date: up to what ends it


def _matched_end(pattern: re.Pattern[str], text: str, pos: int) -> int:
    """Where `pattern` stops matching at `pos` (each pattern above also matches nothing)."""
    found = pattern.match(text, pos)
    return pos if found is None else found.end()


@dataclass(frozen=True)
class Locations:
    """The first place each key path is written in one document; `too_deep`
    is where the first key path longer than the scan's `max_depth` starts."""

    positions: dict[_Path, Position] = field(default_factory=dict)
    too_deep: Position | None = None
    values: dict[_Path, Position] = field(default_factory=dict)

    def find(self, path: _Path) -> Position:
        """The position of `path`, or of its nearest written parent, or 1:1."""
        for end in range(len(path), 0, -1):
            found = self.positions.get(tuple(path[:end]))
            if found is not None:
                return found
        return (1, 1)

    def find_value(self, path: _Path) -> Position:
        """Where the value of `path` starts; where `path` is (`find`) if not recorded."""
        found = self.values.get(tuple(path))
        return found if found is not None else self.find(path)


def cannot_nest_deeper(text: str, max_depth: int = MAX_DEPTH) -> bool:
    """True when no key path of `text` can be longer than `max_depth`.

    Each level of a key path beyond the first needs a character of its
    own: a '.' between key parts, a '[' for a header, an array-of-tables
    index or an array element, a '{' for an inline table. Counting them all
    (in strings and comments too) bounds every path, at C speed."""
    return 1 + text.count(".") + text.count("[") + text.count("{") <= max_depth


class LazyLocations:
    """The `Locations` of one text, scanned on the first `find`: most
    documents never have an error to locate."""

    def __init__(self, text: str, max_depth: int = MAX_DEPTH) -> None:
        self._text = text
        self._max_depth = max_depth
        self._scanned: Locations | None = None

    def find(self, path: _Path) -> Position:
        if self._scanned is None:
            # Two threads may both scan: the same answer, so no lock.
            self._scanned = locate(self._text, self._max_depth)
        return self._scanned.find(path)

    def find_value(self, path: _Path) -> Position:
        if self._scanned is None:
            self._scanned = locate(self._text, self._max_depth)
        return self._scanned.find_value(path)


def locate_later(text: str, max_depth: int = MAX_DEPTH) -> Locations | LazyLocations:
    """What `locate` gives, scanned now only when `text` might nest deeper
    than `max_depth` (the nesting guard must answer before `tomllib`)."""
    return LazyLocations(text, max_depth) if cannot_nest_deeper(text, max_depth) else locate(text, max_depth)


def locate(text: str, max_depth: int = MAX_DEPTH) -> Locations:
    scanner = _Scanner(text, max_depth)
    try:
        scanner.document()
    except _TooDeep as error:
        return Locations(scanner.found, scanner.position(error.offset), scanner.values)
    except (IndexError, ValueError, RecursionError):
        pass  # lenient by design: keep what was found before the surprise
    return Locations(scanner.found, values=scanner.values)


class _TooDeep(Exception):
    def __init__(self, offset: int) -> None:
        super().__init__(offset)
        self.offset = offset


class _Scanner:
    def __init__(self, text: str, max_depth: int) -> None:
        self.text = text
        self.max_depth = max_depth
        self.pos = 0
        self.found: dict[_Path, Position] = {}
        self.values: dict[_Path, Position] = {}
        self.array_tables: dict[_Path, int] = {}
        self.line_starts = [0] + [match.end() for match in _NEWLINE.finditer(text)]

    # --- positions ---------------------------------------------------------

    def position(self, offset: int) -> Position:
        line = bisect.bisect_right(self.line_starts, offset)
        return line, offset - self.line_starts[line - 1] + 1

    def record(self, path: _Path, offset: int) -> None:
        """Record `path` and its unrecorded prefixes; every recorded path's
        prefixes are recorded too, so the walk up stops at the first one found."""
        if len(path) > self.max_depth:
            raise _TooDeep(offset)
        position = None
        for end in range(len(path), 0, -1):
            prefix = path if end == len(path) else path[:end]
            if prefix in self.found:
                return
            position = position or self.position(offset)
            self.found[prefix] = position

    # --- reading -------------------------------------------------------------

    def peek(self, length: int = 1) -> str:
        return self.text[self.pos : self.pos + length]

    def skip_blank(self, newlines: bool) -> None:
        blank = _BLANK_LINES if newlines else _BLANK
        while True:
            self.pos = _matched_end(blank, self.text, self.pos)
            if self.peek() != "#":
                return
            end = self.text.find("\n", self.pos)
            self.pos = len(self.text) if end < 0 else end

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
        path = self.key_path(start)
        self.pos += 2 if is_array else 1
        if is_array:
            index = self.array_tables.get(path, -1) + 1
            self.array_tables[path] = index
            path = (*path, index)
        self.record(path, start)
        return path

    def key_path(self, start: int | None = None) -> _Path:
        """A dotted key; `start` is where a path too deep is reported (default: here)."""
        start = self.pos if start is None else start
        parts: list[str] = []
        while True:
            self.skip_blank(newlines=False)
            parts.append(self.key_part())
            if len(parts) > self.max_depth:
                raise _TooDeep(start)
            self.skip_blank(newlines=False)
            if self.peek() != ".":
                return tuple(parts)
            self.pos += 1

    def key_part(self) -> str:
        quote = self.peek()
        if quote in "\"'":
            return self.string()
        start = self.pos
        self.pos = _matched_end(_BARE_KEY, self.text, self.pos)
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
        if path not in self.values:
            self.values[path] = self.position(self.pos)
        char = self.peek()
        if char == "{":
            self.inline_table(path)
        elif char == "[":
            self.array(path)
        elif char in "\"'":
            self.string()
        else:
            start = self.pos
            self.pos = _matched_end(_PLAIN_VALUE, self.text, self.pos)
            if self.pos == start:  # not TOML; without this an array would loop here
                raise ValueError("not a value")

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
        found = -1
        while True:
            if found < self.pos:
                found = self.text.find(delimiter, self.pos)
                if found < 0:
                    raise ValueError("unterminated string")
            escape = self.text.find("\\", self.pos, found) if quote == '"' else -1
            if escape >= 0:
                self.pos = escape + 2  # an escaped character may be the quote
                continue
            self.pos = found
            # A multi-line string may end with up to two extra quotes.
            while len(delimiter) == 3 and self.text.startswith(quote * 4, self.pos):
                self.pos += 1
            end = self.pos
            self.pos += len(delimiter)
            return _unescape(self.text[start:end]) if quote == '"' else self.text[start:end]


_ESCAPE = re.compile(r"\\(?:u([0-9A-Fa-f]{4})|U([0-9A-Fa-f]{8})|(.))", re.DOTALL)
_SHORT_ESCAPES = {"b": "\b", "t": "\t", "n": "\n", "f": "\f", "r": "\r", '"': '"', "\\": "\\"}


def _unescape(raw: str) -> str:
    """Decode a basic string's escapes as TOML does, to compare key names."""
    return _ESCAPE.sub(_unescaped, raw) if "\\" in raw else raw


def _unescaped(match: re.Match[str]) -> str:
    code = match.group(1) or match.group(2)
    if code is not None:
        return chr(int(code, 16)) if int(code, 16) <= 0x10FFFF else match.group()
    return _SHORT_ESCAPES.get(match.group(3), match.group())
