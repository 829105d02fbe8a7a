"""docs/ is one map: every page is reachable from docs/index.md, every relative
link lands on a file and every folder of ours a page names is there, the README stays a door (200 lines at most), nothing is
said twice (no table documented on two pages), and the glossary of
docs/architecture.md names types the code has.

Two tables document the same thing when they share their first column's keys
(at least two, and at least half of the smaller table's), under the same
header row or, for three keys or more, under any header: the second copy
drifts from the first (as the README's copy of the proxy's answers did from
docs/reference/http.md). Tables on one page may share keys: the generated CLI
page lists `--json` under every command that has it.
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
INDEX = DOCS / "index.md"
README = ROOT / "README.md"
README_MOST_LINES = 200

_FENCE = re.compile(r"^```.*?^```", re.S | re.M)
_CODE_SPAN = re.compile(r"`[^`\n]*`")
_LINK = re.compile(r"\]\(([^)\s]+)\)")
_RULE = re.compile(r"\s*\|?\s*:?-{3,}.*")


def pages() -> list[Path]:
    return [README, *sorted(DOCS.rglob("*.md"))]


def links(page: Path) -> list[str]:
    """The relative link targets of a page's text (not of its code), without anchors."""
    text = _CODE_SPAN.sub("", _FENCE.sub("", page.read_text()))
    targets = [target.split("#", 1)[0] for target in _LINK.findall(text)]
    return [target for target in targets if target and not re.match(r"[a-z][a-z0-9+.-]*:", target)]


def test_every_relative_link_lands_on_a_file() -> None:
    broken = [f"{page.relative_to(ROOT)} -> {target}"
              for page in pages() for target in links(page) if not (page.parent / target).exists()]
    assert broken == []


def test_every_directory_a_page_names_is_there() -> None:
    """`gitops/reconcile/`, `contrib/kubernetes/`: a room or folder of ours that moved is named where it is now."""
    ours = {path.name for path in ROOT.iterdir() if path.is_dir() and not path.name.startswith(".")}
    gone = [
        f"{page.relative_to(ROOT)} names {folder}" for page in pages()
        for folder in re.findall(r"`((?:[\w.-]+/)+)`", _FENCE.sub("", page.read_text()))
        if folder.split("/")[0] in ours and not (ROOT / folder).is_dir()
    ]
    assert gone == []


def reachable(start: Path) -> set[Path]:
    seen, todo = {start.resolve()}, [start.resolve()]
    while todo:
        page = todo.pop()
        for target in links(page):
            found = (page.parent / target).resolve()
            if found.suffix == ".md" and found.is_file() and found not in seen:
                seen.add(found)
                todo.append(found)
    return seen


def test_every_docs_page_is_reachable_from_the_index() -> None:
    found = reachable(INDEX)
    unreached = [str(page.relative_to(ROOT)) for page in sorted(DOCS.rglob("*.md")) if page.resolve() not in found]
    assert unreached == [], "link them from docs/index.md (or from a page it links)"


def test_the_readme_is_a_door() -> None:
    lines = README.read_text().count("\n")
    assert lines <= README_MOST_LINES, f"README.md has {lines} lines: move what is not a door into docs/"
    assert "docs/index.md" in links(README)


# --- nothing said twice -----------------------------------------------------------


def cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def tables(text: str) -> list[tuple[int, tuple[str, ...], list[str]]]:
    """Each table of a page's text (not of its code): its line, header row and first column."""
    lines = _FENCE.sub(lambda block: "\n" * block.group(0).count("\n"), text).splitlines()
    found, n = [], 0
    while n < len(lines) - 1:
        if lines[n].lstrip().startswith("|") and _RULE.fullmatch(lines[n + 1]):
            header = tuple(cell.lower() for cell in cells(lines[n]))
            end = n + 2
            while end < len(lines) and lines[end].lstrip().startswith("|"):
                end += 1
            found.append((n + 1, header, [cells(line)[0] for line in lines[n + 2:end]]))
            n = end
        else:
            n += 1
    return found


