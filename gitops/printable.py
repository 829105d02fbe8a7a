"""How text from outside reaches a terminal: every printed string, escaped.

Keys, names, values and file names come from a repository anyone with push
rights writes, so they may hold control characters (an escape sequence that
rewrites the terminal, a newline that forges a log line, bidi overrides that
reorder what is read) or, in a file name, bytes that are not UTF-8 (Python
holds them as lone surrogates, which no terminal encoding can print). Every
such character is shown as an escape instead:

- `printable`: for people (error lines, text logs): `\\n`, `\\r`, `\\t`,
  `\\x1b`, `\\u202e`; a non-UTF-8 byte of a file name as `\\xff`;
- `printable_lines`: the same for text of several lines (a table, an
  exception's traceback), whose line breaks are kept;
- `printable_json`: for a JSON document's text, as `\\u001b` escapes, so the
  document stays valid and its values decode to the original strings.

Backslashes are left as they are, so escaping twice changes nothing (an
error line escaped once is logged, and escaped again, unchanged). Owned
here: which characters are unsafe. Not here: where text is printed.
"""

from __future__ import annotations

import re

__all__ = ["printable", "printable_json", "printable_lines"]

# C0 and C1 controls and DEL; the Arabic letter mark, zero-width and
# direction marks, line and paragraph separators, bidi embeddings, overrides
# and isolates; the byte-order mark; lone surrogates (undecodable bytes).
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff\ud800-\udfff]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
# Python decodes an undecodable byte B of a file name as U+DC00 + B.
_ESCAPED_BYTES = range(0xDC80, 0xDD00)


def _human(match: re.Match[str]) -> str:
    char = match.group()
    code = ord(char)
    if char in _NAMED:
        return _NAMED[char]
    if code in _ESCAPED_BYTES:
        return f"\\x{code - 0xDC00:02x}"
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: str) -> str:
    """`text` as one line a terminal shows as written, unsafe characters escaped."""
    return _UNSAFE.sub(_human, text)


def printable_lines(text: str) -> str:
    """`text` with its line breaks kept and every other unsafe character escaped."""
    return "\n".join(printable(line) for line in text.split("\n"))


def printable_json(text: str) -> str:
    """A JSON document's text with every unsafe character as a `\\uXXXX` escape."""
    return _UNSAFE.sub(lambda match: f"\\u{ord(match.group()):04x}", text)
