"""`python -m docgen [--check]`: rewrite docs/ pages, or fail naming the stale ones."""

from __future__ import annotations

import sys

from docgen import ROOT, render, stale


def main(argv: list[str]) -> int:
    if argv == ["--check"]:
        old = stale()
        for path in old:
            print(f"{path.relative_to(ROOT)} is out of date: run `make docs`", file=sys.stderr)
        return 1 if old else 0
    if argv:
        print("usage: python -m docgen [--check]", file=sys.stderr)
        return 2
    for path, text in render().items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        print(f"wrote {path.relative_to(ROOT)}")
    return 0


sys.exit(main(sys.argv[1:]))
