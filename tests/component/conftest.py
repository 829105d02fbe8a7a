"""Fixtures of tests/component, from tests/support."""

from __future__ import annotations

from tests.support.agent_loop import spec_repo  # noqa: F401 (fixtures)
