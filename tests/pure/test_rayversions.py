"""Joining a cluster of another Ray or Python version: one line naming both."""

from __future__ import annotations

from gitops.process.ray_versions import Runtime, compare, mismatch_line
from tests.support.rayversions import RAY_ERROR

# As ray.init raises it (ray._private.utils.check_version_info).


def test_same_versions_are_compatible() -> None:
    assert compare(Runtime("2.60.0", "3.11.7"), Runtime("2.60.0", "3.11.7")) is None


def test_another_ray_release_is_named_with_ours() -> None:
    line = compare(Runtime("2.52.0", "3.11.7"), Runtime("2.60.0", "3.11.7"))
    assert line is not None and "Ray 2.52.0" in line and "Ray 2.60.0" in line and "\n" not in line


def test_another_python_patch_release_is_a_mismatch() -> None:
    assert compare(Runtime("2.60.0", "3.11.9"), Runtime("2.60.0", "3.11.7")) is not None


def test_rays_mismatch_error_becomes_one_line_naming_both_sides() -> None:
    assert mismatch_line(RAY_ERROR) == (
        "the cluster runs Ray 2.52.0 on Python 3.11.9, this agent Ray 2.60.0 on Python 3.11.7; "
        "a Ray driver needs the cluster's versions: install ray==2.52.0 into a Python 3.11.9 environment"
    )


def test_other_ray_errors_are_not_a_mismatch() -> None:
    assert mismatch_line("Could not find any running Ray instance. Please specify the one to connect to") is None