def same_table(a: tuple[tuple[str, ...], list[str]], b: tuple[tuple[str, ...], list[str]]) -> bool:
    (header_a, keys_a), (header_b, keys_b) = a, b
    shared = set(keys_a) & set(keys_b)
    smaller, larger = sorted((len(set(keys_a)), len(set(keys_b))))
    if len(shared) < 2 or len(shared) * 2 < smaller:
        return False
    # Under other headers, most of both: a few names two unrelated tables share (the examples of
    # `gitops init` and the keys of [backends.NAME]: models, secrets, llm) are no copy.
    return header_a == header_b or (len(shared) >= 3 and len(shared) * 2 >= larger)


def twice_documented(texts: dict[str, str]) -> list[str]:
    found = [(name, line, header, keys) for name, text in texts.items() for line, header, keys in tables(text)]
    return [
        f"{a[0]}:{a[1]} and {b[0]}:{b[1]} document the same table ({', '.join(a[2])})"
        for a, b in itertools.combinations(found, 2)
        if a[0] != b[0] and same_table((a[2], a[3]), (b[2], b[3]))
    ]


def test_no_two_pages_document_the_same_table() -> None:
    twice = twice_documented({str(page.relative_to(ROOT)): page.read_text() for page in pages()})
    assert twice == [], "keep one copy and link to it"


ANSWERS = """| case | answer |
| --- | --- |
| no route matches | 404 |
| route matches, method not allowed | 405 with `Allow` |
| handler raised | 500 |
"""


def test_a_table_copied_to_another_page_is_found_and_a_table_sharing_a_row_is_not() -> None:
    copied = ANSWERS.replace("| 500 |", "| 500; the traceback goes to the log only |")
    assert twice_documented({"http.md": ANSWERS, "README.md": "Intro.\n\n" + copied}) == [
        "http.md:1 and README.md:3 document the same table (case, answer)"
    ]
    renamed = copied.replace("| case | answer |", "| request | reply |").replace(
        "| handler raised |", "| no route matches, again |\n| handler raised |")
    assert len(twice_documented({"http.md": ANSWERS, "guide.md": renamed})) == 1
    one_row = "| case | answer |\n| --- | --- |\n| no route matches | 404 |\n| a WebSocket | 403 |\n| x | y |\n"
    assert twice_documented({"http.md": ANSWERS, "ws.md": one_row}) == []
    assert twice_documented({"cli.md": ANSWERS + "\n" + ANSWERS}) == []
    keys = "| key | type |\n| --- | --- |\n" + "".join(f"| k{n} | t |\n" for n in range(20)) + "| models | t |\n| llm | t |\n"
    examples = "| example | guide |\n| --- | --- |\n| models | a |\n| llm | b |\n| k1 | c |\n| other | d |\n"
    assert twice_documented({"spec.md": keys, "tutorial.md": examples}) == []  # three names in common, no copy
    assert twice_documented({"a.md": "```\n" + ANSWERS + "```\n", "b.md": ANSWERS}) == []


# --- the glossary names what the code has -----------------------------------------

GLOSSARY_WORDS = (
    "backend", "endpoint", "replica", "route", "traffic split", "shadow", "goal", "tick", "plan", "apply",
    "rollout", "evidence", "promotion", "environment", "sync window", "snapshot", "long poll", "handle", "limits",
    "body view", "token budget",
)


def glossary() -> dict[str, tuple[str, str]]:
    text = (DOCS / "architecture.md").read_text().split("\n## Glossary\n", 1)[1].split("\n## ", 1)[0]
    [(_, header, _)] = tables(text)
    assert header == ("word", "means", "in the code")
    rows = [cells(line) for line in text.splitlines() if line.startswith("| ") and not _RULE.fullmatch(line)]
    return {word: (means, code) for word, means, code in rows[1:]}


def class_names() -> set[str]:
    packages = [path.parent for path in ROOT.glob("*/__init__.py")]
    return {name for package in packages for path in package.rglob("*.py")
            for name in re.findall(r"^class (\w+)", path.read_text(), re.M)}


def test_the_glossary_has_each_word_once_and_its_types_exist() -> None:
    words = glossary()
    assert sorted(words) == sorted(GLOSSARY_WORDS)
    ours = class_names()
    named = {name for _, code in words.values() for name in re.findall(r"`([A-Z]\w+)`", code)}
    assert named and sorted(named - ours) == []
