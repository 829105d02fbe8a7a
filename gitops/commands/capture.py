"""`gitops capture tail ENDPOINT` and `gitops capture grep --commit SHA`: read a file sink.

A file sink is a directory of JSON Lines files, one per proxy worker per hour
(`proxy.observability.capture`); on a multi-node cluster each node has its own, so these
read the directory they are given (copy or mount the nodes' directories to
read them together). Records are printed one JSON object a line, oldest first,
re-encoded as ASCII JSON so a record cannot put control characters on a
terminal; a line that is not a record is skipped and counted on stderr.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import deque
from pathlib import Path
from typing import Any, Iterator
from urllib.parse import unquote, urlsplit

from gitops.errors import UserError

__all__ = ["capture_command", "records"]

_MIN_SHA = 4


def capture_command(args: argparse.Namespace) -> int:
    directory = _directory(args.sink)
    skipped = _Skipped()
    if args.capture_verb == "tail":
        found: Iterator[dict[str, Any]] = (r for r in records(directory, skipped) if r.get("endpoint") == args.endpoint)
        shown = list(deque(found, maxlen=args.lines)) if args.lines > 0 else []
    else:
        sha = args.commit.lower()
        if len(sha) < _MIN_SHA or any(c not in "0123456789abcdef" for c in sha):
            raise UserError(f"--commit {args.commit!r}: give at least {_MIN_SHA} hex digits of a commit")
        shown = [
            r for r in records(directory, skipped)
            if isinstance(r.get("commit"), str) and r["commit"].startswith(sha)
            and (args.endpoint is None or r.get("endpoint") == args.endpoint)
        ]
    for record in shown:
        sys.stdout.write(json.dumps(record, ensure_ascii=True) + "\n")
    if skipped.lines:
        print(f"gitops capture: skipped {skipped.lines} line(s) that are not capture records", file=sys.stderr)
    return 0


class _Skipped:
    lines = 0


def _directory(sink: str) -> Path:
    if sink.startswith("file://"):
        parts = urlsplit(sink)
        if parts.netloc not in ("", "localhost"):
            raise UserError(f"--sink {sink!r}: a file sink is 'file:///ABSOLUTE/PATH' (this host's)")
        path = Path(unquote(parts.path))
    elif "://" in sink:
        raise UserError(f"--sink {sink!r}: only file sinks can be read ('file:///DIR' or a directory)")
    else:
        path = Path(sink)
    if not path.is_dir():
        raise UserError(f"--sink {sink!r}: {path} is not a directory of capture records")
    return path


def records(directory: Path, skipped: _Skipped | None = None) -> Iterator[dict[str, Any]]:
    """Every record in `directory`, oldest first (by the hour in their file names, then their time)."""
    files = sorted(directory.glob("*.jsonl"), key=lambda p: (p.stem.rsplit("-", 1)[-1], p.name))
    hour: list[dict[str, Any]] = []
    current = None
    for path in files:
        stamp = path.stem.rsplit("-", 1)[-1]
        if stamp != current:
            yield from sorted(hour, key=lambda r: str(r.get("time", "")))
            hour, current = [], stamp
        with path.open(encoding="utf-8", errors="replace") as lines:
            for line in lines:
                try:
                    record = json.loads(line)
                except ValueError:
                    record = None
                if isinstance(record, dict) and "endpoint" in record:
                    hour.append(record)
                elif skipped is not None:
                    skipped.lines += 1
    yield from sorted(hour, key=lambda r: str(r.get("time", "")))
