"""The install tier's session fixtures: the wheel, built once, installed once by the README's lines."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.install import Installed, build_wheel


@dataclass(frozen=True)
class Built:
    wheel: Path
    output: str


@pytest.fixture(scope="session")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    wheel, output = build_wheel(tmp_path_factory.mktemp("dist"))
    return Built(wheel, output)


@pytest.fixture(scope="session")
def installed(built: Built, tmp_path_factory: pytest.TempPathFactory) -> Installed:
    """Installed by the README's install lines, as written."""
    return Installed.as_documented(tmp_path_factory.mktemp("user") / "home", built.wheel)
