"""The generated pages of docs/, rendered from the code they describe.

`python -m docgen` (or `make docs`) rewrites them; `python -m docgen
--check` exits 1 naming every page that differs from what the code says,
and a test runs that check so a page cannot drift. Each page has one
renderer: `docgen.cli` (the argument parser), `docgen.metrics` (the agent's
and the proxy's metric registries), `docgen.spec` (the spec models).

This package is repository tooling, not part of the installed product: it
reads the agent and the proxy side by side, which neither may do itself.
Must not: be imported by gitops, controller, proxy, replica or vocabulary.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Mapping

__all__ = ["ROOT", "PAGES", "render", "stale"]

ROOT = Path(__file__).resolve().parents[1]


def _cli() -> str:
    from docgen.cli import render_cli
    from gitops.cli import build_parser

    return render_cli(build_parser())


def _metrics() -> str:
    from docgen.metrics import render_metrics
    from gitops.loop.metrics import AgentMetrics
    from proxy.observability.metrics import ProxyMetrics

    return render_metrics({"agent": AgentMetrics().registry, "proxy": ProxyMetrics().registry})


def _spec() -> str:
    from docgen.spec import render_spec

    return render_spec()


PAGES: Mapping[str, Callable[[], str]] = {
    "docs/reference/cli.md": _cli,
    "docs/reference/metrics.md": _metrics,
    "docs/reference/spec.md": _spec,
}


def render(root: Path = ROOT) -> dict[Path, str]:
    """Every generated page, keyed by its path under `root`."""
    return {root / page: make() for page, make in PAGES.items()}


def stale(root: Path = ROOT) -> list[Path]:
    """The pages whose file differs from what the code renders now."""
    return [path for path, text in render(root).items() if not path.is_file() or path.read_text() != text]
