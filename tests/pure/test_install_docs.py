"""The install lines users read: one block, the same in the README and the tutorial, naming the
wheel of this version (the install tier runs it: tests/support/install.py), and no page telling
anyone to `pip install ray-gitops` from PyPI, where there is no release (issue 49, row 1)."""

from __future__ import annotations

import re
import tomllib

from tests.support.docs import ROOT
from tests.support.install import install_block


def _version() -> str:
    return str(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"])


def test_the_readme_and_the_tutorial_install_the_same_way() -> None:
    assert install_block(ROOT / "README.md") == install_block(ROOT / "docs" / "tutorial.md")


def test_the_install_block_installs_this_versions_wheel_into_a_venv() -> None:
    lines = install_block(ROOT / "README.md").splitlines()
    wheel = f"ray_gitops-{_version()}-py3-none-any.whl"
    assert lines == [
        "python3.11 -m venv ~/.venvs/gitops && . ~/.venvs/gitops/bin/activate",
        f"pip install ./{wheel}",
        "gitops --version",
    ]


def test_every_git_install_line_names_this_versions_tag() -> None:
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")), *sorted((ROOT / "docs" / "ci").glob("*.yml"))]
    found = 0
    for page in pages:
        for tag in re.findall(r"git\+https://\S+?/ray-gitops@(v[\w.]+)", page.read_text()):
            assert tag == f"v{_version()}", page
            found += 1
    assert found >= 4


def test_no_page_says_to_install_from_pypi() -> None:
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")), *sorted((ROOT / "docs" / "ci").glob("*.yml"))]
    for page in pages:
        for line in page.read_text().splitlines():
            said = re.search(r"pip(x)? install (-U )?ray-gitops\b(?! @)", line)
            assert said is None or "finds nothing" in line, f"{page}: {line.strip()}"
