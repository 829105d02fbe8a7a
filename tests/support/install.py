"""The install tier's fixtures: the wheel as built for users, installed the way users install it.

`build_wheel` runs `python -m build --wheel` on this checkout; `Installed`
is a fresh virtualenv outside the checkout with that wheel installed
without extras (pip may use its cache), and runs its console scripts from
a directory of the test's choosing with an environment free of this test
session's Ray and virtualenv. `Installed.as_documented` makes it by running
the README's install block as written (`install_block`: the one marked
`<!-- install -->`, the same in docs/tutorial.md), in a shell whose home is
a temp dir and whose directory holds the wheel, as a user's does after the
download. A plain module: the test modules choose their fixture scopes.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

__all__ = ["REPO_ROOT", "build_wheel", "Installed", "clean_env", "install_block"]

_INSTALL_BLOCK = re.compile(r"<!-- install -->\n```sh\n(?P<body>.*?)```", re.DOTALL)

REPO_ROOT = Path(__file__).resolve().parents[2]


# A user joining a cluster runs with its token settings, like the cluster's other nodes.
_RAY_CREDENTIALS = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")


def clean_env() -> dict[str, str]:
    """The environment a user's shell would have: no venv, no Ray settings of this
    session but the cluster's token ones, byte-compiling on (build warns
    when PYTHONDONTWRITEBYTECODE is set), and no enclosing `make` (whose
    MAKELEVEL makes a `make` run inside it print "Entering directory")."""
    dropped = ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONDONTWRITEBYTECODE", "MAKELEVEL", "MAKEFLAGS", "MFLAGS")
    return {
        k: v for k, v in os.environ.items()
        if (not k.startswith("RAY_") or k in _RAY_CREDENTIALS) and k not in dropped
    }


def build_wheel(outdir: Path) -> tuple[Path, str]:
    """Build the wheel into `outdir`; returns it and everything the build printed."""
    done = subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--outdir", str(outdir), str(REPO_ROOT)],
        capture_output=True, text=True, env=clean_env(), timeout=600,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    wheels = sorted(outdir.glob("ray_gitops-*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0], output


def install_block(page: Path) -> str:
    """The shell lines of `page`'s one block marked `<!-- install -->`."""
    blocks = [match["body"] for match in _INSTALL_BLOCK.finditer(page.read_text())]
    assert len(blocks) == 1, f"{page}: {len(blocks)} install blocks"
    return blocks[0]


@dataclass(frozen=True)
class Installed:
    """A virtualenv with the wheel installed, and nothing else of ours."""

    venv: Path

    @classmethod
    def as_documented(cls, home: Path, wheel: Path) -> Installed:
        """The README's install block run as written: `~` is `home`, the wheel downloaded
        into the shell's directory; the venv is the one the block makes."""
        downloads = home / "Downloads"
        downloads.mkdir(parents=True)
        shutil.copy(wheel, downloads / wheel.name)
        env = {**clean_env(), "HOME": str(home)}
        if shutil.which("python3.11", path=env.get("PATH")) is None and sys.version_info[:2] == (3, 11):
            shims = home / "shims"  # this interpreter under the name the page uses
            shims.mkdir()
            (shims / "python3.11").symlink_to(sys.executable)
            env["PATH"] = f"{shims}{os.pathsep}{env.get('PATH', '')}"
        block = install_block(REPO_ROOT / "README.md")
        done = subprocess.run(
            ["bash", "-c", f"set -euo pipefail\n{block}"], cwd=downloads, capture_output=True, text=True,
            env=env, timeout=900,
        )
        assert done.returncode == 0, f"{block}\n{done.stdout}\n{done.stderr}"
        venv = home / ".venvs" / "gitops"
        assert (venv / "bin" / "gitops").exists(), f"{block} made no {venv}"
        return cls(venv)

    @property
    def bin(self) -> Path:
        return self.venv / "bin"

    def env(self) -> dict[str, str]:
        """A shell's environment with this venv's scripts first on PATH."""
        env = clean_env()
        env["PATH"] = f"{self.bin}{os.pathsep}{env.get('PATH', '')}"
        return env

    def gitops(self, *args: str, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.bin / "gitops"), *args], cwd=cwd, capture_output=True, text=True,
            env=self.env(), timeout=timeout,
        )
