"""docs/ says what the code does: generated pages are current, examples validate,
every status reason is explained, and nothing points outside the repository."""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

import docgen
from docgen.metrics import MetricRow, metric_rows
from gitops.cli import main
from gitops.commands.init import SCAFFOLD
from gitops.loop.metrics import AgentMetrics
from proxy.observability.metrics import ProxyMetrics
from tests.support.docs import ROOT

PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")])
# A TOML block preceded by one of these comments is left out: a deliberate fragment (say, one
# table of a larger spec), another TOML file (a notify file, an editor's config), or a file of a
# `gitops init --example` (tests/component/test_init_examples.py checks it is that file, and validates it whole).
SKIP_MARKERS = ("<!-- partial -->", "<!-- not a spec -->", "<!-- example: ")
_TOML_BLOCK = re.compile(r"(?P<before>[^\n]*)\n+```toml\n(?P<body>.*?)```", re.DOTALL)


def toml_blocks() -> list[tuple[str, str]]:
    blocks = []
    for page in PAGES:
        text = page.read_text()
        for n, match in enumerate(_TOML_BLOCK.finditer("\n" + text)):
            if not match["before"].strip().startswith(SKIP_MARKERS):
                blocks.append((f"{page.relative_to(ROOT)}#{n + 1}", match["body"]))
    return blocks


def test_generated_pages_are_current() -> None:
    assert [str(path.relative_to(ROOT)) for path in docgen.stale()] == [], "run `make docs`"


@pytest.mark.parametrize("registry", [AgentMetrics().registry, ProxyMetrics().registry], ids=["agent", "proxy"])
def test_metrics_page_lists_what_the_registry_exports(registry) -> None:
    exported = {
        (family.name + ("_total" if family.type == "counter" else ""), family.type, family.documentation)
        for family in text_string_to_metric_families(generate_latest(registry).decode())
    }
    page = (ROOT / "docs" / "reference" / "metrics.md").read_text()
    rows = metric_rows(registry)
    assert {(row.name, row.type, row.help) for row in rows} == exported
    for row in rows:
        assert _page_row(row) in page


def _page_row(row: MetricRow) -> str:
    return f"| `{row.name}` | {row.type} | {', '.join(f'`{label}`' for label in row.labels) or '-'} | {row.help} |"


@pytest.mark.parametrize("name, body", toml_blocks(), ids=[name for name, _ in toml_blocks()])
def test_toml_block_validates(name: str, body: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    shutil.copytree(ROOT / "deployments" / "apps", tmp_path / "deployments" / "apps")
    for path, text in SCAFFOLD.items():
        if path.endswith(".py"):
            (tmp_path / path).write_text(text)
    (tmp_path / "deployments" / "example.toml").write_text(body)
    for secret in tomllib.loads(body).get("secrets", {}).values():
        # An age file's shape is checked without a key: a header and nothing readable is enough.
        (tmp_path / secret["file"]).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / secret["file"]).write_bytes(b"age-encryption.org/v1\n-> X25519 example\n")
    code = main(["validate", str(tmp_path / "deployments"), "--root", str(tmp_path)])
    assert code == 0, capsys.readouterr().err


def test_the_readme_and_the_spec_reference_have_checked_examples() -> None:
    pages = {name.split("#")[0] for name, _ in toml_blocks()}
    assert {"README.md", "docs/reference/spec.md"} <= pages


def test_troubleshooting_explains_every_status_reason() -> None:
    """Every status, condition and reason: the CamelCase strings of gitops/status/rollup.py."""
    import gitops.status.rollup

    tree = ast.parse((ROOT / "gitops" / "status" / "rollup.py").read_text())
    literals = {node.value for node in ast.walk(tree) if isinstance(node, ast.Constant) and isinstance(node.value, str)}
    shown = {word for word in literals if re.fullmatch(r"[A-Z][a-z]+(?:[A-Z][a-z]+)*", word)}
    shown -= set(gitops.status.rollup.__all__)
    page = (ROOT / "docs" / "reference" / "troubleshooting.md").read_text()
    assert sorted(word for word in shown if f"`{word}`" not in page) == []


def test_nothing_refers_to_files_outside_the_repository() -> None:
    files = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT, capture_output=True, text=True, check=True,
    ).stdout.split()
    needles = ("../" + "shared", "/work/" + "shared")
    offending = [
        name for name in files
        if (ROOT / name).is_file() and any(n in (ROOT / name).read_text(errors="replace") for n in needles)
    ]
    assert offending == []
